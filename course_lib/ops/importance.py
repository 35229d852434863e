"""Correcting for a sampler that is not the trained policy: importance-sampling weights.

A fast inference engine (vLLM) samples the completions, then the training code recomputes
their log-probs; the numerics differ (kernels, precision), so the tokens were in fact
drawn from `sampling` and not from `old`. Truncated importance sampling (TIS, Yao et al.
2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training")
multiplies each token's loss by `min(old / sampling, C)`; TRL's
`vllm_importance_sampling_mode` adds masking instead of truncation and one weight per
sequence instead of per token.

The weights carry no gradient: they are computed once per generation batch.
"""

from __future__ import annotations

from typing import Literal

import torch

from course_lib.ops.kl import check_same_shape

Tensor = torch.Tensor

ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


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
        clip_max: upper bound C (the seed's `vllm_importance_sampling_cap`); `None` for
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

    The `vllm_importance_sampling_correction` of the seed documentation with
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
