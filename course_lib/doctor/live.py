"""The doctor inside the trainer: every ``logging_steps`` it reads the history so far.

``config.doctor``: ``"warn"`` prints each finding once, when it first fires, and writes it to
``history.jsonl`` as a row of type ``"doctor"`` (and the run's config once, a row of type
``"config"``, for the after-the-fact report); ``"stop"`` does the same and asks the
trainer to stop (checkpoint saved) on an error-level finding; ``"off"`` does nothing. A
non-finite loss or gradient, which the trainer refuses before the update, is reported
through the doctor too (rule ``non_finite_values``) before the error propagates.
"""

from __future__ import annotations

import contextlib

from tqdm.auto import tqdm

from .core import RULES, Doctor, Finding

#: Live, the rules read the first HEAD and the last TAIL logged steps: enough for every rule's
#: windows, and a check costs the same at step 10 and step 10,000.
HEAD, TAIL = 20, 200


class LiveDoctor:
    """The trainer's doctor: a :class:`Doctor` run over the logged rows every ``logging_steps``."""

    def __init__(self, config):
        self.mode = config.doctor
        self.every = config.logging_steps
        self.doctor = Doctor(config)
        self.stopped_by: Finding | None = None
        #: Called with each finding's row as it is reported, e.g. ``LiveDashboard.update``, which
        #: then marks the finding on its curves: ``trainer.doctor.on_finding = dashboard.update``.
        self.on_finding = None

    def _report(self, finding: Finding, logger, is_main: bool) -> None:
        row = finding.as_row()
        logger.log_event(row)
        if is_main:
            tqdm.write(str(finding))
            if self.on_finding is not None:
                self.on_finding(row)

    def after_step(self, step: int, logger, is_main: bool = True) -> bool:
        """Check the history at a logging step; True when ``doctor="stop"`` and an error fired."""
        if self.mode == "off" or step % self.every:
            return False
        if not any(e.get("type") == "config" for e in logger.events):  # for `python -m course_lib doctor`
            logger.log_event({"type": "config", "step": 0, "config": self.doctor.config})
        for event in logger.events:  # a resumed run does not report again what it reported before
            if event.get("type") == "doctor" and event.get("rule") in RULES and event["rule"] not in self.doctor.reported:
                self.doctor.reported[event["rule"]] = event
        rows = logger.rows if len(logger.rows) <= HEAD + TAIL else logger.rows[:HEAD] + logger.rows[-TAIL:]
        stop = False
        for finding in self.doctor.check(rows):
            self._report(finding, logger, is_main)
            if self.mode == "stop" and finding.severity == "error" and self.stopped_by is None:
                self.stopped_by, stop = finding, True
        return stop

    @contextlib.contextmanager
    def reporting_non_finite(self, step: int, logger, is_main: bool = True):
        """Report a ``NonFiniteTrainingError`` raised inside the block as a finding, then re-raise it."""
        from ..run.nonfinite import NonFiniteTrainingError

        try:
            yield
        except NonFiniteTrainingError as error:
            self.report_non_finite(step, error, logger, is_main)
            raise

    def report_non_finite(self, step: int, error: Exception, logger, is_main: bool = True) -> None:
        """The trainer's refusal of a non-finite update, as a doctor finding."""
        if self.mode == "off" or "non_finite_values" in self.doctor.reported:
            return
        spec = RULES["non_finite_values"]
        finding = Finding(spec.name, spec.severity, step, str(error), spec.signals, {"step": step})
        self.doctor.reported[spec.name] = finding
        self._report(finding, logger, is_main)
