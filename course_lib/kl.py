"""Per-token KL estimators and importance-sampling corrections.

KL estimators (John Schulman, "Approximating KL Divergence", 2020). With tokens sampled
from the policy `pi` and `log_r = ref_logps - logps = log(ref(x) / pi(x))`, three
single-sample estimators of the reverse divergence `KL(pi || ref) = E_pi[log pi - log ref]`:

    k1 = -log_r                      unbiased, high variance, can be negative
    k2 = log_r ** 2 / 2              biased (low for small KL), low variance, >= 0
    k3 = (exp(log_r) - 1) - log_r    unbiased, low variance, >= 0  (GRPO's KL term)

k3 is what DeepSeekMath's GRPO (Shao et al. 2024, eq. 4) and TRL add to the loss with
coefficient `beta`. The estimates are per token; summing over a completion estimates the
sequence-level KL because the log-ratio of a sequence is the sum over its tokens.

Importance sampling (IS) correction. A fast inference engine (vLLM) samples the
completions, then the training code recomputes their log-probs; numerics differ, so the
tokens were in fact drawn from `sampling` and not from `old`. Truncated importance
sampling (TIS, Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training") multiplies each token's loss by `min(old / sampling, C)`.

Simplifications: the estimators assume the tokens were sampled from `pi` (the current
policy); off-policy, the value is an estimate under the sampling distribution instead.
"""

from __future__ import annotations

from typing import Literal

import torch

Tensor = torch.Tensor


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}={shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes differ ({listed}); pass per-token tensors of one shape (B, T)")


def kl_k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k1 estimator of KL(pi || ref) per token: `logps - ref_logps`.

    Args:
        logps: log pi(x_t) of the sampled tokens under the policy, `(B, T)`.
        ref_logps: log ref(x_t) of the same tokens under the reference model, `(B, T)`.

    Returns:
        `(B, T)`; unbiased for tokens sampled from pi, but negative whenever the
        reference likes a token more than the policy does.
    """
    _check_same_shape(logps=logps, ref_logps=ref_logps)
    return logps - ref_logps


def kl_k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k2 estimator of KL(pi || ref) per token: `(logps - ref_logps) ** 2 / 2`.

    Args:
        logps: `(B, T)` policy log-probs of the sampled tokens.
        ref_logps: `(B, T)` reference log-probs of the same tokens.

    Returns:
        `(B, T)`, always >= 0; biased, but close to the true KL when the two
        distributions are close (its expectation is an f-divergence that matches KL to
        second order).
    """
    _check_same_shape(logps=logps, ref_logps=ref_logps)
    return 0.5 * (logps - ref_logps) ** 2


def kl_k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """k3 estimator of KL(pi || ref) per token: `exp(ref - logps) - (ref - logps) - 1`.

    This is the KL term of GRPO (Shao et al. 2024, eq. 4) and of TRL's GRPOTrainer.

    Args:
        logps: `(B, T)` policy log-probs of the sampled tokens.
        ref_logps: `(B, T)` reference log-probs of the same tokens.

    Returns:
        `(B, T)`, always >= 0 (since `exp(u) >= 1 + u`), unbiased for tokens sampled from
        pi, and 0 exactly where the two log-probs agree.
    """
    _check_same_shape(logps=logps, ref_logps=ref_logps)
    log_r = ref_logps - logps
    return torch.exp(log_r) - log_r - 1.0


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
    _check_same_shape(old_logps=old_logps, sampling_logps=sampling_logps, mask=mask)
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
