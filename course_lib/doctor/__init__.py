"""The run doctor: names what is wrong with an RL run and the fix, live and after the fact.

- :func:`diagnose` ``(rows, config)``: every rule that fires on a history.
- :class:`Doctor`: the same, live, each finding reported once (the trainer's ``doctor=``).
- :data:`RULES`: the registry (``course_lib/doctor/rules.py`` and ``rules_policy.py`` hold
  the rules, each with its signals, thresholds and their reasons).
- ``python -m course_lib doctor RUN_DIR``: the report and a figure for a run folder or a
  TRL ``trainer_state.json`` (``course_lib.doctor.report``).
"""

from . import rules, rules_policy  # noqa: F401  (registers the rules)
from .core import RULES, SEVERITIES, Diagnosis, Doctor, Finding, Rule, diagnose, format_report, rule

__all__ = ["RULES", "SEVERITIES", "Diagnosis", "Doctor", "Finding", "Rule", "diagnose", "format_report", "rule"]
