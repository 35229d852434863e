"""The models of a training run: the policy (optionally LoRA) and its frozen reference.

- :func:`prepare_policy` applies LoRA (peft), gradient checkpointing and the dtype.
- :func:`reference_context` gives the reference policy for KL terms *without a second
  copy* when LoRA is on (the base model with adapters disabled); otherwise a frozen copy
  is made once, and only when a KL coefficient needs it (beta = 0 loads no reference).
- :func:`completion_forward` runs the transformer body and returns the completion
  tokens' log-probs and exact entropies (the model's LM head applied by
  :func:`course_lib.ops.logprobs.head_logprobs`, fused: never the full ``(B, T, V)``
  logits) and, for PPO, the value head's per-token values from the same hidden states
  (the value head itself is PPO's, in :mod:`course_lib.algos.ppo`). A prompt repeated in the
  micro-batch (GRPO's G completions of one prompt) goes through the body once; its
  key/value cache is shared by the completions (see :func:`_shared_prompt_hidden`).
- :class:`PolicyForward`: the policy and PPO's value head as one module whose forward is
  :func:`completion_forward`, so that DDP (which syncs the gradients of the module it
  wraps) wraps the forward the trainer runs.

Position ids are derived from the attention mask, as ``generate`` does, so that a
left-padded prompt gets the same positions in training as when it was sampled.
"""

from __future__ import annotations

import contextlib
import copy
import inspect

import torch
from torch import nn

from .models import is_peft_model, resolve_dtype, unwrap_peft
from .ops.logprobs import head_logprobs, lm_head, selective_log_softmax
from .ops.masking import packed_attention_mask


def prepare_policy(model, config, device: torch.device | str | None = None):
    """Return the trainable policy on ``device``: its dtype, LoRA adapters when ``config.use_lora``,
    gradient checkpointing. ``dtype="auto"`` gives bf16 only on a CUDA device that has it."""
    device = torch.device("cpu") if device is None else torch.device(device)
    model.to(device=device, dtype=resolve_dtype(config.dtype, device))
    if config.use_lora and not is_peft_model(model):
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    if config.gradient_checkpointing:
        unwrap_peft(model).gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        unwrap_peft(model).config.use_cache = False
    return model


