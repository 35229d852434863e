"""Stop a run whose loss or gradient is NaN or infinite, before the optimizer applies it.

One non-finite gradient is enough to turn every weight into NaN: Adam's moments absorb
it and never recover. ``check_finite_update`` runs between the backward passes of an
optimizer step and ``optimizer.step()``; it raises ``NonFiniteTrainingError`` naming the
step, the metric and its value, and the last checkpoint to resume from (with a lower
learning rate, a smaller ``max_grad_norm``, or ``bf16`` off). The weights are still
those of the previous step when it raises.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

__all__ = ["NonFiniteTrainingError", "check_finite_update"]


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
    from .checkpoint import latest_checkpoint

    last = latest_checkpoint(output_dir) if output_dir is not None else None
    resume = (f"the last checkpoint is {last} (resume with --resume-from latest)" if last is not None
              else "no checkpoint was saved yet (set save_steps to save some)")
    raise NonFiniteTrainingError(
        f"training stopped at step {step}: {', '.join(bad)} is not finite; the update was not applied. "
        f"{resume}. Fix: lower learning_rate, lower max_grad_norm, check the rewards for NaN/inf, "
        "or train in float32.")
