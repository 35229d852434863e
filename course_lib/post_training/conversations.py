"""Multi-turn chats for SFT: a conversation's tokens and which of them the assistant wrote.

TRL 1.16's ``SFTTrainer`` trains on a ``messages`` row (a whole conversation) and, with
``assistant_only_loss=True``, only on the tokens of the assistant's turns. It reads them from
the chat template's ``{% generation %}`` ... ``{% endgeneration %}`` markers (transformers'
``return_assistant_tokens_mask``), swapping in a patched training template for the model
families it knows. The course's models' templates (ChatML, as SmolLM2's) carry no markers, so
the mask is made here from the template itself, by rendering prefixes of the conversation:

    the assistant message ``i`` spans the characters from the end of ``messages[:i]`` rendered
    with the assistant turn opened (``add_generation_prompt=True``) to the end of
    ``messages[:i+1]`` rendered,

which is exactly what the model writes when it answers that turn at inference: the
message's content and its end-of-turn token, not the turn header the prompt already holds.
For a template whose markers wrap the same text (TRL's Llama-3 training template does), the
two masks are the same (tested against TRL). A token is the assistant's when its characters
overlap a span, as transformers maps a marked span to tokens. The rendering must be
prefix-preserving (each shorter conversation renders as the start of the longer one, TRL's
requirement too); a template that is not is refused, naming the message.

Shapes: a conversation of ``L`` tokens gives ``ids`` and ``mask`` of ``L`` entries each.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..rollout.base import left_pad, pad_token_id


def _render(tokenizer, messages: list, generation_prompt: bool, kwargs: dict) -> str:
    if not messages and not generation_prompt:
        return ""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt,
                                         **kwargs)


def assistant_spans(tokenizer, messages: Sequence[dict], chat_template_kwargs: dict | None = None):
    """``(text, spans)``: the rendered conversation and ``[(start, end), ...]`` character spans of its
    assistant messages (content and end-of-turn), by rendering prefixes of the conversation.

    Raises:
        ValueError: a prefix of the conversation does not render as the start of the whole one.
    """
    kwargs = dict(chat_template_kwargs or {})
    messages = list(messages)
    text = _render(tokenizer, messages, False, kwargs)
    spans = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        opened = _render(tokenizer, messages[:i], True, kwargs)
        closed = _render(tokenizer, messages[:i + 1], False, kwargs)
        if not (text.startswith(opened) and text.startswith(closed) and closed.startswith(opened)):
            raise ValueError(f"the chat template does not render message {i}'s conversation so far as the start of "
                             "the whole conversation (it is not prefix-preserving), so the assistant's tokens cannot "
                             "be found. Fix: use a prefix-preserving template (TRL's requirement for "
                             "assistant_only_loss too), or set assistant_only_loss=False.")
        spans.append((len(opened), len(closed)))
    return text, spans


def tokenize_conversation(tokenizer, messages: Sequence[dict], chat_template_kwargs: dict | None = None,
                          assistant_only: bool = True) -> tuple[list[int], list[int]]:
    """``(ids, mask)`` of one conversation: its chat-template tokens (no special tokens added, as
    ``apply_chat_template`` tokenises) and 1 on the assistant's tokens (every token when not
    ``assistant_only``: TRL's loss on the whole conversation)."""
    text, spans = assistant_spans(tokenizer, messages, chat_template_kwargs)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=assistant_only)
    ids = list(encoded["input_ids"])
    if not assistant_only:
        return ids, [1] * len(ids)
    mask = [int(any(start < end_span and end > start_span for start_span, end_span in spans) and end > start)
            for start, end in encoded["offset_mapping"]]
    return ids, mask


def conversation_batch(tokenizer, config, device, conversations: list, rows: list[int], max_length: int | None,
                       refuse_longer: bool = False):
    """``(GenerationBatch tensors on device, metrics)`` for ``messages`` rows, in the loop's layout.

    Each conversation is cut where its first trained token starts: the tokens before are the
    (left-padded) prompt, the rest the (right-padded) completion, whose ``completion_mask`` is the
    loss mask (the user's later turns are 0 there) and whose ``attention_mask`` is 1 on every
    real token (the model reads the user's turns). ``assistant_only_loss=False`` trains on every
    token but the first. A conversation longer than ``max_length`` keeps its start
    (``sft/truncated_rows`` counts it) or, with ``refuse_longer``, is refused.
    """
    assistant_only = bool(getattr(config, "assistant_only_loss", False))
    kwargs = config.chat_template_kwargs
    prompts, completions, masks, truncated = [], [], [], 0
    for messages, row in zip(conversations, rows):
        ids, mask = tokenize_conversation(tokenizer, messages, kwargs, assistant_only)
        if assistant_only and not any(mask):
            raise ValueError(f"train_dataset row {row}: the conversation has no assistant tokens to train on. "
                             "Fix: drop it, or give it an assistant message.")
        if max_length is not None and len(ids) > max_length:
            if refuse_longer:
                raise ValueError(f"train_dataset row {row}: the conversation is {len(ids)} tokens, more than "
                                 f"max_length={max_length}. Fix: raise max_length, or shorten the conversation "
                                 "(truncation_mode='keep_start' cuts its end).")
            ids, mask, truncated = ids[:max_length], mask[:max_length], truncated + 1
        mask = [0] + mask[1:]  # the first token is never predicted
        first = mask.index(1) if any(mask) else len(ids) - 1  # cut there: the prompt is all that comes before
        first = min(max(first, 1), len(ids) - 1)
        prompts.append(ids[:first])
        completions.append(ids[first:])
        masks.append(mask[first:])
    pad = pad_token_id(tokenizer)
    prompt_ids, prompt_mask = left_pad(prompts, pad)
    width = max(len(c) for c in completions)
    completion_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(zip(completions, masks)):
        completion_ids[i, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        completion_mask[i, :len(mask)] = torch.as_tensor(mask, dtype=torch.long)
        attention_mask[i, :len(ids)] = 1
    tensors = {"prompt_ids": prompt_ids.to(device), "prompt_mask": prompt_mask.to(device),
               "completion_ids": completion_ids.to(device), "completion_mask": completion_mask.to(device),
               "attention_mask": attention_mask.to(device)}
    return tensors, {"sft/truncated_rows": truncated, "num_completion_tokens": int(completion_mask.sum())}


def split_for_display(messages: Sequence[dict]) -> tuple[list, str]:
    """``(prompt messages, rest as text)``: a conversation cut before its first assistant message, for the
    printed samples."""
    messages = list(messages)
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return messages[:first], " | ".join(f"{m.get('role')}: {m.get('content')}" for m in messages[first:])


def check_conversations(conversations: Sequence) -> None:
    """Refuse a ``messages`` row that is not a list of ``{role, content}`` messages with a non-empty assistant
    message (there would be nothing to learn from it)."""
    for row, messages in enumerate(conversations):
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError(f"train_dataset row {row}: 'messages' is a {type(messages).__name__}, not a list of "
                             "{'role': ..., 'content': ...} messages.")
        for index, message in enumerate(messages):
            if not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
                raise ValueError(f"train_dataset row {row}, message {index}: needs a string 'role' and 'content' "
                                 f"(it holds {sorted(message)}).")
        if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
            raise ValueError(f"train_dataset row {row}: the conversation has no non-empty assistant message, so "
                             "there is nothing to learn. Fix: drop the row.")
