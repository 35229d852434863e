"""What reward functions log through TRL's ``log_metric`` keyword, gathered for the step's history row.

TRL 1.16 passes every reward function ``log_metric(name, value)``; the values of one name
logged during a step are averaged into that step's metrics (a judge's ``judge/calls`` and
``judge/s``, ``course_lib.judge``). The trainer keeps one :class:`RewardLog`, hands
:meth:`RewardLog.log` to ``compute_rewards`` and empties it into the batch's metrics once the
batch is drawn (all rounds of dynamic sampling together).
"""

from __future__ import annotations


class RewardLog:
    """Scalars logged by reward functions since the last :meth:`pop_means`."""

    def __init__(self) -> None:
        self._values: dict[str, list[float]] = {}

    def log(self, name: str, value: float) -> None:
        """TRL's ``log_metric(name, value)``."""
        self._values.setdefault(str(name), []).append(float(value))

    def pop_means(self) -> dict[str, float]:
        """The mean of each name's values, then an empty log."""
        values, self._values = self._values, {}
        return {name: sum(v) / len(v) for name, v in values.items()}
