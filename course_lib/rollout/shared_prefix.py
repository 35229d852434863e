"""Batched generation whose rows start alike: their common prefix runs through the decoder once.

Evaluation prompts usually share their beginning (a system prompt, a worked example, few-shot
demonstrations) and differ only in the question at the end. ``generate`` on left-padded rows
runs that prefix once per row before the first new token, and on a CPU that prefill is most of
a short evaluation: lesson 00's 32 SmolLM2 prompts are 86 tokens each, 73 of them common, and
the prefill takes 21 of the 31 CPU seconds of 32-token greedy answers on one core.

Here the rows are laid out ``[common prefix][padding][own tokens]`` instead of
``[padding][prompt]``: the decoder runs the prefix once (one row), the key/value cache is copied
to every row by indexing, and ``generate`` continues from it, reading only each row's own tokens.
``generate`` takes positions from the attention mask (the count of real tokens before each one),
so every row sees the same tokens at the same positions as with left padding, and the answers
equal plain ``generate``'s up to float rounding (the same 200 greedy answers on lesson 00's task;
``tests/lib/test_shared_prefix.py`` checks both embedded models).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import left_pad

#: Below this many common tokens the saved prefill does not repay the extra pass.
MIN_SHARED_TOKENS = 8


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens at the start of every row, identical in all of them (0 for no rows)."""
    if not rows:
        return 0
    first, shortest = rows[0], min(len(row) for row in rows)
    length = 0
    while length < shortest and all(row[length] == first[length] for row in rows):
        length += 1
    return length


def middle_pad(rows: Sequence[Sequence[int]], prefix_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)``, both ``(len(rows), width)``: the common first ``prefix_length`` tokens in
    the first columns of every row, then left padding, then each row's own tokens."""
    prefix = torch.as_tensor(list(rows[0][:prefix_length]), dtype=torch.long).expand(len(rows), prefix_length)
    rest_ids, rest_mask = left_pad([row[prefix_length:] for row in rows], pad_id)
    return torch.cat([prefix, rest_ids], dim=1), torch.cat([torch.ones_like(prefix), rest_mask], dim=1)


def sharing_decoder(model, generation_config=None):
    """``(decoder, empty cache)`` when a prompt pass can run through the model's decoder and its
    key/value cache be handed to ``generate``, else None.

    None for an encoder-decoder model or one without ``get_decoder``; when ``generate`` is to build
    its own cache (``cache_implementation``: static, quantized) or prefill in chunks
    (``prefill_chunk_size``), in the model's generation config or in ``generation_config``; and in
    the cases of ``course_lib.policy._shareable_cache`` (sliding-window layers, gradient
    checkpointing in training).
    """
    from ..policy import _shareable_cache, unwrap_peft

    causal_lm = unwrap_peft(model)
    if getattr(getattr(causal_lm, "config", None), "is_encoder_decoder", False) or not hasattr(causal_lm,
                                                                                             "get_decoder"):
        return None
    for settings in (getattr(causal_lm, "generation_config", None), generation_config):
        if getattr(settings, "cache_implementation", None) is not None or getattr(settings, "prefill_chunk_size",
                                                                                  None):
            return None
    body = causal_lm.get_decoder()
    cache = _shareable_cache(causal_lm, body)
    return None if cache is None else (body, cache)


def _prefix_cache(model, prefix: torch.Tensor, rows: int, generation_config=None):
    """The key/value cache of ``prefix`` (``(1, L)``) copied to ``rows`` rows, or None when it
    cannot be shared (:func:`sharing_decoder`)."""
    found = sharing_decoder(model, generation_config)
    if found is None:
        return None
    body, cache = found
    with torch.no_grad():
        body(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, past_key_values=cache)
    cache.batch_select_indices(torch.zeros(rows, dtype=torch.long, device=prefix.device))
    return cache


def prefix_shared_inputs(model, rows: Sequence[Sequence[int]], pad_id: int, device,
                         generation_config=None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(ids, mask, extra)`` for ``model.generate(input_ids=ids, attention_mask=mask, **extra)``.

    With at least ``MIN_SHARED_TOKENS`` common tokens and more than one row, the rows are
    middle-padded and ``extra`` holds ``past_key_values``, the common prefix's cache (all of it
    but the last token any row needs to read, so that every row has a token left to feed);
    otherwise the rows are left-padded and ``extra`` is empty. The new tokens are
    ``output[:, ids.shape[1]:]`` either way. ``generation_config``: the one ``generate`` will get,
    when not the model's own (a cache implementation asked for there turns sharing off).
    """
    shared = min(common_prefix_length(rows), min((len(row) for row in rows), default=0) - 1)
    if len(rows) > 1 and shared >= MIN_SHARED_TOKENS:
        ids, mask = middle_pad(rows, shared, pad_id)
        ids, mask = ids.to(device), mask.to(device)
        cache = _prefix_cache(model, ids[:1, :shared], len(rows), generation_config)
        if cache is not None:
            return ids, mask, {"past_key_values": cache}
    ids, mask = left_pad(rows, pad_id)
    return ids.to(device), mask.to(device), {}
