"""Per-token log-probabilities of sampled tokens, without holding the full logits.

The policy-gradient loss needs `log pi(y_t | y_<t)` for every completion token, one
number per token, but the usual route materialises the `(N, V)` logits (and, in
autograd, several tensors of that size): for 8 completions of 20k tokens and a 128k
vocabulary that is tens of gigabytes, while the answer is `N` numbers.

- `selective_log_softmax`: log-softmax + gather from existing logits, one sequence at a
  time, so only one extra `(T, V)` temporary lives at once.
- `entropy_from_logits`: the entropy of each next-token distribution, in row chunks.
- `fused_linear_logprobs`: from hidden states and the LM-head weight straight to log-probs.
  The forward pass computes the logits of `chunk_size` rows at a time and keeps only
  their log-normaliser; the backward pass recomputes each chunk's logits and forms
  `d log p / d logits = onehot - softmax` on the fly. Peak extra memory is one
  `(chunk_size, V)` buffer instead of several `(N, V)` tensors, at the price of one extra
  matrix product (the recomputation).
- `model_logprobs`: runs a Hugging Face causal LM's body and applies the fused head to the
  completion tokens, with TRL's conventions (shift by one, divide by the temperature,
  0 at padded positions).

- `lm_head` / `head_logprobs`: the one rule, used by the trainer and by `model_logprobs`,
  for turning a model's final hidden states into logits: its output embedding, bias, logit
  scale and soft cap (Gemma-2), read from its config.

The Triton kernels live in :mod:`course_lib.ops.triton_logprobs`, imported when `head_logprobs`
picks them (on CUDA; the import costs about half a second of CPU). A model whose config transforms
its logits in a way `LMHead` does not model is scored through its own forward pass (full logits).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
_triton_logprobs = functools.partial(importlib.import_module, "course_lib.ops.triton_logprobs")


def prefer_triton(device: torch.device | str) -> bool:
    """`triton_logprobs.prefer_triton`: False off CUDA, without importing Triton."""
    return torch.device(device).type == "cuda" and _triton_logprobs().prefer_triton(device)


def triton_linear_logprobs(*args, **kwargs) -> tuple[Tensor, Tensor]:
    """`triton_logprobs.triton_linear_logprobs` (imports Triton)."""
    return _triton_logprobs().triton_linear_logprobs(*args, **kwargs)


# Memory for one chunk of logits (bytes): 64 MiB holds 341 rows of a 49,152-token vocabulary in
# float32, enough for matrix products to run at full speed, small next to the `(N, V)` tensors.
DEFAULT_CHUNK_BYTES = 64 * 2**20


def default_chunk_size(vocab_size: int, budget_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Rows per chunk so that one float32 `(rows, vocab_size)` buffer fits the budget.

    Rounded down to a multiple of 64 (matrix kernels like aligned sizes), at least 64.
    """
    rows = budget_bytes // (4 * max(vocab_size, 1))
    return max(64, rows // 64 * 64)


def selective_log_softmax(logits: Tensor, ids: Tensor, temperature: float = 1.0) -> Tensor:
    """`log_softmax(logits / temperature)` gathered at `ids`, one leading row at a time.

    Args:
        logits: `(B, T, V)` (any `(..., V)`).
        ids: `(B, T)` token ids in `[0, V)`.
        temperature: divides the logits first (sampling temperature), > 0.

    Returns:
        `(B, T)` log-probabilities, in float32 for half-precision logits.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature!r} must be > 0")
    if logits.shape[:-1] != ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and ids {tuple(ids.shape)} disagree; "
            "logits must be ids.shape + (vocab,)"
        )
    if logits.dim() == 1:
        return selective_log_softmax(logits[None], ids[None], temperature)[0]
    rows = []
    for row_logits, row_ids in zip(logits, ids):  # one (T, V) temporary at a time
        if row_logits.dtype not in (torch.float32, torch.float64):
            row_logits = row_logits.float()  # logsumexp in bf16 loses too much precision
        if temperature != 1.0:
            row_logits = row_logits / temperature
        picked = row_logits.gather(-1, row_ids.unsqueeze(-1)).squeeze(-1)
        rows.append(picked - torch.logsumexp(row_logits, dim=-1))
    return torch.stack(rows)


def entropy_from_logits(logits: Tensor, chunk_size: int | None = None) -> Tensor:
    """Shannon entropy (nats) of `softmax(logits)` along the last axis, in row chunks.

    Args:
        logits: `(..., V)`, e.g. `(B, T, V)`.
        chunk_size: rows per chunk; default from `DEFAULT_CHUNK_BYTES`.

    Returns:
        `logits.shape[:-1]`, float32 for half-precision input; differentiable.
    """
    vocab = logits.shape[-1]
    chunk_size = chunk_size or default_chunk_size(vocab)
    flat = logits.reshape(-1, vocab)
    pieces = []
    for chunk in flat.split(chunk_size):
        logp = F.log_softmax(chunk.float() if chunk.dtype in (torch.float16, torch.bfloat16) else chunk, -1)
        pieces.append(-(logp.exp() * logp).sum(-1))
    if not pieces:
        return logits.new_zeros(logits.shape[:-1])
    return torch.cat(pieces).reshape(logits.shape[:-1])


def _chunk_logits(hidden: Tensor, weight_t: Tensor, buffer: Tensor) -> Tensor:
    """`hidden @ weight_t` of one chunk in float32, written into a reused buffer when dtypes allow."""
    rows = hidden.shape[0]
    if hidden.dtype == buffer.dtype:
        out = buffer[:rows]
        torch.mm(hidden, weight_t, out=out)
        return out
    return torch.mm(hidden, weight_t).to(buffer.dtype)


def _pre_scale(scale: float, softcap: float | None, temperature: float) -> float:
    """The factor folded into the small `(N, H)` hidden states instead of the `(N, V)` logits.

    Without soft-capping the whole map `z -> scale * z / T` is linear and moves into the
    hidden states; with it, only `scale` can (the cap sits between scale and temperature).
    """
    return scale if softcap is not None else scale / temperature


class _FusedLinearLogProbs(torch.autograd.Function):
    """`log_softmax(head(hidden))[ids]` with chunked forward and backward.

    `head(h) = cap * tanh(scale * (h @ W.T) / cap) / T` with a soft cap, else
    `scale * (h @ W.T) / T`.
    """

    @staticmethod
    def forward(ctx, hidden, weight, ids, temperature, chunk_size, with_entropy, scale, softcap):
        num_rows = hidden.shape[0]
        pre = _pre_scale(scale, softcap, temperature)
        scaled = hidden if pre == 1.0 else hidden * pre
        compute_dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        weight_t = weight.t()
        buffer = hidden.new_empty((min(chunk_size, num_rows), weight.shape[0]), dtype=compute_dtype)
        log_norm = hidden.new_empty(num_rows, dtype=compute_dtype)
        target = hidden.new_empty(num_rows, dtype=compute_dtype)
        entropy = hidden.new_empty(num_rows, dtype=compute_dtype) if with_entropy else None
        with torch.no_grad():
            for start in range(0, num_rows, chunk_size):
                stop = min(start + chunk_size, num_rows)
                logits = _chunk_logits(scaled[start:stop], weight_t, buffer)  # (c, V)
                if softcap is not None:
                    logits.div_(softcap).tanh_().mul_(softcap / temperature)
                target[start:stop] = logits.gather(1, ids[start:stop, None]).squeeze(1)
                row_max = logits.amax(dim=1, keepdim=True)  # (c, 1)
                if with_entropy:
                    # H = log Z - E_p[z]: needs the logits and the probabilities together.
                    shifted = logits.sub_(row_max)  # in place; the buffer is reused
                    weights = shifted.exp()
                    sum_exp = weights.sum(1)
                    expected = (weights * shifted).sum(1) / sum_exp
                    entropy[start:stop] = sum_exp.log() - expected
                else:
                    logits.sub_(row_max).exp_()  # in place: the buffer is free after this
                    sum_exp = logits.sum(1)
                log_norm[start:stop] = row_max.squeeze(1) + sum_exp.log()
        # E_p[y] = log Z - H, kept for the entropy's gradient (an entropy bonus in the loss).
        expected = log_norm - entropy if with_entropy else log_norm.new_empty(0)
        ctx.save_for_backward(hidden, weight, ids, log_norm, expected)
        ctx.options = (temperature, chunk_size, scale, softcap)
        ctx.set_materialize_grads(False)  # an unused output (often the entropy) costs no work
        # float32 out, like the full-logits path: a log-prob near -10 rounded to bfloat16 is off by up
        # to 0.03 (half a bf16 step there), four times the error of the bf16 logits themselves.
        logps = target - log_norm
        if with_entropy:
            return logps, entropy
        return logps

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy=None):
        hidden, weight, ids, log_norm, expected = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        nothing = (None,) * 8
        if not (need_hidden or need_weight) or (grad_logps is None and grad_entropy is None):
            return nothing
        temperature, chunk_size, scale, softcap = ctx.options
        pre = _pre_scale(scale, softcap, temperature)
        num_rows = hidden.shape[0]
        compute_dtype = log_norm.dtype
        scaled = hidden if pre == 1.0 else hidden * pre
        weight_t = weight.t()
        grad_logps = (torch.zeros_like(log_norm) if grad_logps is None else grad_logps.to(compute_dtype))
        grad_entropy = None if grad_entropy is None else grad_entropy.to(compute_dtype)
        buffer = hidden.new_empty((min(chunk_size, num_rows), weight.shape[0]), dtype=compute_dtype)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=compute_dtype, device=weight.device) if need_weight else None
        )
        weight_c = weight if weight.dtype == compute_dtype else weight.to(compute_dtype)
        for start in range(0, num_rows, chunk_size):
            stop = min(start + chunk_size, num_rows)
            g = grad_logps[start:stop, None]  # (c, 1)
            logits = _chunk_logits(scaled[start:stop], weight_t, buffer)
            tanh = None
            if softcap is None:
                y = logits  # the final logits, temperature included
            else:
                # y = cap * tanh(z / cap) / T, so dy/dz = (1 - tanh^2) / T: one more (c, V) buffer.
                tanh = logits.div_(softcap).tanh_()
                y = tanh * (softcap / temperature)
            # d log p_target / dy = onehot(target) - p; d H / dy = -p (y - E_p[y]).
            if grad_entropy is None:
                grad_z = y.sub_(log_norm[start:stop, None]).exp_().mul_(-g)
            else:
                centred = (y - expected[start:stop, None]).mul_(-grad_entropy[start:stop, None]).sub_(g)
                grad_z = y.sub_(log_norm[start:stop, None]).exp_().mul_(centred)
            grad_z.scatter_add_(1, ids[start:stop, None], g)
            if tanh is not None:
                grad_z.mul_(tanh.square_().neg_().add_(1.0).div_(temperature))
            if need_hidden:
                # z = (h * pre) @ W.T  =>  dL/dh = (dL/dz @ W) * pre
                chunk_grad = grad_z @ weight_c
                if pre != 1.0:
                    chunk_grad.mul_(pre)
                grad_hidden[start:stop] = chunk_grad
            if need_weight:
                h_chunk = scaled[start:stop]
                grad_weight.addmm_(grad_z.t(), h_chunk if h_chunk.dtype == compute_dtype
                                   else h_chunk.to(compute_dtype))
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return (grad_hidden, grad_weight) + (None,) * 6


def fused_linear_logprobs(
    hidden: Tensor,
    weight: Tensor,
    ids: Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    *,
    scale: float = 1.0,
    softcap: float | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Log-probabilities of `ids` under `softmax(head(hidden) / temperature)`.

    `head(h) = scale * (h @ weight.T)`, then `softcap * tanh(. / softcap)` when a soft
    cap is given (Gemma-2's `final_logit_softcapping`), then the division by the
    temperature. Equal (to float rounding) to the same computation on full logits, with
    the same gradients for `hidden` and `weight`, but never holds more than one
    `(chunk_size, V)` block of logits (two with a soft cap, in the backward). This is
    the "fused linear cross-entropy" idea of Liger-Kernel and Unsloth's memory-efficient
    GRPO, written with plain PyTorch ops.

    Args:
        hidden: `(N, H)` or `(B, T, H)` final hidden states (after the last norm).
        weight: `(V, H)` LM-head weight (no bias).
        ids: `(N,)` or `(B, T)` target token ids in `[0, V)`.
        temperature: sampling temperature T > 0; the logits are divided by it.
        chunk_size: rows per chunk; default `default_chunk_size(V)`.
        return_entropy: also return the exact entropy of each row's distribution,
            differentiable (its gradient `-p (y - E_p[y])` is formed chunk by chunk too).
        scale: multiplier of the raw logits (Cohere's `logit_scale`).
        softcap: soft cap of the logits, or None.

    Returns:
        Log-probs shaped like `ids` (and entropies of the same shape), in float32 (float64 for
        float64 inputs) whatever the dtype of `hidden`.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature!r} must be > 0")
    if softcap is not None and softcap <= 0:
        raise ValueError(f"softcap={softcap!r} must be > 0 or None")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} disagree; "
            "weight must be (vocab, hidden) with hidden's last dimension"
        )
    if hidden.shape[:-1] != ids.shape:
        raise ValueError(f"ids {tuple(ids.shape)} must match hidden's leading shape {tuple(hidden.shape[:-1])}")
    chunk_size = chunk_size or default_chunk_size(weight.shape[0])
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1")
    out_shape = ids.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_ids = ids.reshape(-1).long()
    if flat_hidden.shape[0] == 0:
        empty = hidden.new_zeros(out_shape) + 0 * hidden.sum() + 0 * weight.sum()
        return (empty, empty.detach().clone()) if return_entropy else empty
    result = _FusedLinearLogProbs.apply(
        flat_hidden.contiguous(), weight, flat_ids, float(temperature), int(chunk_size), return_entropy,
        float(scale), None if softcap is None else float(softcap),
    )
    if return_entropy:
        logps, entropy = result
        return logps.reshape(out_shape), entropy.reshape(out_shape)
    return result.reshape(out_shape)


# ---------------------------------------------------------------------------------------
# The LM head: one rule for every caller
# ---------------------------------------------------------------------------------------
# Config fields with which a model transforms its logits after the LM head, in a way
# `LMHead` reproduces: Gemma-2/3 soft-cap them, Cohere multiplies, Granite divides.
_SOFTCAP_FIELD = "final_logit_softcapping"
_MULTIPLIER_FIELD = "logit_scale"
_DIVISOR_FIELD = "logits_scaling"
# Fields of other post-head transforms that `LMHead` does not model: such models are
# scored through their own forward pass instead.
_UNMODELLED_FIELDS = ("lm_head_multiplier", "output_multiplier")


@dataclass(frozen=True)
class LMHead:
    """A causal LM's last step from final hidden states to logits, as data.

    `logits(h) = scale * (h @ weight.T + bias)`, soft-capped to
    `softcap * tanh(logits / softcap)` when `softcap` is set. Built by :func:`lm_head`,
    used by both :func:`head_logprobs` callers (the trainer's forward and
    :func:`model_logprobs`), so a model's head is applied the same way everywhere.
    """

    weight: Tensor
    """`(V, H)` output embedding."""
    bias: Tensor | None = None
    """`(V,)` or None."""
    scale: float = 1.0
    """Multiplier of the raw logits."""
    softcap: float | None = None
    """Soft cap, or None."""

    def logits(self, hidden: Tensor) -> Tensor:
        """Full `(..., V)` float32 logits (the naive path; before the temperature)."""
        logits = F.linear(hidden.to(self.weight.dtype), self.weight, self.bias).float()
        if self.scale != 1.0:
            logits = logits * self.scale
        if self.softcap is not None:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        return logits


def lm_head(model) -> LMHead | None:
    """The :class:`LMHead` of a transformers causal LM, or None when it cannot be reproduced.

    A PEFT wrapper is looked through (its adapters stay inside the base model). None
    means: the model transforms its logits in a way not modelled here, so score it with
    its own forward pass.
    """
    from course_lib.models import unwrap_peft

    model = unwrap_peft(model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), Tensor):
        return None
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if any(getattr(config, name, None) not in (None, 1.0) for name in _UNMODELLED_FIELDS):
        return None
    scale = float(getattr(config, _MULTIPLIER_FIELD, None) or 1.0)
    scale /= float(getattr(config, _DIVISOR_FIELD, None) or 1.0)
    softcap = getattr(config, _SOFTCAP_FIELD, None)
    return LMHead(weight=head.weight, bias=getattr(head, "bias", None), scale=scale,
                  softcap=None if not softcap else float(softcap))


def head_logprobs(head: LMHead, hidden: Tensor, ids: Tensor, *, temperature: float = 1.0, fused: bool = True,
                  chunk_size: int | None = None, with_entropy: bool = False,
                  triton: bool | None = None) -> tuple[Tensor, Tensor | None]:
    """Log-probs of `ids` (and exact entropies) from final hidden states through `head`.

    Args:
        head: from :func:`lm_head`.
        hidden: `(..., H)` hidden states, each predicting the token at the same index of `ids`.
        ids: `hidden.shape[:-1]` target ids.
        temperature: the sampler's temperature.
        fused: fused path (never the full logits): the Triton kernels on CUDA, the chunked
            PyTorch autograd function elsewhere; a head with a bias uses full logits.
        chunk_size: rows per chunk of the chunked PyTorch path (the Triton kernels tile by themselves).
        triton: with `fused`, None picks the Triton kernels where they run (CUDA), True
            insists on them (an error where Triton cannot run), False keeps the chunked path.
        with_entropy: also return the entropies (differentiable), else None.

    Returns:
        `(logps, entropies)`, each shaped like `ids`.
    """
    use_triton = prefer_triton(hidden.device) if triton is None else triton
    if use_triton and fused and not _triton_logprobs().triton_available(hidden.device):
        raise ValueError(f"logprob_kernel='triton' needs Triton on a CUDA device; this head runs on {hidden.device}. "
                         "Fix: set logprob_kernel='auto' (Triton where it runs, the chunked path elsewhere).")
    if fused and head.bias is None and use_triton:
        logps, entropies = triton_linear_logprobs(hidden.to(head.weight.dtype), head.weight, ids,  # on CUDA
                                                  temperature=temperature, softcap=head.softcap, logit_scale=head.scale)
        return logps, (entropies if with_entropy else None)
    if fused and head.bias is None:
        result = fused_linear_logprobs(hidden.to(head.weight.dtype), head.weight, ids, temperature=temperature,
                                       chunk_size=chunk_size, return_entropy=with_entropy, scale=head.scale,
                                       softcap=head.softcap)
        return result if with_entropy else (result, None)
    logits = head.logits(hidden) / temperature  # (..., V): small models, or a head with a bias
    logps = selective_log_softmax(logits, ids)
    return logps, (entropy_from_logits(logits) if with_entropy else None)


def model_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
    fused: bool = True,
    chunk_size: int | None = None,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per-token log-probs of the last `logits_to_keep` tokens of `input_ids`.

    The convention of TRL's `_get_per_token_logps_and_entropies`: the token at position
    `t` is scored by the logits at position `t - 1`, divided by `temperature`; positions
    where `attention_mask` is 0 get log-prob 0 (and entropy 0).

    The decoder body (`get_decoder()`) runs to the last hidden states and
    :func:`head_logprobs` applies the model's :class:`LMHead` to the valid completion
    positions only, so with `fused=True` the `(B, T, V)` logits never exist. A model whose
    head is not reproducible (:func:`lm_head` returns None) is scored by its own forward:
    `model(...).logits`, log-softmax, gather.

    Args:
        model: a causal LM (`transformers` `*ForCausalLM`), optionally PEFT-wrapped.
        input_ids: `(B, L)` prompt + completion ids.
        attention_mask: `(B, L)` 1 for real tokens.
        logits_to_keep: number of trailing positions to score (the completion length K).
        temperature: sampling temperature, > 0.
        fused: use the fused head (default) or full logits.
        chunk_size: rows per chunk of the fused head.
        return_entropy: also return per-token entropies (no gradient).

    Returns:
        `(B, K)` log-probs (and `(B, K)` entropies).
    """
    from course_lib.models import unwrap_peft

    if not 0 < logits_to_keep < input_ids.shape[1]:
        raise ValueError(
            f"logits_to_keep={logits_to_keep} must be in [1, {input_ids.shape[1] - 1}] "
            "(at least one prompt token precedes the completion)"
        )
    targets = input_ids[:, -logits_to_keep:]  # (B, K)
    target_mask = attention_mask[:, -logits_to_keep:].bool()  # (B, K)
    base = unwrap_peft(model)
    head = lm_head(base)
    if head is None:
        outputs = model(input_ids=input_ids, attention_mask=attention_mask,
                        logits_to_keep=logits_to_keep + 1, use_cache=False)
        logits = outputs.logits[:, :-1] / temperature  # (B, K, V): position t-1 scores token t
        logps = selective_log_softmax(logits, targets).masked_fill(~target_mask, 0.0)
        if not return_entropy:
            return logps
        with torch.no_grad():
            return logps, entropy_from_logits(logits).masked_fill(~target_mask, 0.0)

    hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    hidden = hidden[:, -logits_to_keep - 1 : -1]  # (B, K, H)
    # Score only the valid positions: padding costs no vocabulary product at all.
    valid_logps, valid_entropy = head_logprobs(head, hidden[target_mask], targets[target_mask],
                                               temperature=temperature, fused=fused, chunk_size=chunk_size,
                                               with_entropy=return_entropy)
    # masked_scatter keeps the graph connected even when no position is valid.
    logps = valid_logps.new_zeros(target_mask.shape).masked_scatter(target_mask, valid_logps)
    if not return_entropy:
        return logps
    entropy = valid_entropy.new_zeros(target_mask.shape).masked_scatter(target_mask, valid_entropy)
    return logps, entropy
