"""Correcting for a sampler that is not the trained policy: importance-sampling weights.

A fast inference engine (vLLM) samples the completions, then the training code recomputes
their log-probs; the numerics differ (kernels, precision), so the tokens were in fact
drawn from `sampling` and not from `old`. Truncated importance sampling (TIS, Yao et al.
2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training")
multiplies each token's loss by `min(old / sampling, C)`; TRL's
`vllm_importance_sampling_mode` adds masking instead of truncation (MIS) and one weight
per sequence instead of per token. TRL 1.16's default, and ours, is `sequence_mask` with
`clip_max = 3.0`: a completion whose whole-sequence ratio leaves `[clip_min, clip_max]`
drops out of the loss.

:func:`off_policy_sequence_mask` is the other guard against stale samples: DeepSeek-V3.2
drops a completion with a negative advantage when its mean per-token KL from the sampler
exceeds a threshold. GRPO's loss is its only caller today; it lives here, beside the
weights, because it reads the same two log-probs (trainer and sampler) and could guard any
algorithm's loss the same way.

The weights carry no gradient: they are computed once per generation batch.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch

from course_lib.ops.kl import check_same_shape

Tensor = torch.Tensor

#: The band a token's trainer/sampler probability ratio is expected to stay in: TIS's usual cap
#: of 2 and its mirror 1/2, i.e. a per-token log-prob gap of at most log 2 either way.
#: `sampling/token_ratio_outside_band` is the share of completion tokens outside it.
RATIO_BAND = (0.5, 2.0)

#: The correction's modes, once: the annotation of `RLConfig.vllm_importance_sampling_mode`.
ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
IS_MODES: tuple[str, ...] = get_args(ISMode)


def check_is_settings(mode: str, clip_min: float | None, clip_max: float | None,
                      prefix: str = "vllm_importance_sampling_") -> None:
    """Raise a `ValueError` naming the field unless mode and bounds make a usable correction."""
    if mode not in IS_MODES:
        raise ValueError(f"{prefix}mode={mode!r} is not a known mode. Fix: use one of {', '.join(IS_MODES)} "
                         "(TRL 1.16's default is sequence_mask).")
    for name, value in (("clip_min", clip_min), ("clip_max", clip_max)):
        if value is not None and not value > 0:
            raise ValueError(f"{prefix}{name}={value!r} must be > 0 or None. Fix: use e.g. clip_max=3.0 "
                             "(TRL's default) and clip_min=None.")
    if clip_min is not None and clip_max is not None and clip_min >= clip_max:
        raise ValueError(f"{prefix}clip_min={clip_min!r} >= {prefix}clip_max={clip_max!r}: no ratio could "
                         "pass. Fix: make clip_min smaller than clip_max (e.g. 0.5 and 3.0).")
    if mode.endswith("_truncate") and clip_min is None and clip_max is None:
        raise ValueError(f"{prefix}mode={mode!r} truncates to [clip_min, clip_max] but both are None. "
                         f"Fix: set {prefix}clip_max (e.g. 3.0).")


def importance_sampling_ratio(
    old_logps: Tensor,
    sampling_logps: Tensor,
    mask: Tensor,
    *,
    mode: ISMode = "token_truncate",
    clip_max: float | None = 2.0,
    clip_min: float | None = None,
) -> Tensor:
    """Importance weight `old / sampling` of each token (or sequence), truncated or masked.

    The four modes are those of TRL's `vllm_importance_sampling_mode`:
    `*_truncate` clamps the ratio into `[clip_min, clip_max]` (TIS); `*_mask` sets ratios
    outside that range to 0 (the token or sequence drops out of the loss). `sequence_*`
    uses one ratio per completion, `exp(sum_t (old - sampling))`.

    Args:
        old_logps: `(B, T)` log-probs of the sampled tokens under the training code's
            policy (the "old" policy of the PPO ratio).
        sampling_logps: `(B, T)` log-probs reported by the engine that sampled them.
            NaN entries (the engine could not score a token) count as "no correction".
        mask: `(B, T)` 1 for completion tokens.
        mode: see above.
        clip_max: upper bound C (TRL's deprecated `vllm_importance_sampling_cap`); `None` for
            no upper bound.
        clip_min: lower bound; `None` for none.

    Returns:
        `(B, T)` for token modes, `(B, 1)` for sequence modes. Masked positions hold
        **1** (their log-difference is set to 0 before the exponential), so the weight
        is harmless where the mask is later applied; a fully masked row gets a sequence
        weight of 1.
    """
    check_same_shape(old_logps=old_logps, sampling_logps=sampling_logps, mask=mask)
    if clip_max is not None and clip_max <= 0:
        raise ValueError(f"clip_max={clip_max!r} must be > 0 (TIS uses e.g. 2.0) or None")
    if clip_min is not None and clip_max is not None and clip_min >= clip_max:
        raise ValueError(f"clip_min={clip_min!r} >= clip_max={clip_max!r}: make clip_min the smaller bound")
    log_diff = (old_logps - sampling_logps) * mask.to(old_logps.dtype)
    log_diff = torch.nan_to_num(log_diff, nan=0.0)
    if mode.startswith("sequence"):
        log_diff = log_diff.sum(dim=-1, keepdim=True)  # (B, 1)
    elif not mode.startswith("token"):
        raise ValueError(
            f"mode={mode!r} is unknown; use 'token_truncate', 'token_mask', "
            "'sequence_truncate' or 'sequence_mask'"
        )
    ratio = torch.exp(log_diff)
    if mode.endswith("_truncate"):
        if clip_min is None and clip_max is None:
            return ratio
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode.endswith("_mask"):
        outside = torch.zeros_like(ratio, dtype=torch.bool)
        if clip_min is not None:
            outside |= ratio < clip_min
        if clip_max is not None:
            outside |= ratio > clip_max
        return ratio.masked_fill(outside, 0.0)
    raise ValueError(
        f"mode={mode!r} is unknown; use 'token_truncate', 'token_mask', "
        "'sequence_truncate' or 'sequence_mask'"
    )


def truncated_is_ratio(
    old_logps: Tensor, sampling_logps: Tensor, mask: Tensor, cap: float = 2.0
) -> Tensor:
    """Token-level truncated importance sampling weight `min(exp(old - sampling), cap)`.

    The `vllm_importance_sampling_correction` of TRL's GRPO trainer with
    `vllm_importance_sampling_cap = cap` (Yao et al. 2025). The result is what
    `policy_loss(..., sampling_ratio=...)` multiplies into the per-token loss; compute it
    once per generation batch, without gradient.

    Args:
        old_logps: `(B, T)` log-probs under the training policy at sampling time.
        sampling_logps: `(B, T)` log-probs reported by the sampling engine.
        mask: `(B, T)` completion mask.
        cap: truncation constant C > 0.

    Returns:
        `(B, T)` weights in `(0, cap]`; **1** at masked positions and where the engine's
        log-prob is NaN (`min(1, cap)` if you pass a cap below 1).
    """
    return importance_sampling_ratio(
        old_logps, sampling_logps, mask, mode="token_truncate", clip_max=cap
    ).detach()


def sampling_correction(
    old_logps: Tensor,
    sampling_logps: Tensor,
    mask: Tensor,
    *,
    mode: ISMode = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
    level: Literal["token", "sequence"] = "token",
) -> tuple[Tensor, dict[str, float]]:
    """The configured correction weight and the statistics TRL logs for it.

    Args:
        old_logps, sampling_logps, mask: `(B, T)`, as in :func:`importance_sampling_ratio`.
        mode, clip_min, clip_max: `vllm_importance_sampling_mode` and its bounds.
        level: where the algorithm's action lives. `"sequence"` (RLOO: the completion is
            the action) turns a token mode into its sequence twin, so that the weight
            multiplies the completion's single ratio.

    Returns:
        `(weight, metrics)`: `(B, T)` or `(B, 1)` detached weights, and
        `sampling/importance_sampling_ratio/{min,mean,max}` (over valid tokens for token
        modes, over rows for sequence modes; 0 when there are none) and
        `sampling/sampling_logp_difference/{mean,max}` (absolute per-token gap over valid
        tokens the sampler scored), as TRL 1.16 names them; and
        `sampling/token_ratio_outside_band`, which TRL does not log: the share of those tokens
        whose ratio `exp(old - sampling)` leaves :data:`RATIO_BAND`. The batch's min and max
        are one token each; the share says how much of the batch disagrees (a bfloat16 sampler
        puts a few tokens of every batch outside the band, a sampler with stale weights most).
    """
    if level == "sequence" and mode.startswith("token_"):
        mode = "sequence_" + mode.removeprefix("token_")
    weight = importance_sampling_ratio(old_logps, sampling_logps, mask, mode=mode, clip_min=clip_min,
                                       clip_max=clip_max).detach()
    valid = mask.bool()
    flat = weight.flatten() if mode.startswith("sequence") else weight[valid]
    gap = (old_logps - sampling_logps).abs()
    gap = gap[valid & ~torch.isnan(gap)]
    metrics = {}
    for name, values, reducers in (("importance_sampling_ratio", flat, ("min", "mean", "max")),
                                   ("sampling_logp_difference", gap, ("mean", "max"))):
        for reducer in reducers:
            value = getattr(values, reducer)().item() if values.numel() else 0.0
            metrics[f"sampling/{name}/{reducer}"] = value
    metrics["sampling/token_ratio_outside_band"] = token_ratio_outside_band(old_logps, sampling_logps, mask)
    return weight, metrics


def token_ratio_outside_band(old_logps: Tensor, sampling_logps: Tensor, mask: Tensor,
                             band: tuple[float, float] = RATIO_BAND) -> float:
    """The share of valid completion tokens whose trainer/sampler ratio `exp(old - sampling)`
    lies outside `band` (0.0 when no token is valid). Tokens the sampler did not score (NaN)
    are left out, as in the gap TRL logs.

    Args:
        old_logps, sampling_logps, mask: `(B, T)`: the trainer's and the sampler's per-token
            log-probs of the sampled tokens, and 1 on completion tokens.
    """
    check_same_shape(old_logps=old_logps, sampling_logps=sampling_logps, mask=mask)
    diff = (old_logps - sampling_logps).float()
    valid = mask.bool() & ~torch.isnan(diff)
    if not valid.any():
        return 0.0
    low, high = math.log(band[0]), math.log(band[1])
    outside = (diff < low) | (diff > high)
    return outside[valid].float().mean().item()


def off_policy_sequence_mask(
    advantages: Tensor, logps: Tensor, sampling_logps: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    """Off-policy sequence masking (DeepSeek-V3.2, 2025): `(B, 1)` 1 = keep, 0 = drop.

    A completion is dropped when its advantage is negative **and** the mean over its
    tokens of `sampling_logps - logps` (a per-token estimate of KL(sampler || current
    policy)) exceeds `threshold`: pushing down a sample the current policy has drifted
    far from mostly adds noise. Tokens the sampler could not score (NaN) count as 0.

    Args:
        advantages: `(B, 1)` or `(B, T)` (then per token, as TRL broadcasts it).
        logps: `(B, T)` current log-probs (detached here).
        sampling_logps: `(B, T)` the sampler's log-probs (or the old policy's).
        mask: `(B, T)` completion mask.
        threshold: largest mean KL kept for a negative-advantage completion.
    """
    mask = mask.to(logps.dtype)
    gap = torch.nan_to_num(sampling_logps - logps.detach(), nan=0.0)
    mean_kl = (gap * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(mask.dtype)
