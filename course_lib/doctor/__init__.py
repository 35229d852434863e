"""The run doctor: names what is wrong with an RL run and the fix, live and after the fact.

- :func:`diagnose` ``(rows, config)``: every rule that fires on a history.
- :class:`Doctor`: the same, fed one row at a time, each finding reported once.
- ``core.py``: the findings, the ``@rule`` registry and :func:`diagnose`.
- ``live.py``: ``LiveDoctor``, what the trainer runs (``config.doctor``): a ``Doctor`` over the
  history so far every ``logging_steps``; under ``doctor="stop"`` an error finding stops the run.
- :data:`RULES`: the registry (``course_lib/doctor/rules.py``, ``rules_hacking.py``,
  ``rules_step_size.py`` and ``rules_policy.py`` hold the rules, each with its signals, thresholds
  and their reasons).
- :class:`DoctorCallback`: the same rules live inside TRL's ``GRPOTrainer`` / ``RLOOTrainer``
  (any ``transformers.Trainer``): ``callbacks=[DoctorCallback()]`` (``callback.py``).
- ``museum2.py``: the doctor's score on the second museum, stored runs of this trainer and
  TRL's the rules were not written on (``benchmarks/doctor_museum.py --museum2``).
- ``python -m course_lib doctor RUN_DIR``: the report and a figure for a run folder or a
  TRL ``trainer_state.json`` (``course_lib.doctor.report``).
"""

from . import rules, rules_hacking, rules_step_size, rules_policy  # noqa: F401  (registers the rules, in the report's tie order)
from .core import RULES, SEVERITIES, STAGES, Diagnosis, Doctor, Finding, Rule, diagnose, format_report, rule

__all__ = ["RULES", "SEVERITIES", "STAGES", "Diagnosis", "Doctor", "DoctorCallback", "Finding", "Rule", "diagnose",
           "format_report", "rule"]


def __getattr__(name):
    # transformers is imported only by a program that asks for the callback
    if name == "DoctorCallback":
        from .callback import DoctorCallback

        return DoctorCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
