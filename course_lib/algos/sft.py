"""SFT: supervised fine-tuning on demonstrations, with the loss on the completion only.

Everything a lesson on SFT points at, top to bottom:

1. :class:`SFTConfig`: the fields TRL 1.16's ``SFTConfig`` names that this loop reads
   (``max_length``, ``completion_only_loss``, ``assistant_only_loss``, ``packing``, ``loss_type``).
2. :func:`tokenize_prompt_and_output`: prompt + demonstration as one token row, with a
   response mask (CS336 assignment 5's function of the same name: ``input_ids`` and
   ``labels`` shifted by one, ``response_mask`` on the labels).
3. :func:`pack_examples` and :func:`packed_attention_mask`: several examples per row
   without attention across them (TRL's ``packing`` with position ids restarting at each
   example, its ``padding_free`` layout), and :func:`packed_logps` to score such a row.
4. :func:`sft_loss`: the negative log-likelihood of the completion tokens, summed and
   divided by the completion tokens of the *whole* accumulation window
   (``num_items_in_batch``), as ``SFTTrainer.compute_loss`` does; so N micro-batches of
   any sizes give the gradient of one batch. :func:`sft_microbatch_train_step` is the same
   as one CS336 micro-step (loss, backward, metadata).
5. :class:`SFT`: the rows of the dataset become the batch (no sampling, no reward); the
   trainer's loop, history, checkpoints and CLI are the same as for GRPO. It logs TRL's
   ``entropy``, ``mean_token_accuracy`` (the argmax from a gradient-free pass of the LM head,
   :mod:`course_lib.ops.top1`, since the fused head keeps no logits) and ``num_tokens``.

Rows are prompt / completion pairs, or ``messages`` conversations (several turns; the loss on
every token, or with ``assistant_only_loss`` on the assistant's turns only:
:mod:`course_lib.post_training.conversations`).

``packing=True`` trains each micro-batch as one packed row (:mod:`course_lib.post_training.packing`).

Simplifications vs TRL: no ``dataset_text_field`` language-modelling rows; packing packs the
examples of a micro-batch, not the dataset into rows of ``max_length``; no DFT loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Sequence

import torch

from course_lib.algos.base import (Advantages, Algorithm, LossOutput, MicroBatch, PolicyOutputs, ScoredBatch,
                                   entropy_metrics)
from course_lib.config import RLConfig, fail
from course_lib.ops.masking import packed_attention_mask  # the block-diagonal causal mask (the forward uses it too)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SFTConfig(RLConfig):
    """Supervised fine-tuning (TRL 1.16's ``SFTConfig`` names) on the course's loop.

    A batch is ``per_device_train_batch_size`` dataset rows, each one ``prompt`` with its
    ``completion`` (or a ``messages`` conversation ending with the assistant's turn).
    """

    algo: ClassVar[str] = "sft"
    MIN_GENERATIONS: ClassVar[int] = 1
    NEEDS_REWARD_FUNCS: ClassVar[bool] = False
    MESSAGES_ROWS: ClassVar[bool] = True  # a dataset of whole conversations ("messages", no "prompt") is read

    num_generations: int = 1
    """One row per dataset example (there is no sampling); kept at 1."""
    learning_rate: float = 2e-5
    """AdamW learning rate: TRL 1.16's SFTConfig default 2e-5 (tiny models want ~1e-3)."""
    max_length: int | None = 1024
    """Most tokens of prompt + completion (TRL's ``max_length``, default 1024); a longer row is cut
    from the end (``truncation_mode="keep_start"``) and the cut rows are counted in
    ``sft/truncated_rows``. None: no limit."""
    truncation_mode: Literal["keep_start", "error"] = "keep_start"
    """``keep_start`` (TRL's default) keeps the first ``max_length`` tokens; ``error`` refuses a row
    longer than ``max_length`` instead."""
    completion_only_loss: bool | None = None
    """Loss on the completion tokens only (TRL: None means True for prompt/completion rows). False
    trains on the prompt too."""
    assistant_only_loss: bool = False
    """Loss on the assistant's turns only (TRL's default False: a ``messages`` conversation trains on
    every token). Needs conversations; the mask comes from rendering prefixes of the conversation
    (:mod:`course_lib.post_training.conversations`)."""
    packing: bool = False
    """TRL's packing: True lays each micro-batch's examples end to end in one row, without padding,
    positions restarting at each example and no attention across examples (TRL's padding-free
    layout; :mod:`course_lib.post_training.packing`). The loss and gradient equal the unpacked
    ones; the padding's compute is saved."""
    loss_type: Literal["nll"] = "nll"
    """Negative log-likelihood, TRL's default (its ``dft`` variant is not offered)."""
    temperature: float = 1.0
    """Log-probs of the model's own distribution (1.0); only the evaluation samples use it."""

    def to_trl_config(self, **extra):
        """The equivalent ``trl.SFTConfig`` (TRL 1.16): every shared field by name (``max_length``,
        ``completion_only_loss``, ``loss_type``, the optimizer and schedule). ``extra`` overrides."""
        import trl

        from course_lib.config.tools import trl_training_kwargs

        if self.truncation_mode == "error":
            fail("truncation_mode", self.truncation_mode, "has no TRL counterpart (TRL's SFTConfig only cuts long rows)",
                 "export with truncation_mode='keep_start', or shorten the rows first")
        return trl.SFTConfig(**{**trl_training_kwargs(self, trl.SFTConfig), **extra})

    def _check_ranges(self) -> None:
        from course_lib.post_training.batches import refuse_sampling_options

        super()._check_ranges()
        refuse_sampling_options(self)
        if self.num_generations != 1:
            fail("num_generations", self.num_generations, "must be 1 for SFT: each dataset row is one example",
                 "leave num_generations=1")
        if self.max_length is not None and self.max_length < 2:
            fail("max_length", self.max_length, "must be None or at least 2 (one prompt and one completion token)",
                 "use 1024 (TRL's default)")
        if self.temperature != 1.0:
            fail("temperature", self.temperature, "rescales the log-likelihood SFT maximises", "leave temperature=1.0")
        if self.beta != 0.0:
            fail("beta", self.beta, "is a KL coefficient SFT does not read", "leave beta=0.0")

    def _derive_rest(self) -> None:
        super()._derive_rest()
        if self.effective_steps_per_generation != self.gradient_accumulation_steps:
            fail("steps_per_generation", self.steps_per_generation, "must equal gradient_accumulation_steps for SFT: "
                 "the loss divides by the completion tokens of one optimizer step's rows (TRL's num_items_in_batch)",
                 "leave steps_per_generation (and generation_batch_size) unset")


# ---------------------------------------------------------------------------------------
# 2. Tokenising a prompt with its output
# ---------------------------------------------------------------------------------------
@dataclass
class TokenizedRows:
    """Prompt + output token rows, right-padded.  B rows, L = longest row - 1."""

    input_ids: Tensor
    """(B, L) the tokens the model reads: prompt + output without the last token."""
    labels: Tensor
    """(B, L) the next token at each position: prompt + output without the first token."""
    response_mask: Tensor
    """(B, L) 1 where the label is an output token (the loss is taken there), 0 on prompt and padding."""
    truncated: int = 0
    """Rows cut to ``max_length``."""


def tokenize_prompt_and_output(prompt_strs: Sequence[str], output_strs: Sequence[str], tokenizer,
                               max_length: int | None = None) -> TokenizedRows:
    """Tokenise each prompt and its output separately, join them, and mark the output.

    CS336 assignment 5, ``tokenize_prompt_and_output``: ``input_ids`` is the joined row
    without its last token, ``labels`` without its first (the token each position must
    predict), ``response_mask`` is 1 on the labels that are output tokens. Rows are padded
    on the right with the pad token (mask 0). Tokenising separately keeps the boundary
    exact; joining the strings first could merge a token across it.

    Args:
        prompt_strs, output_strs: B strings each.
        tokenizer: a Hugging Face tokenizer.
        max_length: cut a joined row to its first ``max_length`` tokens (None: no cut); the
            number of rows cut is ``truncated``.
    Raises:
        ValueError: lists of different lengths, or an output that tokenises to nothing.
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"{len(prompt_strs)} prompts but {len(output_strs)} outputs; pass one output per prompt.")
    rows, masks, truncated = [], [], 0
    for index, (prompt, output) in enumerate(zip(prompt_strs, output_strs)):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        output_ids = tokenizer(output, add_special_tokens=False)["input_ids"]
        if not output_ids:
            raise ValueError(f"output_strs[{index}] is empty: there is nothing to learn from it. "
                             "Fix: drop rows whose completion is empty.")
        ids, mask = prompt_ids + output_ids, [0] * len(prompt_ids) + [1] * len(output_ids)
        if max_length is not None and len(ids) > max_length:
            ids, mask, truncated = ids[:max_length], mask[:max_length], truncated + 1
        rows.append(ids)
        masks.append(mask)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(r) for r in rows)
    full = torch.full((len(rows), width), int(pad), dtype=torch.long)
    full_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(zip(rows, masks)):
        full[i, :len(ids)] = torch.as_tensor(ids)
        full_mask[i, :len(mask)] = torch.as_tensor(mask)
    return TokenizedRows(input_ids=full[:, :-1], labels=full[:, 1:], response_mask=full_mask[:, 1:],
                         truncated=truncated)


# ---------------------------------------------------------------------------------------
# 3. Packing without attention across examples
# ---------------------------------------------------------------------------------------
@dataclass
class PackedRows:
    """Examples laid end to end in rows of ``max_length`` tokens.  R rows, L = max_length."""

    input_ids: Tensor
    """(R, L) the examples' tokens, right-padded."""
    completion_mask: Tensor
    """(R, L) 1 on each example's completion tokens (where its loss is taken)."""
    position_ids: Tensor
    """(R, L) 0, 1, 2, ... restarting at each example: TRL's padding-free positions."""
    segment_ids: Tensor
    """(R, L) which example of the row a token belongs to (1, 2, ...); 0 on padding."""


def pack_examples(token_rows: Sequence[Sequence[int]], completion_masks: Sequence[Sequence[int]],
                  max_length: int, pad_token_id: int = 0) -> PackedRows:
    """Pack whole examples into rows of ``max_length`` tokens, first fit in the given order.

    TRL's ``packing=True`` fills rows with several examples to waste no compute on padding;
    the examples must not see each other, which :func:`packed_attention_mask` and the
    restarting ``position_ids`` ensure. An example longer than ``max_length`` is refused
    (cut it first: a split example would lose its start or its end).

    Args:
        token_rows: one token list per example (prompt + completion).
        completion_masks: one 0/1 list per example, as long as its tokens.
        max_length: tokens per packed row.
    """
    if max_length < 1:
        raise ValueError(f"max_length={max_length} must be >= 1")
    rows: list[list[tuple[int, int, int, int]]] = []  # (token, mask, position, segment)
    for index, (ids, mask) in enumerate(zip(token_rows, completion_masks, strict=True)):
        if len(ids) != len(mask):
            raise ValueError(f"example {index} has {len(ids)} tokens but a mask of {len(mask)}")
        if len(ids) > max_length:
            raise ValueError(f"example {index} has {len(ids)} tokens, more than max_length={max_length}. "
                             "Fix: truncate examples to max_length before packing.")
        if not rows or len(rows[-1]) + len(ids) > max_length:
            rows.append([])
        segment = 1 + (rows[-1][-1][3] if rows[-1] else 0)
        rows[-1] += [(token, m, position, segment) for position, (token, m) in enumerate(zip(ids, mask))]
    out = {name: torch.zeros((len(rows), max_length), dtype=torch.long) for name in ("ids", "mask", "pos", "seg")}
    out["ids"].fill_(pad_token_id)
    for r, row in enumerate(rows):
        for name, column in zip(("ids", "mask", "pos", "seg"), zip(*row)):
            out[name][r, :len(row)] = torch.as_tensor(column)
    return PackedRows(input_ids=out["ids"], completion_mask=out["mask"], position_ids=out["pos"],
                      segment_ids=out["seg"])


def packed_logps(model, packed: PackedRows) -> Tensor:
    """(R, L) log-prob of each token given the tokens before it *in its own example*; 0 where there
    is no previous token of the same example (first tokens, padding).

    Uses :func:`packed_attention_mask` and the restarting ``position_ids``, so the values equal
    those of each example scored alone.
    """
    from course_lib.ops.logprobs import selective_log_softmax

    mask = packed_attention_mask(packed.segment_ids, dtype=next(model.parameters()).dtype)
    logits = model(input_ids=packed.input_ids, attention_mask=mask, position_ids=packed.position_ids,
                   use_cache=False).logits.float()
    logps = selective_log_softmax(logits[:, :-1], packed.input_ids[:, 1:])
    continues = (packed.segment_ids[:, 1:] == packed.segment_ids[:, :-1]) & (packed.segment_ids[:, 1:] > 0)
    return torch.nn.functional.pad(logps * continues, (1, 0))


# ---------------------------------------------------------------------------------------
# 4. Loss
# ---------------------------------------------------------------------------------------
def sft_loss(logps: Tensor, mask: Tensor, num_items_in_batch: int | float | Tensor | None = None) -> Tensor:
    """Completion-only negative log-likelihood, normalised as ``SFTTrainer.compute_loss``.

    ``loss = sum_{b,t} -logps[b,t] * mask[b,t] / N`` with ``N = num_items_in_batch``, the
    completion tokens of the whole gradient-accumulation window (every micro-batch): so the
    summed gradients of the window equal the gradient of the token mean over the window,
    whatever the micro-batches' sizes. ``N=None`` uses this micro-batch's own tokens. ``N``
    is clamped to 1, so a micro-batch without completion tokens gives 0, not NaN.

    Args:
        logps: (B, T) log-probs of the target tokens (differentiable).
        mask: (B, T) 1 where the loss is taken (completion tokens).
        num_items_in_batch: N, or None.
    Returns:
        the scalar loss.
    """
    if logps.shape != mask.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but logps has {tuple(logps.shape)}")
    weights = mask.to(logps.dtype)
    count = weights.sum() if num_items_in_batch is None else num_items_in_batch
    return (-logps * weights).sum() / torch.as_tensor(count, dtype=logps.dtype, device=logps.device).clamp(min=1)


def sft_microbatch_train_step(policy_log_probs: Tensor, response_mask: Tensor, gradient_accumulation_steps: int,
                              normalize_constant: float = 1.0) -> tuple[Tensor, dict[str, Tensor]]:
    """One micro-batch of SFT in CS336 assignment 5's form: loss, backward, metadata.

    ``loss = sum(-policy_log_probs * response_mask) / normalize_constant / B / gradient_accumulation_steps``
    (the sum over tokens, a constant instead of a token count, a mean over the B rows and
    the accumulation steps), then ``loss.backward()``. With ``normalize_constant`` equal to
    the window's tokens divided by its rows this is :func:`sft_loss`'s normalisation.

    Returns:
        the loss (detached for logging) and ``{"num_response_tokens": ...}``.
    """
    if gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps={gradient_accumulation_steps} must be >= 1")
    per_row = (-policy_log_probs * response_mask.to(policy_log_probs.dtype)).sum(dim=-1) / normalize_constant
    loss = per_row.mean() / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), {"num_response_tokens": response_mask.sum().detach()}


def token_accuracy(logits: Tensor, labels: Tensor, mask: Tensor) -> float:
    """TRL's ``mean_token_accuracy``: the fraction of loss tokens where the label is the argmax.  logits (B, T, V)."""
    valid = mask.bool()
    count = int(valid.sum())
    return float(((logits.argmax(-1) == labels) & valid).sum()) / count if count else 0.0


# ---------------------------------------------------------------------------------------
# 5. The algorithm, as the trainer calls it
# ---------------------------------------------------------------------------------------
class SFT(Algorithm):
    """SFT for the trainer: the dataset's rows are the batch; the loss is :func:`sft_loss`."""

    name = "sft"
    config_class = SFTConfig
    always_needs_old_logps = False
    sampling_correction_level = "token"
    batches = "sft"  # the dataset's demonstrations (course_lib.run.dataset_batches)
    logs_token_accuracy = True  # TRL's mean_token_accuracy (course_lib.ops.top1)

    def setup(self, trainer, **options) -> None:
        from course_lib.post_training.batches import check_sft_rows

        super().setup(trainer, **options)
        check_sft_rows(trainer.dataset, trainer.config.assistant_only_loss)

    def advantages(self, scored: ScoredBatch, config) -> Advantages:
        return Advantages(advantages=torch.zeros_like(scored.rewards), metrics={})

    def loss(self, micro_batch: MicroBatch, outputs: PolicyOutputs, config, num_items_in_batch: int) -> LossOutput:
        """:func:`sft_loss`, with TRL's ``entropy`` and ``mean_token_accuracy`` over the trained tokens of the
        micro-batch (the trainer averages them over the accumulation window, as TRL averages its log)."""
        from course_lib.ops.top1 import mean_token_accuracy

        loss = sft_loss(outputs.logps, micro_batch.completion_mask, num_items_in_batch)
        metrics = entropy_metrics(outputs.entropies, micro_batch.completion_mask.to(outputs.logps.dtype), "entropy")
        if outputs.top1 is not None:
            metrics["mean_token_accuracy"] = mean_token_accuracy(outputs.top1, micro_batch.completion_mask)
        return LossOutput(loss=loss, metrics=metrics)
