"""`GRPOConfig`: the GRPO-only knobs on top of the shared :class:`course_lib.config.RLConfig`.

Names, defaults and meaning follow TRL 1.16's `GRPOConfig`; the formulas they select live
in :mod:`course_lib.algos.grpo` (advantages, the clipped surrogate, the loss-type table `LOSSES`,
the loss entry point), :mod:`course_lib.algos.grpo_losses` (the loss types' other pieces) and
:mod:`course_lib.ops.entropy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from course_lib.config import RLConfig, fail, warn
from course_lib.config.tools import to_trl_grpo_config

#: For a choice field of GRPO (``loss_type``, ``multi_objective_aggregation``): which shared fields
#: each of its values reads. Filled by :mod:`course_lib.algos.grpo` from the table each formula
#: declares (``LossType.reads``, ``AGGREGATION_READS``); that module imports this one, so the
#: table cannot be imported from here.
FIELDS_READ: dict[str, dict[str, tuple[str, ...]]] = {}


def declare_fields_read(choice: str, reads: Mapping[str, Sequence[str]]) -> None:
    """Record, for each value of the choice field ``choice``, the shared fields it reads.

    ``GRPOConfig`` then refuses a non-default value of a field that the chosen value does not
    read: accepted and ignored would be worse than refused.
    """
    FIELDS_READ[choice] = {value: tuple(fields) for value, fields in reads.items()}


@dataclass(frozen=True)
class GRPOConfig(RLConfig):
    """Group Relative Policy Optimization (Shao et al. 2024) and its variants (DAPO, Dr. GRPO,
    GSPO, two-sided clipping, CISPO, SAPO, LUSPO, VESPO)."""

    algo: ClassVar[str] = "grpo"

    delta: float | None = None
    """Two-sided GRPO: cap the ratio at delta also for negative advantages (INTELLECT-2, Prime
    Intellect 2025); use > 1 + epsilon; None disables."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """One ratio per token, or one per sequence (geometric mean of the token ratios, GSPO, Zheng et
    al. 2025)."""
    scale_rewards: Literal["group", "batch", "none"] | bool = "group"
    """Divide advantages by the std of the group (`group`/True, GRPO), of the whole batch (`batch`,
    PPO-Lite / Tricks or Traps, Liu et al. 2025) or not at all (`none`/False, Dr. GRPO, Liu et
    al. 2025: std scaling biases toward too-easy and too-hard prompts)."""
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    """With several reward functions: weight-sum the rewards then normalise per group (GRPO), or
    normalise each reward per group first, weight-sum, then normalise over the batch (GDPO, arXiv
    2601.05242: keeps one reward's scale from drowning the others)."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"] = "dapo"
    """Objective and token aggregation: `grpo` per-sequence mean (length bias), `bnpo` tokens of the
    local batch, `dr_grpo` constant max_completion_length (Dr. GRPO), `dapo` tokens of the whole
    accumulated batch (DAPO); `cispo` clipped detached IS weight times log-prob (MiniMax-M1), `sapo`
    soft sigmoid gate (SAPO), `luspo` length-scaled GSPO, `vespo` gamma-weighted sequence ratio
    (one entry each in `LOSSES`, course_lib/algos/grpo.py)."""
    use_bias_correction_kl: bool = True
    """Multiply the KL term by the importance ratio so that its gradient is the unbiased
    reverse-KL gradient (DeepSeek-V3.2; TRL 1.16's default). On-policy the value is unchanged
    but the gradient gains `beta * k3` per token."""
    sapo_temperature_pos: float = 1.0
    """SAPO gate temperature for tokens with a positive advantage (SAPO, arXiv 2511.20347)."""
    sapo_temperature_neg: float = 1.05
    """SAPO gate temperature for tokens with a non-positive advantage; higher decays faster."""
    vespo_k_pos: float = 2.0
    """VESPO power k for non-negative advantages: how hard small sequence ratios are down-weighted."""
    vespo_lambda_pos: float = 3.0
    """VESPO decay lambda for non-negative advantages: how hard large sequence ratios are
    down-weighted."""
    vespo_k_neg: float = 3.0
    """VESPO power k for negative advantages."""
    vespo_lambda_neg: float = 2.0
    """VESPO decay lambda for negative advantages."""
    off_policy_mask_threshold: float | None = None
    """Drop negative-advantage completions whose mean per-token KL from the sampler exceeds this
    (off-policy sequence masking, DeepSeek-V3.2); None disables."""
    top_entropy_quantile: float = 1.0
    """Train only on this top fraction of tokens by entropy, in (0, 1] (Wang et al. 2025 keep 0.2,
    the "forking" tokens); 1.0 keeps every token."""
    entropy_coef: float = 0.0
    """Entropy bonus: the loss becomes L - entropy_coef * (mean token entropy); 0 disables (the
    starting value when use_adaptive_entropy)."""
    use_adaptive_entropy: bool = False
    """Steer entropy_coef each optimizer step toward entropy_target (raise it by entropy_coef_delta
    when entropy fell to the target, lower it otherwise); the bonus applies only at or below it."""
    entropy_coef_min: float = 0.0
    """Lower bound of the adaptive entropy coefficient."""
    entropy_coef_max: float = 1.0
    """Upper bound of the adaptive entropy coefficient."""
    entropy_coef_delta: float = 0.005
    """Change of the adaptive entropy coefficient per optimizer step."""
    entropy_target: float = 0.2
    """Per-token entropy (nats) the adaptive coefficient keeps the policy at or above."""

    def _normalize(self) -> None:
        super()._normalize()
        if isinstance(self.scale_rewards, bool):  # TRL: True == "group", False == "none"
            self._set("scale_rewards", "group" if self.scale_rewards else "none")

    def _check_ranges(self) -> None:
        super()._check_ranges()
        self._check_fields_read()
        if self.delta is not None and self.delta <= 1.0:
            fail("delta", self.delta, "caps the ratio at or below 1, so even on-policy tokens with a negative "
                 "advantage would get no gradient", "use delta > 1 + epsilon (INTELLECT-2) or None")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):
            if not getattr(self, name) > 0:
                fail(name, getattr(self, name), "must be > 0 (the gate divides by it)", "use SAPO's 1.0 / 1.05")
        for name in ("vespo_k_pos", "vespo_k_neg", "vespo_lambda_pos", "vespo_lambda_neg", "entropy_coef_delta",
                     "entropy_coef_min", "entropy_target"):
            if getattr(self, name) < 0:
                fail(name, getattr(self, name), "must be non-negative", f"set {name} >= 0")
        if not 0 < self.top_entropy_quantile <= 1:
            fail("top_entropy_quantile", self.top_entropy_quantile, "must lie in (0, 1]",
                 "use 1.0 (every token) or e.g. 0.2 (the top 20% of tokens by entropy)")
        if self.entropy_coef_min > self.entropy_coef_max:
            fail("entropy_coef_min", self.entropy_coef_min, f"exceeds entropy_coef_max={self.entropy_coef_max}",
                 "make entropy_coef_min <= entropy_coef_max")
        if self.off_policy_mask_threshold is not None and self.off_policy_mask_threshold < 0:
            fail("off_policy_mask_threshold", self.off_policy_mask_threshold, "is a KL and must be >= 0",
                 "use None or a small positive value such as 0.5")
        correction = (self.engine == "vllm" if self.vllm_importance_sampling_correction is None
                      else self.vllm_importance_sampling_correction)
        if (self.loss_type == "vespo" and correction
                and not self.vllm_importance_sampling_mode.startswith("token_")):
            fail("vllm_importance_sampling_mode", self.vllm_importance_sampling_mode,
                 "is a sequence mode, but VESPO folds per-token correction weights into its sequence weight",
                 "use token_truncate or token_mask with loss_type='vespo'")

    def _check_fields_read(self) -> None:
        """Refuse a field set away from its default that the chosen loss type or aggregation never reads."""
        defaults = {name: f.default for name, f in type(self).__dataclass_fields__.items()}
        for choice, reads in FIELDS_READ.items():
            chosen = getattr(self, choice)
            for name in dict.fromkeys(f for fields in reads.values() for f in fields):
                if name not in reads.get(chosen, ()) and getattr(self, name) != defaults[name]:
                    readers = ", ".join(value for value, fields in reads.items() if name in fields)
                    fail(name, getattr(self, name), f"is never read with {choice}={chosen!r}, so it would change "
                         "nothing", f"leave {name} at its default {defaults[name]!r}, or choose a {choice} that "
                         f"reads it ({readers})")

    def _warn_risky(self) -> None:
        super()._warn_risky()
        if self.importance_sampling_level == "sequence" and self.loss_type in ("bnpo", "dr_grpo", "dapo", "cispo"):
            # Same condition as TRL's GRPOTrainer warning.
            warn(f"importance_sampling_level='sequence' with loss_type={self.loss_type!r} sums per-token terms, "
                 "so each sequence weighs as much as its length; GSPO's objective is loss_type='grpo'.")
        if self.loss_type == "luspo" and self.importance_sampling_level != "sequence":
            warn("loss_type='luspo' is a sequence-level loss: set importance_sampling_level='sequence' as in the "
                 "LUSPO paper.")
        if self.loss_type == "vespo" and self.importance_sampling_level != "token":
            warn("loss_type='vespo' forms its own sequence weight from the token ratios: keep "
                 "importance_sampling_level='token'.")
        if self.loss_type == "cispo" and (self.epsilon_high or self.epsilon) <= 1.0:
            warn(f"loss_type='cispo' caps the ratio itself at epsilon_high={self.epsilon_high or self.epsilon}, so "
                 "every token's weight is below 1; CISPO's bound is on the ratio (ScaleRL uses epsilon_high=5.0).")
        if self.delta is not None and self.delta <= 1 + self.epsilon:
            warn(f"delta={self.delta} <= 1 + epsilon = {1 + self.epsilon}: INTELLECT-2 recommends delta > 1 + "
                 "epsilon, otherwise the upper cap clips tokens the ordinary PPO clip would keep.")

    def to_trl_grpo_config(self, **extra):
        """The equivalent `trl.GRPOConfig` (single process), for parity checks."""
        return to_trl_grpo_config(self, **extra)

    def to_trl_config(self, **extra):
        """The equivalent TRL config (`trl.GRPOConfig`), as every exported algorithm names it."""
        return to_trl_grpo_config(self, **extra)
