"""Entropy control for policy-gradient losses: high-entropy token selection, entropy bonus.

All three act on the exact per-token entropies that the fused log-prob kernels return
(:mod:`course_lib.ops.logprobs`, :mod:`course_lib.ops.triton_logprobs`), so no `(B, T, V)`
tensor is formed.

- :func:`high_entropy_mask`: train only on the tokens whose entropy is in the top
  `quantile` fraction of the batch ("Beyond the 80/20 Rule: High-Entropy Minority Tokens
  Drive Effective RL for LLM Reasoning", Wang et al. 2025: the ~20% "forking" tokens carry
  most of the learning signal).
- :func:`entropy_bonus`: the mean entropy over the tokens that count, which the loss
  subtracts times a coefficient (`L = L_policy - coef * H`), to keep exploring.
- :class:`AdaptiveEntropyCoef`: a bang-bang controller of that coefficient (as in TRL 1.16's
  `use_adaptive_entropy`): after each optimizer step, raise the coefficient by `delta` when
  the step's mean entropy fell to or below `target`, lower it otherwise; the bonus applies
  only while the last measured entropy is at or below the target.
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor


def high_entropy_mask(entropies: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """`(B, T)` bool: valid tokens whose entropy is at least the batch's `1 - quantile` quantile.

    Args:
        entropies: `(B, T)` per-token entropies (nats).
        mask: `(B, T)` 1 for valid tokens.
        quantile: fraction of tokens to keep, in (0, 1]; 0.2 keeps the top 20%. The cut is
            `torch.quantile` (linear interpolation) of the valid entropies at `1 - quantile`,
            and ties at the cut are kept.

    Returns:
        All False when no token is valid.
    """
    if not 0 < quantile <= 1:
        raise ValueError(f"top_entropy_quantile={quantile!r} must lie in (0, 1]. Fix: use 1.0 (every token) "
                         "or e.g. 0.2 (the top 20% of tokens by entropy).")
    valid = mask.bool()
    values = entropies.detach()[valid].float()
    if values.numel() == 0:
        return torch.zeros_like(valid)
    cut = torch.quantile(values, 1.0 - quantile)
    return ((entropies.detach() * mask) >= cut) & valid


def entropy_bonus(entropies: Tensor, mask: Tensor, accumulation: int = 1) -> Tensor:
    """Mean entropy over the tokens of `mask`, divided by `accumulation` (scalar, differentiable).

    The bonus is a plain token mean whatever the loss type's normaliser, so that `coef`
    means the same thing for every loss; only gradient accumulation scales it.
    """
    weights = mask.to(entropies.dtype)
    return (entropies * weights).sum() / weights.sum().clamp(min=1.0) / accumulation


class AdaptiveEntropyCoef:
    """The entropy coefficient, held constant or steered toward a target entropy.

    Usage, once per micro-batch in training: `coef = control.coef_to_apply()`, add
    `-coef * entropy_bonus(...)` to the loss, then `control.observe(entropies, mask,
    end_of_step)` with `end_of_step` True on the micro-batch that completes an optimizer
    step. Within a step every micro-batch applies the same coefficient; the update takes
    effect from the next step.

    Args:
        coef: starting (or constant) coefficient.
        adaptive: steer the coefficient; False keeps `coef` fixed.
        coef_min, coef_max: bounds of the steered coefficient.
        delta: change per optimizer step.
        target: entropy (nats, per token) to keep.
    """

    def __init__(self, coef: float, adaptive: bool = False, coef_min: float = 0.0, coef_max: float = 1.0,
                 delta: float = 0.005, target: float = 0.2):
        self.coef, self.adaptive = float(coef), adaptive
        self.coef_min, self.coef_max, self.delta, self.target = coef_min, coef_max, delta, target
        # No measurement yet: +inf means "above target", so the first step applies no bonus.
        self.last_entropy = math.inf
        self._window = torch.zeros(2, dtype=torch.float64)  # [entropy sum, token count] of this step

    @property
    def enabled(self) -> bool:
        """Whether the bonus is part of the loss at all (an adaptive one may recover from 0)."""
        return self.coef != 0.0 or self.adaptive

    def coef_to_apply(self) -> float:
        if self.adaptive:
            return self.coef if self.last_entropy <= self.target else 0.0
        return self.coef

    def observe(self, entropies: Tensor, mask: Tensor, end_of_step: bool) -> None:
        """Accumulate this micro-batch's entropy; update the coefficient at the end of a step."""
        if not self.adaptive:
            return
        weights = mask.to(entropies.dtype)
        self._window += torch.stack([(entropies.detach() * weights).sum(), weights.sum()]).double().cpu()
        if end_of_step:
            entropy = (self._window[0] / self._window[1].clamp(min=1.0)).item()
            if entropy <= self.target:  # too little exploration: strengthen the bonus
                self.coef = min(self.coef + self.delta, self.coef_max)
            else:
                self.coef = max(self.coef - self.delta, self.coef_min)
            self.last_entropy = entropy
            self._window.zero_()

    def state(self) -> dict:
        """JSON-safe state for checkpoints (no measurement yet is None)."""
        return {"entropy_coef": self.coef, "last_entropy": None if math.isinf(self.last_entropy) else self.last_entropy}

    def load_state(self, state: dict) -> None:
        last = state["last_entropy"]
        self.coef, self.last_entropy = state["entropy_coef"], math.inf if last is None else last
