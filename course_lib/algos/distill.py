"""On-policy distillation: the student samples, a teacher scores every token of those samples.

Everything a lesson on on-policy distillation points at, top to bottom:

1. :class:`DistillConfig`: TRL 1.16's ``DistillationConfig`` names (``beta`` 1.0 selects the
   reverse KL, ``temperature``), plus the teacher's path.
2. :func:`generalized_jsd`: the per-token divergence between the student's and the teacher's
   next-token distributions over the whole vocabulary, with TRL 1.16's convention for
   ``beta``: the mixture is ``m = (1 - beta) p_s + beta p_t`` and the divergence
   ``beta KL(p_t || m) + (1 - beta) KL(p_s || m)``, with the two ends taken exactly:
   ``beta = 0`` is the forward KL ``KL(p_t || p_s)`` (mode covering, the divergence of plain
   distillation, Hinton et al. 2015), ``beta = 1`` the reverse KL ``KL(p_s || p_t)`` (mode
   seeking: on-policy distillation, Agarwal et al. 2024 "GKD"; Lu & Thinking Machines 2025),
   ``beta = 0.5`` the Jensen-Shannon divergence. The sum over valid tokens is divided by
   ``num_items_in_batch`` (the tokens of the accumulation window), as TRL's
   ``_chunked_divergence_loss``.
3. :func:`reverse_kl_token_advantages`: the same reverse KL seen as RL: on the sampled token,
   ``-(log p_s(y_t) - log p_t(y_t))`` is a per-token reward, dense where RL's outcome reward
   is one number at the end: why distillation needs fewer samples than RL.
4. :func:`check_teacher`: a teacher must share the student's tokenizer and vocabulary, or its
   token ids would mean other tokens.
5. :class:`Distill`: the trainer samples from the student as for GRPO; the loss runs the
   teacher on the same tokens and compares the distributions.

Simplifications vs TRL: the (B, T, V) logits of one micro-batch are materialised (TRL
projects chunk by chunk), by a second student forward inside the loss (the trainer's own
forward gives only the sampled tokens' log-probs, logged as ``distill/teacher_logp_gap``);
one process only; no teacher served by vLLM; no multi-turn tool rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from course_lib.algos.base import Advantages, Algorithm, LossOutput, MicroBatch, PolicyOutputs, ScoredBatch
from course_lib.config import RLConfig, fail

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DistillConfig(RLConfig):
    """On-policy distillation with TRL 1.16's ``DistillationConfig`` names."""

    algo: ClassVar[str] = "distill"
    MIN_GENERATIONS: ClassVar[int] = 1
    NEEDS_REWARD_FUNCS: ClassVar[bool] = False
    ALIASES: ClassVar[dict[str, str]] = {"teacher_model_name_or_path": "teacher_model"}

    teacher_model: str | None = None
    """The teacher: a path or name ``course_lib.models.load_policy`` loads (or pass ``teacher=`` to
    the trainer). It must use the student's tokenizer."""
    beta: float = 1.0
    """TRL's generalized-JSD interpolation: 1.0 reverse KL(student || teacher) (TRL 1.16's default),
    0.0 forward KL(teacher || student), 0.5 the JSD. Not a KL-penalty coefficient: no reference
    model is loaded."""
    num_generations: int = 1
    """Completions per prompt (no group baseline is needed): 1."""
    learning_rate: float = 1e-6
    """AdamW learning rate (tiny models want ~1e-4)."""
    temperature: float = 1.0
    """Sampling temperature, also applied to both distributions before the divergence (TRL's
    ``temperature``)."""

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if not 0.0 <= self.beta <= 1.0:
            fail("beta", self.beta, "must be in [0.0, 1.0]: 0 forward KL, 0.5 JSD, 1 reverse KL", "use 1.0")
        if self.num_processes > 1:
            fail("num_processes", self.num_processes, "is not supported yet: the student's full-vocabulary forward "
                 "runs outside the data-parallel wrapper, so its gradients would not be averaged across processes",
                 "run distillation on one process")
        if self.sync_ref_model:
            fail("sync_ref_model", self.sync_ref_model, "moves a reference model that distillation does not load",
                 "leave sync_ref_model=False")