class ReferencePolicy:
    """Log-probs under the frozen initial policy (for the KL terms)."""

    def __init__(self, policy):
        self._copy = None
        if not is_peft_model(policy):
            self._copy = copy.deepcopy(policy).eval()
            for parameter in self._copy.parameters():
                parameter.requires_grad_(False)
        self._policy = policy

    @contextlib.contextmanager
    def model(self):
        """The reference model: the frozen copy, or the LoRA policy with adapters off."""
        if self._copy is not None:
            yield self._copy
        else:
            with self._policy.disable_adapter():
                yield self._policy


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def position_ids_from_segments(segment_ids: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` 0, 1, 2, ... restarting wherever ``segment_ids`` changes: each packed example's own positions."""
    index = torch.arange(segment_ids.shape[1], device=segment_ids.device).expand_as(segment_ids)
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    return index - torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values


def _unique_prompt_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
    """``(first, inverse)``: one row index per distinct prompt ``(U,)``, and each row's prompt ``(B,)``.

    Two rows hold the same prompt when their masks and their unmasked tokens agree (the
    ids under the padding may differ: no real token attends to them).
    """
    mask = prompt_mask.long()
    keys = torch.cat([prompt_ids * mask, mask], dim=1)  # (B, 2P)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    rows = torch.arange(len(keys), device=keys.device)
    first = torch.full((len(unique),), len(keys), dtype=torch.long, device=keys.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")  # lowest row holding each prompt
    return first, inverse


_ACCEPTS_CACHE: dict = {}  # forward function -> whether it takes past_key_values (inspect is slow)
_PLAIN_LAYERS: dict = {}  # id(config) -> (config, whether its cache holds only full-attention DynamicLayers)


def _accepts_cache(body) -> bool:
    forward = getattr(body.forward, "__func__", body.forward)
    if forward not in _ACCEPTS_CACHE:
        _ACCEPTS_CACHE[forward] = "past_key_values" in inspect.signature(body.forward).parameters
    return _ACCEPTS_CACHE[forward]


def _shareable_cache(causal_lm, body):
    """An empty KV cache when the prompt pass can be shared, else None.

    Sharing needs a decoder that accepts ``past_key_values``, a cache that keeps every
    prompt position (no sliding-window layers, which drop old keys) and no gradient
    checkpointing in training mode (transformers then drops the cache).
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if not _accepts_cache(body):
        return None
    if getattr(causal_lm, "is_gradient_checkpointing", False) and body.training:
        return None
    config = causal_lm.config
    known = _PLAIN_LAYERS.get(id(config))
    if known is not None and known[0] is config:  # building the cache from the config is slow: once per config
        return DynamicCache() if known[1] else None  # every layer a DynamicLayer, as the config would build
    cache = DynamicCache(config=config)
    plain = all(type(layer) is DynamicLayer for layer in cache.layers)
    _PLAIN_LAYERS[id(config)] = (config, plain)
    return cache if plain else None


def _full_pass_hidden(body, input_ids, attention_mask, position_ids, start: int, width: int):
    """``(B, T, H)`` hidden states predicting each completion token, from one pass over prompt + completion.

    ``start = P - 1``: the last prompt position predicts completion token 0; ``width = T``.
    """
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                  use_cache=False).last_hidden_state  # (B, P + T, H)
    return hidden[:, start: start + width]


def _shared_prompt_hidden(body, cache, prompt_ids, prompt_mask, completion_ids, attention_mask, position_ids,
                          first, inverse):
    """``(B, T, H)`` hidden states predicting each completion token, each distinct prompt run once.

    GRPO repeats every prompt G times: a single pass computes each prompt G times and keeps
    G copies of its activations for the backward. With short completions that is most of
    the work (about 90% of the tokens for the tiny model's arithmetic prompts, 8
    completions of 6 tokens each). Here the body runs on the U distinct
    prompts ``(U, P)``, with gradients, filling ``cache``; the cache is expanded to one row
    per completion by indexing (a differentiable gather: the backward sums the G rows'
    gradients into the shared prompt), and a second pass runs only the completion tokens
    that predict another token, ``(B, T - 1)``, attending to the cached prompt. Positions
    and the attention mask are those of the single pass, so the result equals it up to
    float rounding. One difference under dropout (e.g. LoRA's): the G completions of a
    prompt share one dropout mask on the prompt's activations instead of drawing G.
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    prompt_hidden = body(input_ids=prompt_ids[first], attention_mask=prompt_mask[first],
                         position_ids=position_ids[first, :P], past_key_values=cache,
                         use_cache=True).last_hidden_state  # (U, P, H)
    last_prompt_state = prompt_hidden[inverse, -1:]  # (B, 1, H): predicts completion token 0
    if T == 1:
        return last_prompt_state
    cache.batch_select_indices(inverse)  # (U, ...) -> (B, ...) keys and values, in the graph
    completion_hidden = body(input_ids=completion_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                             position_ids=position_ids[:, P:-1], past_key_values=cache,
                             use_cache=True).last_hidden_state  # (B, T - 1, H): predict tokens 1..T-1
    return torch.cat([last_prompt_state, completion_hidden], dim=1)


def completion_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature: float = 1.0,
                       fused: bool = True, chunk_size: int | None = None, value_head=None,
                       with_entropy: bool = False, triton: bool | None = None, share_prompt: bool = True,
                       segment_ids: torch.Tensor | None = None, with_top1: bool = False):
    """Per-token log-probs of the completion under ``model`` (and values, entropies).

    Rows that share a prompt (prompt-major GRPO batches, whole or partial groups) run the
    prompt through the body once (:func:`_shared_prompt_hidden`); otherwise, or under
    gradient checkpointing, one pass over prompt + completion. Both give the same values.
    The LM head is the model's own, as :func:`course_lib.ops.logprobs.lm_head` reads it
    (bias, logit scale, Gemma-2's soft cap); a model whose head it cannot reproduce is
    scored through its own forward pass.

    Args:
        prompt_ids, prompt_mask: ``(B, P)`` left-padded prompts.
        completion_ids, completion_mask: ``(B, T)`` right-padded completions.
        temperature: log-probs of the temperature-scaled distribution the sampler used.
        fused: chunked LM head (never the ``(B, T, V)`` logits).
        triton: the Triton kernels for the fused head: None picks them on CUDA, True insists,
            False keeps the chunked PyTorch path (``config.logprob_kernel``).
        value_head: PPO's critic (:class:`course_lib.algos.ppo.ValueHead`), or None.
        with_entropy: also return the exact entropy of each next-token distribution.
        share_prompt: False always takes the single pass (to time or test it against the other).
        segment_ids: ``(B, P + T)`` packed rows (SFT's ``packing``, :mod:`course_lib.post_training.packing`):
            which example each token belongs to (0: padding); the positions restart at each example
            and no token attends across examples (a block-diagonal causal mask replaces the masks).
        with_top1: also return whether each completion token is the argmax of its logits (TRL's
            ``is_top1``, for ``mean_token_accuracy``; :func:`course_lib.ops.top1.head_top1`, no gradient).
    Returns:
        ``(logps, values, entropies)``: ``(B, T)`` each; values/entropies are None unless
        asked for; with ``with_top1`` a fourth, ``(B, T)`` bool (False where ``completion_mask`` is 0).
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = position_ids_from_mask(attention_mask)
    if segment_ids is not None:  # packed examples: their own positions, no attention across them
        position_ids = position_ids_from_segments(segment_ids)
        attention_mask = packed_attention_mask(segment_ids, dtype=next(model.parameters()).dtype)
        share_prompt = False
    causal_lm = unwrap_peft(model)
    start, width = prompt_ids.shape[1] - 1, completion_ids.shape[1]
    head = lm_head(causal_lm)
    if head is None:
        out = _own_forward(model, input_ids, attention_mask, position_ids, completion_ids, start, width,
                           temperature, value_head, with_entropy, with_top1)
        return out[:3] + (out[3] & completion_mask.bool(),) if with_top1 else out[:3]
    body = causal_lm.get_decoder()
    first, inverse = _unique_prompt_rows(prompt_ids, prompt_mask)
    repeated = len(first) < len(inverse) and width > 0
    cache = _shareable_cache(causal_lm, body) if share_prompt and repeated else None
    if cache is not None:
        hidden = _shared_prompt_hidden(body, cache, prompt_ids, prompt_mask, completion_ids, attention_mask,
                                       position_ids, first, inverse)
    else:
        hidden = _full_pass_hidden(body, input_ids, attention_mask, position_ids, start, width)
    # hidden: (B, T, H), the state that predicts completion token t
    logps, entropies = head_logprobs(head, hidden, completion_ids, temperature=temperature, fused=fused,
                                     chunk_size=chunk_size, with_entropy=with_entropy, triton=triton)
    values = None
    if value_head is not None:
        values = value_head.values_for(hidden, input_ids, attention_mask, position_ids, start, width)
    if not with_top1:
        return logps, values, entropies
    from .ops.top1 import head_top1

    valid = completion_mask.bool()  # the argmax of the real completion positions only
    top1 = torch.zeros_like(valid).masked_scatter(valid, head_top1(head, hidden[valid], completion_ids[valid],
                                                                   chunk_size))
    return logps, values, entropies, top1


def _own_forward(model, input_ids, attention_mask, position_ids, completion_ids, start: int, width: int,
                 temperature: float, value_head, with_entropy: bool, with_top1: bool = False):
    """:func:`completion_forward` through the model's own forward (full logits)."""
    from .ops.logprobs import entropy_from_logits

    outputs = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False, output_hidden_states=value_head is not None)
    logits = outputs.logits[:, start: start + width].float() / temperature  # (B, T, V)
    logps = selective_log_softmax(logits, completion_ids)
    entropies = entropy_from_logits(logits) if with_entropy else None  # differentiable: an entropy bonus
    values = None
    if value_head is not None:
        hidden = outputs.hidden_states[-1][:, start: start + width]
        values = value_head.values_for(hidden, input_ids, attention_mask, position_ids, start, width)
    return logps, values, entropies, (logits.argmax(-1) == completion_ids if with_top1 else None)


class PolicyForward(nn.Module):
    """The policy (and PPO's value head) as one module whose forward is `completion_forward`.

    DDP synchronises gradients of the module it wraps when that module's forward runs;
    the trainer's forward goes through the decoder body and the fused head rather than the
    model's own `forward`, so this wrapper is what DDP wraps.
    """

    def __init__(self, policy: nn.Module, value_head: nn.Module | None):
        super().__init__()
        self.policy = policy
        self.value_head = value_head

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask, **options):
        return completion_forward(self.policy, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                  value_head=self.value_head, **options)
