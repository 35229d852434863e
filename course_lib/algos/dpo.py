"""DPO: Direct Preference Optimization on (prompt, chosen, rejected) pairs.

Everything a lesson on DPO points at, top to bottom:

1. :class:`DPOConfig`: TRL 1.16's ``DPOConfig`` names (``beta`` 0.1, ``loss_type``
   ``["sigmoid"]``, ``max_length``).
2. :func:`dpo_loss`: from the summed log-probs of the chosen and rejected completions under
   the policy and the reference, the loss of each ``loss_type`` and TRL's logged
   ``rewards/chosen|rejected|margins|accuracies`` and ``logps/chosen|rejected``.
   Rafailov et al. 2023 (eq. 7): the KL-regularised RL objective
   ``max E[r] - beta KL(pi || pi_ref)`` has the optimum ``pi* ~ pi_ref exp(r / beta)``, so
   ``r(x, y) = beta log pi*(y|x)/pi_ref(y|x) + beta log Z(x)``; put into the Bradley-Terry
   likelihood of the preferences, ``Z`` cancels and the policy is trained directly:
   ``loss = -log sigmoid(beta [(log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))])``.
   ``hinge`` is SLiC's ``relu(1 - beta delta)`` (Zhao et al. 2023); ``ipo`` is IPO's
   ``(delta_w/|y_w| - delta_l/|y_l| - 1/(2 beta))^2`` (Azar et al. 2023, eq. 17) on
   per-token-averaged log-ratios, as TRL 1.16 computes it.
   ``f_divergence_type`` (f-DPO, Wang et al. 2023, "Beyond Reverse KL"): regularising with
   another f-divergence than the reverse KL replaces each log-ratio ``u = log pi/ref`` by
   ``f'(exp(u))`` in the losses above (:func:`f_divergence_scores`), as TRL 1.16 does.
3. :class:`DPO`: each pair is two rows of the batch, chosen then rejected (a "group" of
   two, prompt-major); the reference log-probs come from the trainer's reference pass.

Simplifications vs TRL: one loss type at a
time (no ``loss_weights`` mixtures), no ``ld_alpha``, ``use_weighting`` or precomputed
reference log-probs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from course_lib.algos.base import (Advantages, Algorithm, LossOutput, MicroBatch, PolicyOutputs, ScoredBatch,
                                   entropy_metrics)
from course_lib.config import RLConfig, fail
from course_lib.ops.masking import masked_sum

Tensor = torch.Tensor

DPOLossType = Literal["sigmoid", "hinge", "ipo"]
FDivergence = Literal["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"]


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DPOConfig(RLConfig):
    """DPO (Rafailov et al. 2023) with TRL 1.16's ``DPOConfig`` names and defaults.

    A batch is ``per_device_train_batch_size / 2`` pairs (two rows each, chosen then rejected).
    """

    algo: ClassVar[str] = "dpo"
    NEEDS_REWARD_FUNCS: ClassVar[bool] = False

    num_generations: int = 2
    """Rows per pair: 2 (chosen, rejected), fixed."""
    beta: float = 0.1
    """TRL's DPO ``beta`` (0.1): the KL coefficient of the RL objective DPO solves; larger keeps the
    policy closer to the reference. A reference model is loaded (beta > 0 is required)."""
    loss_type: DPOLossType = "sigmoid"
    """``sigmoid`` (DPO), ``hinge`` (SLiC) or ``ipo`` (IPO), as TRL 1.16's ``loss_type``."""
    f_divergence_type: FDivergence = "reverse_kl"
    """The divergence to the reference that DPO's objective penalises (TRL 1.16's field, f-DPO):
    ``reverse_kl`` (DPO), ``forward_kl``, ``js_divergence`` or ``alpha_divergence``; see
    :func:`f_divergence_scores`. All three loss types take any of them."""
    f_alpha_divergence_coef: float = 0.5
    """``alpha`` of ``alpha_divergence`` (TRL's default 0.5); 1.0 is the reverse KL."""
    learning_rate: float = 1e-6
    """AdamW learning rate: TRL 1.16's DPOConfig default (tiny models want ~1e-4)."""
    max_length: int | None = 1024
    """Most tokens of prompt + completion; longer completions are cut (counted in ``dpo/truncated_rows``)."""
    temperature: float = 1.0
    """Log-probs of the model's own distribution; only the evaluation samples use it."""

    def to_trl_config(self, **extra):
        """The equivalent ``trl.DPOConfig`` (TRL 1.16). Its batch counts pairs where ours counts rows
        (two per pair), so ``per_device_train_batch_size`` is halved; ``loss_type`` becomes TRL's
        one-element list. ``extra`` overrides."""
        import trl

        from course_lib.config.tools import trl_training_kwargs

        kwargs = trl_training_kwargs(self, trl.DPOConfig, translated=frozenset({"per_device_train_batch_size",
                                                                                "loss_type"}))
        kwargs.update(per_device_train_batch_size=self.per_device_train_batch_size // 2, loss_type=[self.loss_type])
        return trl.DPOConfig(**{**kwargs, **extra})

    def _check_ranges(self) -> None:
        from course_lib.post_training.batches import refuse_sampling_options

        super()._check_ranges()
        refuse_sampling_options(self)
        if self.num_generations != 2:
            fail("num_generations", self.num_generations, "must be 2 for DPO: each pair is a chosen and a rejected row",
                 "leave num_generations=2")
        if not self.beta > 0:
            fail("beta", self.beta, f"must be > 0: DPO's loss_type={self.loss_type!r} compares the policy with a "
                 "reference model, which beta=0 would not load (and ipo divides by beta)", "use 0.1 (TRL's default)")
        if self.per_device_train_batch_size % 2:
            fail("per_device_train_batch_size", self.per_device_train_batch_size,
                 "must be even: a pair's chosen and rejected rows go through the same micro-batch", "use an even size")
        if self.max_length is not None and self.max_length < 2:
            fail("max_length", self.max_length, "must be None or at least 2", "use 1024 (TRL's default)")
        if self.temperature != 1.0:
            fail("temperature", self.temperature, "rescales the log-probs DPO compares", "leave temperature=1.0")


# ---------------------------------------------------------------------------------------
# 2. Loss
# ---------------------------------------------------------------------------------------
def f_divergence_scores(logratios: Tensor, f_divergence_type: FDivergence = "reverse_kl",
                        alpha: float = 0.5) -> Tensor:
    """``f'(t)`` at ``t = pi/ref = exp(u)``, from the log-ratios ``u`` (any shape): what f-DPO puts where
    DPO has ``u`` (Wang et al. 2023, Theorem 1; TRL 1.16's ``f_divergence_type``).

    - ``reverse_kl``: ``f'(t) = log t + 1``, so ``u`` (the constant cancels in a difference): DPO;
    - ``forward_kl``: ``f(t) = -log t``, ``f'(t) = -1/t``: ``1 - exp(-u)`` (shifted by 1, as TRL);
    - ``js_divergence``: ``f'(t) = log(2t / (1 + t)) = log 2 + log sigmoid(u)``;
    - ``alpha_divergence``: ``f'(t) = (t^(alpha-1) - 1) / (alpha - 1)``, i.e.
      ``(exp((alpha-1) u) - 1) / (alpha - 1)``, the exponent clamped at 80 (11 in float16) so
      that it stays finite, as TRL does; ``alpha = 1`` is the reverse KL's limit.
    """
    if f_divergence_type == "reverse_kl" or (f_divergence_type == "alpha_divergence" and abs(alpha - 1.0) < 1e-6):
        return logratios
    if f_divergence_type == "forward_kl":
        return 1 - torch.exp(-logratios)
    if f_divergence_type == "js_divergence":
        return math.log(2) + F.logsigmoid(logratios)
    if f_divergence_type == "alpha_divergence":
        exponent = ((alpha - 1.0) * logratios).float().clamp(max=11.0 if logratios.dtype == torch.float16 else 80.0)
        return (torch.exp(exponent) - 1.0).to(logratios.dtype) / (alpha - 1.0)
    raise ValueError(f"f_divergence_type={f_divergence_type!r} is not known. Fix: use 'reverse_kl', 'forward_kl', "
                     "'js_divergence' or 'alpha_divergence'.")


def dpo_loss(chosen_logps: Tensor, rejected_logps: Tensor, ref_chosen_logps: Tensor, ref_rejected_logps: Tensor,
             beta: float = 0.1, loss_type: DPOLossType = "sigmoid", chosen_lengths: Tensor | None = None,
             rejected_lengths: Tensor | None = None, f_divergence_type: FDivergence = "reverse_kl",
             f_alpha_divergence_coef: float = 0.5) -> LossOutput:
    """The DPO loss of a batch of pairs, from summed completion log-probs, as TRL 1.16's DPOTrainer.

    With ``delta_w = log pi(y_w|x) - log ref(y_w|x)`` and ``delta_l`` the same for the rejected:

    - ``sigmoid``: ``-log sigmoid(beta (delta_w - delta_l))`` (Rafailov et al. 2023, eq. 7);
    - ``hinge``: ``relu(1 - beta (delta_w - delta_l))`` (SLiC, Zhao et al. 2023);
    - ``ipo``: ``(delta_w / n_w - delta_l / n_l - 1 / (2 beta))^2`` with ``n`` the completion's
      token count (Azar et al. 2023, eq. 17; TRL averages the log-ratios per token).

    With another ``f_divergence_type`` each log-ratio ``delta`` in these formulas becomes
    :func:`f_divergence_scores` of it (the logged rewards stay ``beta delta``, as in TRL).

    The loss is the mean over pairs. Metrics, TRL's names: ``rewards/chosen`` = mean of
    ``beta delta_w`` (DPO's implicit reward), ``rewards/rejected``, ``rewards/margins`` (their
    difference), ``rewards/accuracies`` (fraction of pairs whose chosen reward is larger),
    ``logps/chosen``, ``logps/rejected``.

    Args:
        chosen_logps, rejected_logps: (P,) summed log-probs under the policy (differentiable).
        ref_chosen_logps, ref_rejected_logps: (P,) the same under the reference (no gradient).
        beta: > 0.
        loss_type: "sigmoid", "hinge" or "ipo".
        chosen_lengths, rejected_lengths: (P,) completion token counts; needed by "ipo".
    """
    if not beta > 0:
        raise ValueError(f"beta={beta} must be > 0: DPO's reward is beta times a log-ratio to the reference. "
                         "Fix: use 0.1 (TRL's default).")
    for name, tensor in (("rejected_logps", rejected_logps), ("ref_chosen_logps", ref_chosen_logps),
                         ("ref_rejected_logps", ref_rejected_logps)):
        if tensor is None:
            raise ValueError(f"{name} is None: DPO needs the reference model's log-probs of both completions. "
                             "Fix: load a reference (beta > 0) and pass its summed log-probs.")
        if tensor.shape != chosen_logps.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but chosen_logps has "
                             f"{tuple(chosen_logps.shape)}: pass one number per pair, (P,)")
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    chosen_scores = f_divergence_scores(chosen_logratios, f_divergence_type, f_alpha_divergence_coef)
    rejected_scores = f_divergence_scores(rejected_logratios, f_divergence_type, f_alpha_divergence_coef)
    delta = chosen_scores - rejected_scores
    if loss_type == "sigmoid":
        per_pair = -F.logsigmoid(beta * delta)
    elif loss_type == "hinge":
        per_pair = torch.relu(1 - beta * delta)
    elif loss_type == "ipo":
        if chosen_lengths is None or rejected_lengths is None:
            raise ValueError("loss_type='ipo' averages the log-ratios per token: pass chosen_lengths and "
                             "rejected_lengths (completion token counts).")
        averaged = (chosen_scores / chosen_lengths.to(delta.dtype).clamp(min=1.0)
                    - rejected_scores / rejected_lengths.to(delta.dtype).clamp(min=1.0))
        per_pair = (averaged - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"loss_type={loss_type!r} is not known. Fix: use 'sigmoid', 'hinge' or 'ipo'.")
    loss = per_pair.mean()
    with torch.no_grad():
        chosen_rewards, rejected_rewards = beta * chosen_logratios.detach(), beta * rejected_logratios.detach()
        metrics = {"rewards/chosen": chosen_rewards.mean().item(),
                   "rewards/rejected": rejected_rewards.mean().item(),
                   "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
                   "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
                   "logps/chosen": chosen_logps.detach().mean().item(),
                   "logps/rejected": rejected_logps.detach().mean().item()}
    return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_pair)


