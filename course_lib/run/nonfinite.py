"""Stop a run whose loss, gradient or weights are NaN or infinite, so that NaN weights are never saved.

One non-finite gradient is enough to turn every weight into NaN: Adam's moments absorb
it and never recover. ``check_finite_update`` runs between the backward passes of an
optimizer step and ``optimizer.step()``; it raises ``NonFiniteTrainingError`` naming the
step, the metric and its value, and the last checkpoint to resume from (with a lower
learning rate, a smaller ``max_grad_norm``, or ``bf16`` off). The weights are still
those of the previous step when it raises.

A finite gradient can still give non-finite weights (a huge learning rate or weight
decay, a NaN in the optimizer's moments): ``check_finite_weights`` looks at the
parameters after ``optimizer.step()`` and raises before anything is saved or sampled.
``checkpoint.check_finite_state`` does the same for weights and optimizer state read
from a checkpoint. ``clip_gradients`` is ``clip_grad_norm_`` where ``max_grad_norm=0`` means
"no clipping", as documented, instead of scaling every gradient to zero.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

__all__ = ["NonFiniteTrainingError", "check_finite_update", "check_finite_weights", "clip_gradients"]


class NonFiniteTrainingError(RuntimeError):
    """The loss or the gradient norm of an optimizer step is NaN or infinite."""


def check_finite_update(grad_norm: torch.Tensor | float, micro_metrics: list[dict], *, step: int,
                        output_dir: str | Path | None) -> None:
    """Raise ``NonFiniteTrainingError`` if ``grad_norm`` or any micro-batch ``loss`` is not finite.

    Args:
        grad_norm: total gradient norm before clipping (``clip_grad_norm_`` returns it).
        micro_metrics: metric dicts of this step's micro-batches (their ``"loss"`` is checked).
        step: the optimizer step being taken (1-based, as logged).
        output_dir: where checkpoints are written, to name the newest complete one.
    """
    bad = []
    for index, metrics in enumerate(micro_metrics):
        loss = metrics.get("loss")
        if loss is not None and not math.isfinite(loss):
            bad.append(f"loss={loss} (micro-batch {index})")
            break
    norm = float(grad_norm)
    if not math.isfinite(norm):
        bad.append(f"grad_norm={norm}")
    if not bad:
        return
    raise NonFiniteTrainingError(
        f"training stopped at step {step}: {', '.join(bad)} is not finite; the update was not applied. "
        f"{_resume_hint(output_dir)}. Fix: lower learning_rate, lower max_grad_norm, check the rewards for "
        "NaN/inf, or train in float32.")


def _resume_hint(output_dir) -> str:
    from .checkpoint import latest_checkpoint

    last = latest_checkpoint(output_dir) if output_dir is not None else None
    from ..common.wording import resume_latest

    return (f"the last checkpoint is {last} (resume with {resume_latest()})" if last is not None
            else "no checkpoint was saved yet (set save_steps to save some)")


def clip_gradients(parameters: list[torch.nn.Parameter], max_grad_norm: float) -> torch.Tensor:
    """Clip the total gradient norm to ``max_grad_norm`` and return the norm before clipping.

    ``max_grad_norm=0`` disables clipping (TRL's meaning): ``clip_grad_norm_(params, 0)``
    would multiply every gradient by 0 and the weights would never move. The norm is
    still computed (it is logged and checked).
    """
    return torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm > 0 else float("inf"))


def _norms_finite(tensors: list[torch.Tensor]) -> bool:
    """True when every tensor's norm is finite (then every entry is), in one fused call.

    False may also mean a norm overflowed or the tensors could not be taken together:
    the caller then looks at each tensor exactly.
    """
    tensors = [t.detach() for t in tensors if t.is_floating_point() and t.numel()]
    if not tensors:
        return True
    try:
        return bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors)).float()).all())
    except (RuntimeError, TypeError):  # mixed devices or dtypes
        return False


def check_finite_weights(model: torch.nn.Module, extra: torch.nn.Module | None = None, *, step: int,
                         output_dir: str | Path | None, updated: list[torch.Tensor] | None = None) -> None:
    """Raise ``NonFiniteTrainingError`` when a trainable parameter is NaN or infinite after an update.

    Runs after ``optimizer.step()``: nothing is saved and nothing is sampled from such
    weights. ``extra``: a second module trained with the policy (PPO's value head).
    ``updated``: the tensors the update wrote (the optimizer's); when they are all finite
    (one fused check) nothing else is searched, else every parameter is, to name the first.
    """
    if updated is not None and _norms_finite(updated):
        return
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if extra is not None:
        named += [(f"value_head.{n}", p) for n, p in extra.named_parameters()]
    if _norms_finite([p for _, p in named]):
        return
    from ..models import first_non_finite

    bad = first_non_finite(named)
    if bad is not None:
        raise NonFiniteTrainingError(
            f"training stopped at step {step}: the update made the weights non-finite (first: {bad}), although the "
            f"loss and the gradient norm were finite; nothing was saved from them. {_resume_hint(output_dir)}. Fix: "
            "lower learning_rate or weight_decay (the step itself overflowed), or resume from an earlier checkpoint.")
