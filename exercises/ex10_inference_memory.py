# This file is generated from solutions/ex10_inference_memory.py by `python -m course_lib make-stubs`.
# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.
"""Lesson 10 exercises: log-probs without the full log-softmax, the memory arithmetic of
logits and KV cache, the truncated importance-sampling weight and the four correction modes."""

import math

import torch


def chunked_selective_log_softmax(logits: torch.Tensor, ids: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """`log_softmax(logits)[..., ids]`, computed `chunk_size` rows at a time.

    Flatten `logits` `(B, T, V)` to `N = B * T` rows of `V` values and `ids` `(B, T)` to
    `N` ids. For each block of at most `chunk_size` rows, the log-prob of the chosen id
    is

        log p(id) = logit[id] - logsumexp(logits of the row)

    so no temporary larger than `(chunk_size, V)` is ever created: never call
    `log_softmax` (or `softmax`) on the whole `(B, T, V)` tensor.

    Args:
        logits: `(B, T, V)` float logits (contiguous).
        ids: `(B, T)` token ids in `[0, V)`.
        chunk_size: rows per block, >= 1.

    Example: logits `[[[0., 0.], [2., 0.]]]`, ids `[[1, 0]]` -> `[[-0.6931, -0.1269]]`.

    Returns:
        `(B, T)` log-probabilities.
    """
    # HINT: the log-prob is the chosen logit MINUS the row's logsumexp; gathering alone is not enough.
    raise NotImplementedError("Exercise: replace this line with your code.")


def logits_memory_bytes(batch: int, seq_len: int, vocab: int, bytes_per_value: int = 2, copies: int = 2) -> int:
    """Bytes held by `copies` logits tensors of shape `(batch, seq_len, vocab)`.

    A standard GRPO loss materialises the logits of the policy and of the reference (or
    old) model: `copies=2`, each value `bytes_per_value` bytes (2 in bf16 or fp16).

    Example: 8 generations x 20K context (20 x 1024 = 20,480 tokens) x 128,256 vocabulary
    gives 84,053,852,160 bytes = 78.3 GiB (2^30 bytes, what the Unsloth guide calls GB).
    """
    raise NotImplementedError("Exercise: replace this line with your code.")


def kv_cache_bytes(layers: int, kv_dim: int, context: int, batch: int = 1, bytes_per_value: int = 2) -> int:
    """Bytes of a KV cache: keys AND values, for every layer, position and sequence.

    `kv_dim` is the width of the keys of one layer (number of KV heads x head size; 1024
    for Llama 3.1 8B: 8 heads of 128).

    Example: Llama 3.1 8B, 32 layers, kv_dim 1024, 20K context (20,480), batch 1, 16-bit:
    2,684,354,560 bytes = 2.5 GiB; a batch of 8 needs 20 GiB.
    """
    raise NotImplementedError("Exercise: replace this line with your code.")


def truncated_is_weight(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
                        cap: float = 2.0) -> torch.Tensor:
    """Truncated importance-sampling weight per token: `min(pi_train / pi_sampler, cap)`.

    The engine that sampled the tokens (vLLM) and the trainer compute slightly different
    probabilities for the same tokens. The loss of each token is multiplied by

        w_t = min(exp(old_logps_t - sampling_logps_t), cap)

    where `old_logps` are the trainer's log-probs at sampling time and `sampling_logps`
    the engine's. Only the top is truncated (no lower bound). At masked positions
    (`mask == 0`) the weight is 1. The weight is a constant of the loss: the result
    must carry no gradient, even if the inputs do.

    Args:
        old_logps, sampling_logps, mask: `(B, T)`.
        cap: truncation constant C (`vllm_importance_sampling_cap`, default 2.0).

    Example: `old=[[0., -1.]]`, `sampling=[[-1., 0.]]`, mask ones, cap 2 ->
    `[[2.0, 0.3679]]` (e^1 = 2.718 is truncated to 2).

    Returns:
        `(B, T)` weights in `(0, cap]`.
    """
    # HINT: the ratio is trainer over sampler, exp(old - sampling); cap it from above only.
    raise NotImplementedError("Exercise: replace this line with your code.")


def correction_weight(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
                      mode: str = "sequence_mask", clip_min: float | None = None,
                      clip_max: float | None = 3.0) -> torch.Tensor:
    """The sampler-mismatch weight in each of TRL 1.16's `vllm_importance_sampling_mode`s.

    With the per-token log-ratio `d_t = (old_logps_t - sampling_logps_t)` at valid tokens
    (0 at masked ones):

    - `token_*`: one weight per token, `w_t = exp(d_t)`, shape `(B, T)`;
    - `sequence_*`: one weight per completion, `w = exp(sum_t d_t)` (the product of the
      token ratios: the probability of the whole completion), shape `(B, 1)`;
    - `*_truncate`: clamp the weight into `[clip_min, clip_max]` (TIS);
    - `*_mask`: set weights outside `[clip_min, clip_max]` to 0 (MIS: the token or the
      completion drops out of the loss).

    A bound that is None does not apply. The weight carries no gradient.

    Example: `old = [[0., -1.]]`, `sampling = [[-1., 0.]]` (d = [1, -1]), mask ones:
    token_truncate with clip_max 2 -> `[[2.0, 0.368]]`; token_mask with clip_max 2 ->
    `[[0.0, 0.368]]`; sequence_mask -> `[[1.0]]` (the two tokens cancel).

    Returns:
        `(B, T)` or `(B, 1)` weights.
    """
    # HINT: sequence modes sum the log-ratios before the exponential (a product of ratios).
    raise NotImplementedError("Exercise: replace this line with your code.")


def sampling_version(taken_step: int, max_staleness: int, weight_sync_steps: int = 1) -> int:
    """Asynchronous RL's version bookkeeping: which weights sample the batch the trainer takes at
    optimizer step `taken_step`.

    The worker only ever receives the weights of steps that are multiples of
    `weight_sync_steps` (step 0, the initial weights, included), and a batch taken at step
    `s` may be sampled by weights at most `max_staleness` steps older than the trainer's:
    its version `v` satisfies `s - max_staleness <= v <= s`. Return the *oldest* such
    version (the one that lets generation run furthest ahead). Assume
    `weight_sync_steps <= max_staleness + 1`, so one always exists.

    Example: max_staleness=1, weight_sync_steps=1: steps 0, 1, 2, 3 -> versions 0, 0, 1, 2.
    max_staleness=3, weight_sync_steps=2: step 6 -> version 4 (step 3 was never sent).
    """
    # HINT: start at s - max_staleness (not below 0) and round *up* to a multiple of weight_sync_steps.
    raise NotImplementedError("Exercise: replace this line with your code.")