def split_pairs(x: Tensor) -> tuple[Tensor, Tensor]:
    """Rows ``[c0, r0, c1, r1, ...]`` (pairs as groups of two, prompt-major) -> ``(chosen, rejected)``."""
    if x.shape[0] % 2:
        raise ValueError(f"{x.shape[0]} rows cannot be split into (chosen, rejected) pairs; pass an even number")
    return x[0::2], x[1::2]


# ---------------------------------------------------------------------------------------
# 3. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class DPO(Algorithm):
    """DPO for the trainer: pairs from the dataset, the reference pass of the trainer, :func:`dpo_loss`."""

    name = "dpo"
    config_class = DPOConfig
    always_needs_old_logps = False
    sampling_correction_level = "sequence"
    batches = "pairs"  # the dataset's preference pairs (course_lib.run.dataset_batches)

    def setup(self, trainer, **options) -> None:
        from course_lib.post_training.batches import check_pair_rows

        super().setup(trainer, **options)
        check_pair_rows(trainer.dataset)
        if trainer.reference is None:
            raise ValueError(f"loss_type={trainer.config.loss_type!r} needs a reference model and none was loaded. "
                             "Fix: beta > 0 (TRL's default 0.1).")

    def advantages(self, scored: ScoredBatch, config) -> Advantages:
        return Advantages(advantages=torch.zeros_like(scored.rewards), metrics={})

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config: DPOConfig,
             num_items_in_batch: int) -> LossOutput:
        mask = micro_batch.completion_mask.to(outputs.logps.dtype)
        sums = masked_sum(outputs.logps, mask, dim=-1)
        if micro_batch.ref_logps is None:
            raise ValueError("DPO needs reference log-probs and the batch has none. Fix: beta > 0 loads the reference.")
        ref_sums = masked_sum(micro_batch.ref_logps.to(sums.dtype), mask, dim=-1)
        lengths = mask.sum(-1)
        (chosen, rejected), (ref_chosen, ref_rejected) = split_pairs(sums), split_pairs(ref_sums)
        chosen_lengths, rejected_lengths = split_pairs(lengths)
        out = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type,
                       chosen_lengths, rejected_lengths, config.f_divergence_type, config.f_alpha_divergence_coef)
        # The loss is a mean over this micro-batch's pairs; an accumulation window averages its micro-batches.
        out.loss = out.loss / config.gradient_accumulation_steps
        out.metrics.update(entropy_metrics(outputs.entropies, mask, "entropy"))  # TRL's, over both completions
        return out
