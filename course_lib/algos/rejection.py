"""Rejection sampling / expert iteration: sample, keep what the verifier accepts, SFT on it, repeat.

STaR (Zelikman et al. 2022), RAFT (Dong et al. 2023), ReST-EM (Singh et al. 2023): each
round samples ``num_generations`` completions per prompt from the current policy, keeps
those whose reward reaches ``reward_threshold`` (:func:`rejection_filter`), and maximises
their likelihood (:func:`course_lib.algos.sft.sft_loss` on the kept rows only). In RL terms
it is a policy gradient with the advantage 1 on accepted and 0 on rejected samples, no
baseline and no negative signal: it can only sharpen what the policy already samples.

One round is one generation batch; ``num_iterations`` passes over it are the SFT epochs of
the round, ``max_steps`` (or ``num_train_epochs``) sets the rounds. ``rejection/kept_fraction``
and ``rejection/round`` are logged every step; a round that keeps nothing is logged
(``rejection/kept_fraction`` 0, loss 0, no gradient) and warned about, not an error.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch

from course_lib.algos.base import (Advantages, Algorithm, LossOutput, MicroBatch, PolicyOutputs, ScoredBatch,
                                   entropy_metrics)
from course_lib.algos.sft import sft_loss
from course_lib.config import RLConfig, fail

Tensor = torch.Tensor


class EmptyRoundWarning(UserWarning):
    """A rejection-sampling round kept no sample."""


@dataclass(frozen=True)
class RejectionConfig(RLConfig):
    """Rejection sampling (expert iteration) on the course's loop."""

    algo: ClassVar[str] = "rejection"
    MIN_GENERATIONS: ClassVar[int] = 1

    num_generations: int = 4
    """Samples per prompt in a round (k of best-of-k)."""
    reward_threshold: float = 1.0
    """A sample is kept when its (weighted, summed) reward is >= this: 1.0 keeps the verified-correct
    ones of a 0/1 reward."""
    learning_rate: float = 1e-5
    """AdamW learning rate (tiny models want ~1e-3)."""

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if self.beta != 0.0:
            fail("beta", self.beta, "is a KL coefficient rejection sampling does not read", "leave beta=0.0")


def rejection_filter(rewards: Tensor, threshold: float) -> Tensor:
    """(B,) 1.0 where ``reward >= threshold``, else 0.0; an unscorable (NaN) reward is rejected."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; pass one reward per sample, (B,)")
    return (torch.nan_to_num(rewards, nan=float("-inf")) >= threshold).to(torch.float32)


class Rejection(Algorithm):
    """Expert iteration for the trainer: the advantages are the filter, the loss is SFT on the kept rows."""

    name = "rejection"
    config_class = RejectionConfig
    always_needs_old_logps = False
    sampling_correction_level = "token"

    def __init__(self):
        self.round = 0

    def advantages(self, scored: ScoredBatch, config: RejectionConfig) -> Advantages:
        kept = rejection_filter(scored.rewards, config.reward_threshold)
        self.round += 1
        fraction = kept.mean().item()
        if fraction == 0.0:
            warnings.warn(f"rejection round {self.round}: no sample of {kept.numel()} reached reward_threshold="
                          f"{config.reward_threshold}; this round trains on nothing (loss 0). Fix if it repeats: "
                          "more num_generations, an easier task, or a lower reward_threshold.", EmptyRoundWarning,
                          stacklevel=2)
        metrics = {"reward": torch.nanmean(scored.rewards).item(), "rejection/kept_fraction": fraction,
                   "rejection/kept": int(kept.sum().item()), "rejection/round": self.round,
                   "rejection/kept_tokens": int((scored.mask * kept.unsqueeze(1)).sum().item())}
        # The loss divides by the kept tokens of the whole batch (SFT's normalisation on the kept rows).
        return Advantages(advantages=kept, metrics=metrics, num_items_in_batch=metrics["rejection/kept_tokens"])

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config, num_items_in_batch: int) -> LossOutput:
        kept_mask = micro_batch.completion_mask.to(outputs.logps.dtype) * micro_batch.advantages.reshape(-1, 1)
        loss = sft_loss(outputs.logps, kept_mask, num_items_in_batch)  # the kept tokens of the batch
        metrics = entropy_metrics(outputs.entropies, micro_batch.completion_mask.to(outputs.logps.dtype), "entropy")
        return LossOutput(loss=loss, metrics=metrics)

    def state(self) -> dict:
        return {"round": self.round}

    def load_state(self, state: dict, config) -> None:
        self.round = int(state.get("round", 0))