# ---------------------------------------------------------------------------------------
# 2. Loss
# ---------------------------------------------------------------------------------------
def generalized_jsd(student_logits: Tensor, teacher_logits: Tensor, mask: Tensor, beta: float = 1.0,
                    temperature: float = 1.0, num_items_in_batch: int | float | Tensor | None = None
                    ) -> tuple[Tensor, Tensor]:
    """Per-token generalized JSD between the student and the teacher, summed and normalised.

    ``p_s = softmax(z_s / T)``, ``p_t = softmax(z_t / T)``; for ``0 < beta < 1``,
    ``m = (1 - beta) p_s + beta p_t`` and ``d_t = beta KL(p_t || m) + (1 - beta) KL(p_s || m)``;
    ``beta = 0`` gives ``KL(p_t || p_s)``, ``beta = 1`` ``KL(p_s || p_t)`` (TRL 1.16's
    ``ChunkedDivergenceFunction``). ``loss = sum_t d_t mask_t / N``, ``N = num_items_in_batch``
    or, when None, the valid tokens here (clamped to 1).

    Args:
        student_logits: (B, T, V) differentiable.
        teacher_logits: (B, T, V) same vocabulary (no gradient is taken through it).
        mask: (B, T) 1 on the completion tokens in the loss.
    Returns:
        ``(loss, per_token)``: the scalar and the (B, T) divergence (0 off the mask).
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ: the teacher must share the student's vocabulary")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta={beta} must be in [0, 1] (0 forward KL, 0.5 JSD, 1 reverse KL)")
    log_ps = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_pt = F.log_softmax(teacher_logits.float().detach() / temperature, dim=-1)
    if beta == 0.0:
        per_token = (log_pt.exp() * (log_pt - log_ps)).sum(-1)
    elif beta == 1.0:
        per_token = (log_ps.exp() * (log_ps - log_pt)).sum(-1)
    else:
        log_m = torch.logaddexp(log_ps + torch.log(torch.tensor(1 - beta)), log_pt + torch.log(torch.tensor(beta)))
        per_token = (beta * (log_pt.exp() * (log_pt - log_m)).sum(-1)
                     + (1 - beta) * (log_ps.exp() * (log_ps - log_m)).sum(-1))
    valid = mask.to(per_token.dtype)
    per_token = per_token * valid
    count = valid.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=per_token.dtype)
    return per_token.sum() / count.clamp(min=1), per_token


def reverse_kl_token_advantages(student_logps: Tensor, teacher_logps: Tensor, mask: Tensor) -> Tensor:
    """(B, T) ``-(log p_s(y_t) - log p_t(y_t))`` on the sampled tokens, 0 off the mask.

    The one-sample estimate of ``-KL(p_s || p_t)`` at each position: used as a per-token
    advantage in a policy gradient, its expectation is the reverse-KL gradient (Lu & Thinking
    Machines 2025, "On-policy distillation"). Every token gets its own signal, where an
    outcome reward gives one number per completion.
    """
    if student_logps.shape != teacher_logps.shape or mask.shape != student_logps.shape:
        raise ValueError("student_logps, teacher_logps and mask must all be (B, T)")
    return -(student_logps.detach() - teacher_logps) * mask.to(student_logps.dtype)


def check_teacher(student_tokenizer, teacher_tokenizer, student_model, teacher_model) -> None:
    """Refuse a teacher whose tokens would not mean the student's tokens.

    The divergence compares probabilities token id by token id: the vocabularies (the
    tokenizers' vocab maps and the models' output sizes) must be identical.
    """
    s_vocab, t_vocab = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if s_vocab != t_vocab:
        differ = len(set(s_vocab.items()) ^ set(t_vocab.items()))
        raise ValueError(f"the teacher's tokenizer differs from the student's ({len(t_vocab)} vs {len(s_vocab)} "
                         f"tokens, {differ} (token, id) entries differ): the divergence compares the two "
                         "distributions token id by token id, so the same id must mean the same token. "
                         "Fix: use a teacher trained with the student's tokenizer.")
    s_size = student_model.get_output_embeddings().weight.shape[0]
    t_size = teacher_model.get_output_embeddings().weight.shape[0]
    if s_size != t_size:
        raise ValueError(f"the teacher predicts over {t_size} tokens and the student over {s_size}: their "
                         "distributions cannot be compared. Fix: use a teacher with the student's vocabulary size.")


def completion_logits(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                      completion_mask: Tensor) -> Tensor:
    """(B, T, V) the logits that predict each completion token (the model's own forward)."""
    from course_lib.policy import position_ids_from_mask

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids_from_mask(attention_mask), use_cache=False).logits
    start = prompt_ids.shape[1] - 1
    return logits[:, start: start + completion_ids.shape[1]]


