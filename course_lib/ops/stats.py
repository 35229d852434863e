"""Batch statistics that ignore NaN: the spread of rewards and their standardisation.

A reward function may return None ("not applicable"), which becomes NaN; these helpers
skip such entries instead of letting one NaN poison a whole batch. GRPO's group scaling,
RLOO's Reinforce++ normalisation and the trainer's `reward_std` metric all use them.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor

# Added to a standard deviation before dividing by it (TRL 1.16 uses the same constant
# for GRPO's advantages).
STD_EPS = 1e-4


def nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """Bessel-corrected standard deviation ignoring NaN entries.

    Returns NaN where fewer than two values are present (an undefined spread), as
    TRL's `nanstd` does; `dim=None` reduces everything to a scalar.

    Computed in float64 and returned in `x`'s dtype: squared deviations of rewards of
    magnitude 1e20 or more overflow float32 (3.4e38), which made the spread infinite and
    every advantage 0, while the spread itself fits float32.
    """
    if dim is None:
        x, dim = x.reshape(-1), 0
    dtype = x.dtype
    x = x.double() if x.is_floating_point() and x.device.type != "mps" else x  # MPS has no float64
    count = (~torch.isnan(x)).sum(dim=dim)
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nansum((x - mean) ** 2, dim=dim) / (count - 1).clamp(min=1)
    return torch.where(count > 1, variance.sqrt(), torch.full_like(variance, float("nan"))).to(dtype)


def standardize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """`(x - mean) / (std + eps)` over the whole batch, NaN-aware.

    With fewer than two finite values the spread is undefined and the result is
    `x - mean` (0 for a single value). NaN entries stay NaN.
    """
    centred = x - torch.nanmean(x)
    std = nanstd(x)
    return centred / (std + eps) if not torch.isnan(std) else centred
