"""Whether each target token is the model's most likely next token: TRL's ``is_top1``.

TRL 1.16's ``SFTTrainer`` logs ``mean_token_accuracy``, the fraction of trained tokens whose
label is the argmax of the next-token logits (its fused head keeps a running maximum beside
the log-normaliser and returns ``is_top1``: the target's logit is the largest and no earlier
vocabulary entry equals it, i.e. ``argmax == target`` with ``torch.argmax``'s first-index
tie rule). The course's fused head (:func:`course_lib.ops.logprobs.head_logprobs`, chunked
PyTorch or Triton) returns log-probs and entropies only, so the argmax is taken here in a
second pass of the same LM head over the same hidden states: without gradient, one
``(chunk_size, V)`` block of logits at a time, so the full logits never exist either. It
costs one more forward product of the head for the positions asked (the fused head's forward
and backward already take three). The temperature does not move the argmax, so the head's
logits (its scale and soft cap included) decide.
"""

from __future__ import annotations

import torch

from course_lib.ops.logprobs import LMHead, default_chunk_size

Tensor = torch.Tensor


@torch.no_grad()
def head_top1(head: LMHead, hidden: Tensor, ids: Tensor, chunk_size: int | None = None) -> Tensor:
    """``(...)`` bool: ``ids`` is the argmax of ``head.logits(hidden)`` (first index on ties).

    Args:
        head: the model's LM head (:func:`course_lib.ops.logprobs.lm_head`).
        hidden: ``(..., H)`` final hidden states, each predicting the token at the same index of ``ids``.
        ids: ``hidden.shape[:-1]`` target ids.
        chunk_size: rows per block of logits; default from ``DEFAULT_CHUNK_BYTES``.
    """
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_ids = ids.reshape(-1)
    chunk_size = chunk_size or default_chunk_size(head.weight.shape[0])
    out = torch.zeros(flat_ids.shape, dtype=torch.bool, device=ids.device)
    for start in range(0, flat_hidden.shape[0], chunk_size):
        logits = head.logits(flat_hidden[start:start + chunk_size])  # (c, V) float32
        out[start:start + chunk_size] = logits.argmax(dim=-1) == flat_ids[start:start + chunk_size]
    return out.reshape(ids.shape)


def mean_token_accuracy(top1: Tensor, mask: Tensor) -> float:
    """TRL's ``mean_token_accuracy`` of one micro-batch: correct trained tokens / trained tokens (0 when none)."""
    valid = mask.bool()
    count = int(valid.sum())
    return float((top1.bool() & valid).sum()) / count if count else 0.0
