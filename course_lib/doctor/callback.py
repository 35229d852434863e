"""The doctor inside TRL: a ``transformers.TrainerCallback`` for any ``Trainer`` that logs RL metrics.

    from course_lib.doctor import DoctorCallback
    trainer = GRPOTrainer(..., callbacks=[DoctorCallback()])   # or RLOOTrainer, SFTTrainer, DPOTrainer

At every log (``logging_steps``) it adds the logged metrics to its history, runs the same
rules as ``python -m course_lib doctor`` and this trainer's live doctor, prints each finding
once, when it first fires, and writes it into the trainer's ``log_history`` (so the saved
``trainer_state.json`` carries it, as a row of type ``"doctor"``) and into
``<output_dir>/doctor.jsonl`` (one finding a line, written at once: a run killed before it
saves its state still leaves its findings). ``stop=True`` ends training on an error-level
finding (``control.should_training_stop``), as ``doctor="stop"`` does here.

A log with no reward (SFT, DPO) gets one line saying the RL rules do not apply, and nothing
else. The config the rules read is the trainer's arguments (``GRPOConfig`` and
``RLOOConfig`` share this trainer's field names: ``beta``, ``num_generations``,
``learning_rate``, ``epsilon``, ``temperature``...).
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

from .core import NO_REWARDS, Doctor, Finding, has_rewards
from .live import HEAD, TAIL

_ALGOS = {"GRPOConfig": "grpo", "RLOOConfig": "rloo", "PPOConfig": "ppo"}


def _config_of(args) -> dict:
    """The trainer's arguments as the rules' config dict (JSON-safe values only)."""
    raw = args.to_dict() if hasattr(args, "to_dict") else dict(vars(args))
    config = {k: v for k, v in raw.items() if isinstance(v, (int, float, str, bool, type(None), list))}
    config["algo"] = _ALGOS.get(type(args).__name__, config.get("algo", "unknown"))
    return config


class DoctorCallback(TrainerCallback):
    """The run doctor as a TRL / transformers callback; ``stop=True`` stops on an error finding.

    Attributes: ``rows`` (the metric rows seen, one per log), ``findings`` (reported so far).
    """

    def __init__(self, stop: bool = False, verbose: bool = True):
        self.stop, self.verbose = stop, verbose
        self.rows: list[dict] = []
        self.findings: list[Finding] = []
        self.doctor: Doctor | None = None
        self._said_no_rewards = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.doctor = Doctor(_config_of(args))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the end-of-run summary is no training step
            return control
        if any(k.startswith("eval_") for k in logs) and not any(k in logs for k in ("loss", "reward")):
            return control  # an evaluation log: the rules read training rows
        if self.doctor is None:
            self.doctor = Doctor(_config_of(args))
        row = {"step": int(state.global_step)}
        row.update({k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.rows.append(row)
        window = self.rows if len(self.rows) <= HEAD + TAIL else self.rows[:HEAD] + self.rows[-TAIL:]
        if not has_rewards(self.rows):
            if not self._said_no_rewards and len(self.rows) >= 3 and state.is_world_process_zero:
                self._said_no_rewards = True
                if self.verbose:
                    print(f"[doctor] {NO_REWARDS}")
            return control
        for finding in self.doctor.check(window):
            finding = Finding(finding.rule, finding.severity, int(state.global_step), finding.message,
                              finding.signals, finding.evidence)
            self.findings.append(finding)
            if not state.is_world_process_zero:
                continue
            if self.verbose:
                print(str(finding))
            entry = finding.as_row()
            state.log_history.append(entry)
            if args.output_dir:
                folder = Path(args.output_dir)
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / "doctor.jsonl", "a", encoding="utf-8") as out:
                    out.write(json.dumps(entry, default=str) + "\n")
            if self.stop and finding.severity == "error":
                control.should_training_stop = True
        return control