# ---------------------------------------------------------------------------------------
# 3. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class Distill(Algorithm):
    """On-policy distillation for the trainer: the student's samples, the teacher's distributions."""

    name = "distill"
    config_class = DistillConfig
    always_needs_old_logps = False
    sampling_correction_level = "token"

    def __init__(self):
        self.teacher = None
        self.student = None

    def setup(self, trainer, teacher_model=None) -> None:
        """Take the teacher (a model, a ``(model, tokenizer)`` pair, or a path / name to load; None:
        ``config.teacher_model``) and check that it shares the student's tokenizer and vocabulary."""
        teacher = trainer.config.teacher_model if teacher_model is None else teacher_model
        teacher_tokenizer = None
        if isinstance(teacher, tuple):
            teacher, teacher_tokenizer = teacher
        if teacher is None:
            raise ValueError("distillation needs a teacher: set teacher_model (a path or name) in the config or "
                             "pass teacher_model= (a model) to the Trainer.")
        if isinstance(teacher, str):
            from course_lib.models import load_policy

            teacher, teacher_tokenizer = load_policy(teacher)
        check_teacher(trainer.tokenizer, trainer.tokenizer if teacher_tokenizer is None else teacher_tokenizer,
                      trainer.model, teacher)
        self.teacher = teacher.to(trainer.accelerator.device).eval().requires_grad_(False)
        self.student = trainer.model

    def advantages(self, scored: ScoredBatch, config) -> Advantages:
        return Advantages(advantages=torch.zeros_like(scored.rewards), metrics={})

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config: DistillConfig,
             num_items_in_batch: int) -> LossOutput:
        if self.teacher is None:
            raise RuntimeError("Distill.setup(trainer) was not called: there is no teacher.")
        args = (micro_batch.prompt_ids, micro_batch.prompt_mask, micro_batch.completion_ids,
                micro_batch.completion_mask)
        student_logits = completion_logits(self.student, *args)
        with torch.no_grad():
            teacher_logits = completion_logits(self.teacher, *args)
        loss, per_token = generalized_jsd(student_logits, teacher_logits, micro_batch.completion_mask, config.beta,
                                          config.temperature, num_items_in_batch)
        mask = micro_batch.completion_mask.float()
        with torch.no_grad():
            teacher_logps = torch.log_softmax(teacher_logits.float() / config.temperature, -1).gather(
                -1, micro_batch.completion_ids.unsqueeze(-1)).squeeze(-1)
            gap = reverse_kl_token_advantages(outputs.logps.float(), teacher_logps, mask)
        count = mask.sum().clamp(min=1)
        metrics = {"distill/divergence": (per_token.detach().sum() / count).item(),
                   "distill/teacher_logp_gap": (-gap.sum() / count).item()}
        if outputs.entropies is not None:
            metrics["entropy"] = ((outputs.entropies.detach() * mask).sum() / count).item()
        return LossOutput(loss=loss, metrics=metrics, per_token_loss=per_token)
