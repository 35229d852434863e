"""The models of a training run: policy (optionally LoRA), frozen reference, value head.

- :func:`prepare_policy` applies LoRA (peft), gradient checkpointing and the dtype.
- :func:`reference_context` gives the reference policy for KL terms *without a second
  copy* when LoRA is on (the base model with adapters disabled); otherwise a frozen copy
  is made once, and only when a KL coefficient needs it (beta = 0 loads no reference).
- :func:`completion_forward` runs the transformer body and returns the completion
  tokens' log-probs (fused LM head, never the full ``(B, T, V)`` logits) and, for PPO,
  the value head's per-token values from the same hidden states. A prompt repeated in the
  micro-batch (GRPO's G completions of one prompt) goes through the body once; its
  key/value cache is shared by the completions (see :func:`_shared_prompt_hidden`).

Position ids are derived from the attention mask, as ``generate`` does, so that a
left-padded prompt gets the same positions in training as when it was sampled.
"""

from __future__ import annotations

import contextlib
import copy
import inspect

import torch
from torch import nn

from .logprobs import fused_linear_logprobs, selective_log_softmax
from .ops.triton_logprobs import head_logit_params, prefer_triton, triton_linear_logprobs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str) -> torch.dtype:
    """``auto``: bf16 on a GPU that supports it, fp32 on CPU (fp16 only when asked)."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    return DTYPES[name]


def is_peft_model(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def base_model(model):
    """The ``*ForCausalLM`` under an optional PEFT wrapper."""
    return model.get_base_model() if is_peft_model(model) else model


def prepare_policy(model, config):
    """Return the trainable policy: LoRA adapters when ``config.use_lora``, checkpointing."""
    model.to(resolve_dtype(config.dtype))
    if config.use_lora and not is_peft_model(model):
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    if config.gradient_checkpointing:
        base_model(model).gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        base_model(model).config.use_cache = False
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


class ValueHead(nn.Module):
    """PPO's critic: a linear head giving one scalar per token from last hidden states.

    With ``backbone=None`` the head reads the *policy's* hidden states (a shared trunk: one
    forward pass, the critic's gradient also shapes the policy's features). With a
    backbone (a frozen-architecture copy of the policy's transformer body, trained on its
    own) the critic is a separate value model, as in the original RLHF setups: twice the
    memory, no interference between the two losses.

    The head starts at zero so the first value estimates add no noise to GAE.
    """

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None):
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.summary.weight)
        nn.init.zeros_(self.summary.bias)
        self.backbone = backbone

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.summary(hidden.to(self.summary.weight.dtype)).squeeze(-1)

    def values_for(self, policy_hidden, input_ids, attention_mask, position_ids, start: int, width: int):
        """Values of the completion positions: from the policy's hidden states or its own body."""
        if self.backbone is None:
            return self(policy_hidden)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False).last_hidden_state
        return self(hidden[:, start: start + width])


def make_value_head(policy, separate: bool) -> ValueHead:
    """A value head on the policy's trunk, or on a trainable copy of its transformer body."""
    causal_lm = base_model(policy)
    backbone = None
    if separate:
        backbone = copy.deepcopy(causal_lm.get_decoder())
        for parameter in backbone.parameters():
            parameter.requires_grad_(True)  # LoRA freezes the policy's base weights, not the critic's
    return ValueHead(causal_lm.config.hidden_size, backbone)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


# Off only to time or test the single-pass path against the shared-prompt one.
_SHARE_PROMPT_PASS = True


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


def _shareable_cache(causal_lm, body):
    """An empty KV cache when the prompt pass can be shared, else None.

    Sharing needs a decoder that accepts ``past_key_values``, a cache that keeps every
    prompt position (no sliding-window layers, which drop old keys) and no gradient
    checkpointing in training mode (transformers then drops the cache).
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if "past_key_values" not in inspect.signature(body.forward).parameters:
        return None
    if getattr(causal_lm, "is_gradient_checkpointing", False) and body.training:
        return None
    cache = DynamicCache(config=causal_lm.config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return None
    return cache


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
                       fused: bool = True, chunk_size: int | None = None, value_head: ValueHead | None = None,
                       with_entropy: bool = False):
    """Per-token log-probs of the completion under ``model`` (and values, entropies).

    Rows that share a prompt (prompt-major GRPO batches, whole or partial groups) run the
    prompt through the body once (:func:`_shared_prompt_hidden`); otherwise, or under
    gradient checkpointing, one pass over prompt + completion. Both give the same values.

    Args:
        prompt_ids, prompt_mask: ``(B, P)`` left-padded prompts.
        completion_ids, completion_mask: ``(B, T)`` right-padded completions.
        temperature: log-probs of the temperature-scaled distribution the sampler used.
    Returns:
        ``(logps, values, entropies)``: ``(B, T)`` each; values/entropies are None unless
        asked for.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = position_ids_from_mask(attention_mask)
    causal_lm = base_model(model)
    body = causal_lm.get_decoder()
    start, width = prompt_ids.shape[1] - 1, completion_ids.shape[1]
    first, inverse = _unique_prompt_rows(prompt_ids, prompt_mask)
    repeated = len(first) < len(inverse) and width > 0
    cache = _shareable_cache(causal_lm, body) if _SHARE_PROMPT_PASS and repeated else None
    if cache is not None:
        hidden = _shared_prompt_hidden(body, cache, prompt_ids, prompt_mask, completion_ids, attention_mask,
                                       position_ids, first, inverse)
    else:
        hidden = _full_pass_hidden(body, input_ids, attention_mask, position_ids, start, width)
    # hidden: (B, T, H), the state that predicts completion token t
    head = causal_lm.get_output_embeddings()
    has_bias = getattr(head, "bias", None) is not None
    entropies = None
    if fused and not has_bias and prefer_triton(hidden.device):
        # On CUDA: the Triton head, with the model's own logit scaling and soft-capping.
        logps, entropy = triton_linear_logprobs(hidden.to(head.weight.dtype), head.weight, completion_ids,
                                                temperature=temperature, **head_logit_params(causal_lm.config))
        entropies = entropy.detach() if with_entropy else None
    elif fused and not has_bias and not with_entropy:
        logps = fused_linear_logprobs(hidden, head.weight, completion_ids, temperature=temperature,
                                      chunk_size=chunk_size)
    else:
        logits = head(hidden).float() / temperature  # (B, T, V): small models, or entropy wanted
        logps = selective_log_softmax(logits, completion_ids)
        if with_entropy:
            with torch.no_grad():
                log_p = logits.log_softmax(-1)
                entropies = -(log_p.exp() * log_p).sum(-1)
    values = None
    if value_head is not None:
        values = value_head.values_for(hidden, input_ids, attention_mask, position_ids, start, width)
    return logps, values, entropies
