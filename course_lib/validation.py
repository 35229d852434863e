"""Reject non-finite numbers in configurations at construction, before they reach a run.

``float("nan")`` passes every range check (``nan < 0`` is False), so ``beta=nan`` or
``learning_rate=inf`` used to get through and fail much later, inside sampling
("probability tensor contains inf or nan"), or worse, train silently with NaN weights.
``check_finite_fields`` looks at every float of a dataclass config, including floats
inside lists (``reward_weights``), and raises with the field, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["check_finite_fields", "non_finite"]


def non_finite(value: Any) -> bool:
    """True for a float (or a list/tuple holding one) that is NaN or infinite; bools and ints are finite."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(non_finite(v) for v in value)
    return False


def check_finite_fields(config: Any) -> None:
    """Raise ``ValueError`` naming the first field of ``config`` that holds NaN or infinity.

    Only fields set at construction are checked (``init=True``); derived fields are
    computed from them afterwards.
    """
    for spec in dataclasses.fields(config):
        if not spec.init:
            continue
        value = getattr(config, spec.name)
        if non_finite(value):
            default = spec.default if spec.default is not dataclasses.MISSING else None
            hint = f"the default is {default!r}" if default is not None else "use None or a finite number"
            raise ValueError(f"{spec.name}={value!r} is not a finite number (NaN and infinity are refused: they "
                             f"would turn the loss or the sampling distribution into NaN). Fix: set {spec.name} "
                             f"to a finite value; {hint}.")
