"""SFT's ``packing=True`` in the trainer's loop: each micro-batch's examples in one row, no padding.

TRL 1.16 packs without attention across examples by flattening a batch's examples into one
row and restarting ``position_ids`` at each example (its ``padding_free`` collator; the
``bfd`` packing strategy implies it); the attention kernel reads the example boundaries from
the positions. Here the same row is built from the loop's own batch (left-padded prompts,
right-padded completions, :mod:`course_lib.run.dataset_batches`), with ``segment_ids`` that
say which example each token belongs to: the forward turns them into the restarting
positions and the block-diagonal causal mask (:func:`course_lib.ops.masking.packed_attention_mask`,
written out, so that any attention implementation gives the same result). Every example is
then scored exactly as alone, so a packed step's loss and gradient equal the unpacked step's
(tested to 1e-6); what packing saves is the padding's compute.

Layout of one packed row of ``W`` tokens: ``prompt_ids`` ``(M, 1)`` holds its first token,
``completion_ids`` ``(M, W - 1)`` the rest; ``completion_mask`` is 1 where a token is trained
(a completion, or assistant, token of its example), ``attention_mask`` 1 on every real token,
``segment_ids`` ``(M, W)`` 1, 2, ... per example and 0 on the right padding. ``M`` is the number
of micro-batches: one row each.

Simplification vs TRL: a micro-batch packs the ``per_device_train_batch_size`` examples the
sampler drew for it (so a step trains the same examples as without packing), not as many
examples as fit in rows of ``max_length`` (TRL's dataset-level ``packing``, under which one
step sees a varying number of examples).
"""

from __future__ import annotations

import torch


def pack_micro_batches(tensors: dict, size: int) -> dict:
    """The loop's batch tensors for ``B`` rows -> one packed row per ``size`` rows (``B / size`` rows).

    Args:
        tensors: ``prompt_ids``, ``prompt_mask`` ``(B, P)`` left-padded; ``completion_ids``,
            ``completion_mask`` ``(B, T)`` right-padded; optionally ``attention_mask`` ``(B, T)``
            (1 on the completion's real tokens when it holds untrained ones, e.g. user turns).
        size: rows per micro-batch (``per_device_train_batch_size``).
    Returns:
        the same keys plus ``segment_ids``, in the packed layout above.
    """
    prompt_ids, prompt_mask = tensors["prompt_ids"], tensors["prompt_mask"].bool()
    completion_ids, loss_mask = tensors["completion_ids"], tensors["completion_mask"]
    read = tensors.get("attention_mask", loss_mask).bool()
    device = prompt_ids.device
    packs = []
    for start in range(0, prompt_ids.shape[0], size):
        ids, trained, segments = [], [], []
        for row in range(start, min(start + size, prompt_ids.shape[0])):
            prompt = prompt_ids[row][prompt_mask[row]]
            completion = completion_ids[row][read[row]]
            ids += prompt.tolist() + completion.tolist()
            trained += [0] * len(prompt) + loss_mask[row][read[row]].tolist()
            segments += [row - start + 1] * (len(prompt) + len(completion))
        packs.append((ids, trained, segments))
    width = max(len(ids) for ids, _, _ in packs)
    out = {name: torch.zeros((len(packs), width), dtype=torch.long) for name in ("ids", "trained", "segments")}
    for r, (ids, trained, segments) in enumerate(packs):
        out["ids"][r, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        out["trained"][r, :len(ids)] = torch.as_tensor(trained, dtype=torch.long)
        out["segments"][r, :len(ids)] = torch.as_tensor(segments, dtype=torch.long)
    ids, segments = out["ids"].to(device), out["segments"].to(device)
    return {"prompt_ids": ids[:, :1], "prompt_mask": torch.ones_like(ids[:, :1]),
            "completion_ids": ids[:, 1:], "completion_mask": out["trained"][:, 1:].to(device),
            "attention_mask": (segments[:, 1:] > 0).long(), "segment_ids": segments}
