"""Reductions over the valid positions of padded tensors.

Completions in a batch have different lengths, so every per-token tensor of shape
`(B, T)` comes with a 0/1 mask of the same shape that says which positions hold a real
token. The helpers here reduce only over those positions.

Empty masks are a normal event in RL for LLMs, not an error: with
`mask_truncated_completions=True` (DAPO) a batch in which every completion hit the length
limit has an all-zero mask. A naive `sum(x * m) / sum(m)` then gives `0 / 0 = NaN`, and
one NaN metric or loss poisons the optimizer state. Every function here returns a
finite value on an empty mask, and each docstring says which one.

:func:`packed_attention_mask` is the other kind of mask: which tokens of a row of packed
examples may attend to which (SFT's packing).

Simplifications: masks are treated as weights (any float works), but the docstrings
speak of 0/1 masks because that is how they are used in this project.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _as_weights(x: Tensor, mask: Tensor) -> Tensor:
    """Return `mask` as a tensor of `x`'s dtype, broadcast-checked against `x`."""
    if mask.shape != x.shape:
        try:
            torch.broadcast_shapes(mask.shape, x.shape)
        except RuntimeError as error:
            raise ValueError(
                f"mask has shape {tuple(mask.shape)} but x has shape {tuple(x.shape)}; "
                "pass a mask that broadcasts to x (usually the same (B, T) shape)"
            ) from error
    return mask.to(x.dtype)


def masked_sum(x: Tensor, mask: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """Sum of `x` over the positions where `mask` is 1.

    Args:
        x: values, e.g. per-token losses `(B, T)`.
        mask: same shape as `x` (or broadcastable), 1 for valid positions.
        dim: dimension(s) to reduce; `None` reduces everything to a scalar.

    Returns:
        The masked sum; 0 where the mask is empty. Masked-out entries of `x` may hold
        anything finite or infinite-free garbage: they are zeroed with `where`, so a NaN
        or inf there does not leak into the result.
    """
    weights = _as_weights(x, mask)
    # `where` instead of `x * weights`: 0 * inf = NaN would leak from padded positions.
    x = torch.where(weights != 0, x, torch.zeros_like(x)) * weights
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """Mean of `x` over the positions where `mask` is 1.

    Args:
        x: values `(B, T)` (any shape).
        mask: same shape as `x`, 1 for valid positions.
        dim: dimension(s) to reduce; `None` gives one scalar over all valid entries,
            `dim=1` gives one mean per sequence `(B,)`.

    Returns:
        `sum(x * mask) / sum(mask)`; **0** wherever the mask is empty (the count is
        clamped to 1, so an empty row contributes 0 and no NaN).
    """
    weights = _as_weights(x, mask)
    total = masked_sum(x, weights, dim)
    count = weights.expand_as(x).sum() if dim is None else weights.expand_as(x).sum(dim=dim)
    return total / count.clamp(min=1.0)


def masked_var(
    x: Tensor, mask: Tensor, unbiased: bool = True, dim: int | None = None
) -> Tensor:
    """Variance of `x` over the valid positions.

    Args:
        x: values `(B, T)`.
        mask: same shape as `x`.
        unbiased: divide by `n - 1` (Bessel's correction) instead of `n`.
        dim: dimension to reduce; `None` for one scalar over all valid entries.

    Returns:
        The masked variance; **0** when fewer than one valid entry (or fewer than two
        when `unbiased`) exists, instead of the NaN/inf that `n - 1 = 0` would give.
    """
    weights = _as_weights(x, mask)
    mean = masked_mean(x, weights, dim)
    if dim is not None:
        mean = mean.unsqueeze(dim)
    squared_dev = (x - mean) ** 2
    total = masked_sum(squared_dev, weights, dim)
    count = weights.expand_as(x).sum() if dim is None else weights.expand_as(x).sum(dim=dim)
    denominator = count - 1.0 if unbiased else count
    # Too few samples to estimate a variance: report 0 rather than NaN or a division by 0.
    enough = denominator > 0
    return torch.where(enough, total / denominator.clamp(min=1.0), torch.zeros_like(total))


def masked_whiten(
    x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> Tensor:
    """Normalize `x` to zero mean and unit variance over the valid positions.

    This is the `whiten` step of PPO implementations (advantage whitening in "The N
    Implementation Details of RLHF with PPO", Huang et al. 2022): statistics are taken
    over all valid entries together, with the unbiased variance.

    Args:
        x: values `(B, T)`.
        mask: same shape as `x`.
        shift_mean: subtract the mean; with `False` the mean is added back after scaling
            (reward whitening: the batch keeps its mean; a single value can change sign,
            e.g. [-0.1, 0.1, 10] -> [2.74, 2.77, 4.49]).
        eps: added to the variance before the square root.

    Returns:
        Tensor shaped like `x`. Masked-out positions are set to 0. With an empty mask
        the result is all zeros.
    """
    weights = _as_weights(x, mask)
    mean = masked_mean(x, weights)
    var = masked_var(x, weights, unbiased=True)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(weights.expand_as(x) != 0, whitened, torch.zeros_like(whitened))


def masked_normalize(
    x: Tensor, mask: Tensor, constant: float, dim: int | tuple[int, ...] | None = None
) -> Tensor:
    """Masked sum divided by a fixed constant instead of the token count.

    Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training") replaces the
    per-sequence length normalisation of GRPO by a constant (the maximum completion
    length), so that long and short answers weigh the same per token.

    Args:
        x: values `(B, T)`.
        mask: same shape as `x`.
        constant: the normaliser, > 0.
        dim: dimension(s) to sum over; `None` for a scalar.

    Returns:
        `masked_sum(x, mask, dim) / constant`; 0 for an empty mask.
    """
    if not constant > 0:
        raise ValueError(
            f"constant={constant!r} must be > 0; pass e.g. max_completion_length"
        )
    return masked_sum(x, mask, dim) / constant


def packed_attention_mask(segment_ids: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(R, 1, L, L) additive mask: token i sees token j iff j <= i and both are in the same example.

    The block-diagonal causal mask that flash-attention's variable-length kernels apply
    from ``position_ids`` alone (TRL's padding-free path); written out here so that any
    attention implementation gives the same result. Padding (segment 0) sees itself only,
    so no row of the softmax is empty.
    """
    length, device = segment_ids.shape[1], segment_ids.device
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1)  # (R, L, L)
    allowed = (same & causal) | torch.eye(length, dtype=torch.bool, device=device)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min
                                                                               ).unsqueeze(1)
