"""After the fact: load a run's history (ours or TRL's), diagnose it, draw the signals.

``python -m course_lib doctor RUN_DIR`` calls :func:`doctor_run`. ``RUN_DIR`` is

- a run folder of this trainer (``history.jsonl``; the config comes from its newest
  checkpoint's ``trainer_state.json`` when one exists), or
- a TRL run: its ``trainer_state.json`` or a folder (or ``checkpoint-*`` folder) holding
  one. TRL's ``log_history`` uses the same metric names; rows sharing a step (training
  and evaluation) are merged, and TRL's ``eval_<name>`` keys are read as ``eval/<name>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..run.history import load_history
from ..common.wording import fix
from .core import Finding, causal_order, format_report, has_rewards, metric_rows

__all__ = ["EmptyHistoryError", "load_run", "diagnose_run", "doctor_run", "plot_findings"]


def _trl_rows(log_history: list[dict], source: Path) -> list[dict]:
    """The step rows of TRL's ``log_history``; a malformed one is refused naming ``source`` and the field."""

    def refuse(where: str, value, expected: str):
        raise ValueError(f"{source}: {where} is {type(value).__name__} {str(value)[:60]!r}, not {expected}. Fix: "
                         "pass the trainer_state.json that TRL wrote (this one was edited or is damaged).")

    if not isinstance(log_history, list):
        refuse("log_history", log_history, "a list of entries")
    merged: dict[int, dict] = {}
    for index, entry in enumerate(log_history):
        if not isinstance(entry, dict):
            refuse(f"log_history[{index}]", entry, "an object of metrics")
        if "step" not in entry or "train_runtime" in entry:  # the run summary, not a training step
            continue
        if entry.get("type") == "doctor":  # a finding DoctorCallback wrote into the log, not metrics
            continue
        step = entry["step"]
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step != int(step) or step < 0:
            refuse(f"log_history[{index}].step", step, "a whole number >= 0")
        for key, value in entry.items():
            if isinstance(value, str):  # a number written as text would be read as a missing (non-finite) value
                refuse(f"log_history[{index}].{key}", value, "a number")
        row = merged.setdefault(int(entry["step"]), {"step": int(entry["step"])})
        for key, value in entry.items():
            if key.startswith("eval_") and key not in ("eval_runtime", "eval_samples_per_second",
                                                        "eval_steps_per_second"):
                key = "eval/" + key[5:]
            row[key] = value
    return [r for _, r in sorted(merged.items())]


def _trl_state_file(path: Path) -> Path | None:
    if path.is_file() and path.name.endswith(".json"):
        return path
    if (path / "trainer_state.json").is_file():
        return path / "trainer_state.json"
    checkpoints = sorted(path.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[-1])
                         if p.parent.name.split("-")[-1].isdigit() else -1)
    return checkpoints[-1] if checkpoints else None


def load_run(path: str | Path) -> tuple[list[dict], dict, str]:
    """``(rows, config, kind)`` of a run folder or a TRL ``trainer_state.json``; kind is ``"course"``
    or ``"trl"``. Raises ``FileNotFoundError`` naming what was looked for."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist. Fix: pass a run folder (with history.jsonl) or a "
                                "TRL trainer_state.json.")
    if path.is_file() and path.name.endswith(".jsonl"):  # history.jsonl itself: read its folder
        path = path.parent
        if not (path / "history.jsonl").is_file():
            raise FileNotFoundError(f"{path}: the doctor reads a run's history.jsonl (or a TRL trainer_state.json); "
                                    "Fix: pass the run folder or its history.jsonl.")
    if path.is_dir() and (path / "history.jsonl").is_file():
        from ..run.checkpoint import latest_checkpoint, load_trainer_state

        rows = load_history(path)
        for number, row in enumerate(rows, start=1):
            step = row.get("step")
            if row.get("type", "metrics") == "metrics" and step is not None and (
                    isinstance(step, bool) or not isinstance(step, int) or step < 0):
                raise ValueError(f"{path / 'history.jsonl'}: row {number} has step={str(step)[:40]!r}, not a whole "
                                 "number >= 0. Fix: restore the file the run wrote (it was edited or is damaged).")
        last = latest_checkpoint(path)
        config = load_trainer_state(last).get("config", {}) if last is not None else {}
        # The live doctor writes the run's config into the history once (a row of type "config").
        config = config or next((r["config"] for r in rows if r.get("type") == "config"), {})
        return rows, config, "course"
    state_file = _trl_state_file(path)
    if state_file is not None:
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"{state_file}: not a JSON file ({error}). Fix: pass the trainer_state.json that TRL "
                             "wrote.") from None
        if not isinstance(state, dict):
            raise ValueError(f"{state_file}: holds a {type(state).__name__}, not a JSON object with a log_history. "
                             "Fix: pass the trainer_state.json that TRL wrote.")
        if "log_history" in state:
            return _trl_rows(state["log_history"], state_file), {}, "trl"
        if "config" in state and (state_file.parent.parent / "history.jsonl").is_file():
            return load_history(state_file.parent.parent), state["config"], "course"
    raise FileNotFoundError(f"{path}: no history.jsonl and no TRL trainer_state.json with a log_history. "
                            "Fix: pass the run's output_dir.")


def _signal_keys(signals: tuple[str, ...], rows: list[dict]) -> list[str]:
    keys = []
    for signal in signals:
        if "<name>" in signal:
            prefix, suffix = signal.split("<name>")
            keys += sorted({k for r in rows for k in r if k.startswith(prefix) and k.endswith(suffix)})
        elif signal != "step" and any(signal in r for r in rows):  # every row has a step: no curve
            keys.append(signal)
    return keys


def plot_findings(rows: list[dict], findings: list[Finding], path: str | Path):
    """One panel per finding: the signals its rule reads against the step, a line where it fired.

    Returns the saved path, or None when there is no finding to draw.
    """
    rows = metric_rows(rows)
    if not findings:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(findings), 1, figsize=(8, 2.6 * len(findings)), squeeze=False)
    for ax, finding in zip(axes[:, 0], findings):
        for key in _signal_keys(finding.signals, rows):
            points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), marker="." if len(points) < 30 else None, label=key)
        ax.axvline(finding.step, color="red", linestyle="--", linewidth=1, label="fired")
        ax.set_title(f"{finding.severity}: {finding.rule}", fontsize=10, loc="left")
        ax.set_xlabel("optimizer step")
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def first_firing(rows: list[dict], config: dict, *, checks: int = 500) -> list[Finding]:
    """The findings of the whole run, each dated at the first logged step where the live doctor
    reports it: at that step, on the rows it reads (all of them up to ``HEAD + TAIL``, then the
    first ``HEAD`` and the last ``TAIL``: ``course_lib.doctor.live``).

    Up to ``HEAD + TAIL`` rows every step is checked, exactly as live. A longer history is
    checked every ``ceil(rows / checks)`` steps, and a rule found firing there is dated by
    checking the steps since the previous check one by one. The cost is then linear in the
    length (at most ``checks`` windows of at most ``HEAD + TAIL`` rows, and the steps that date
    a finding), where checking every step of a 10,000-row history would take minutes; the
    price is that a condition holding only between two checks, for fewer steps than the
    stride, is not reported. Rules already reported are not run again.
    """
    import math

    from .core import RULES, diagnose
    from .live import HEAD, TAIL

    rows = metric_rows(rows)
    n = len(rows)
    stride = 1 if n <= HEAD + TAIL else math.ceil(n / checks)

    def window(end: int) -> list[dict]:
        return rows[:end] if end <= HEAD + TAIL else rows[:HEAD] + rows[end - TAIL:end]

    found: list[Finding] = []
    reported: set[str] = set()
    ends = list(range(stride, n + 1, stride))
    if n and (not ends or ends[-1] != n):
        ends.append(n)
    previous = 0
    for end in ends:
        remaining = [name for name in RULES if name not in reported]
        if not remaining:
            break
        firing = {f.rule for f in diagnose(window(end), config, remaining)}
        for step in range(previous + 1, end + 1) if firing else ():  # date each at its first step
            undated = [name for name in remaining if name in firing and name not in reported]
            if not undated:
                break
            for finding in diagnose(window(step), config, undated):
                reported.add(finding.rule)
                found.append(finding)
        previous = end
    return found


def diagnose_run(rows: list[dict], config: dict) -> list[Finding]:
    """The findings of a whole run in the report's causal order (each dated at its first firing);
    a passing state (:attr:`~course_lib.doctor.core.Rule.passing`) only if it holds at the end."""
    from .core import RULES, diagnose

    found = first_firing(rows, config)
    passing = [f.rule for f in found if RULES[f.rule].passing]
    if passing:
        still = {f.rule for f in diagnose(rows, config, passing)}
        found = [f for f in found if f.rule not in passing or f.rule in still]
    return causal_order(found)


def doctor_run(path: str | Path, figure: str | Path | None = None) -> tuple[list[Finding], str, Path | None]:
    """Diagnose a run; return ``(findings, text report, figure path or None)``.

    A finding is reported when its rule fired at any logged step (dated at the first);
    the figure goes to ``figure`` or ``<run>/doctor.png`` (beside a TRL state file).
    """
    rows, config, kind = load_run(path)
    steps = metric_rows(rows)
    if not steps:  # an empty or unreadable run must not read as a clean one
        raise EmptyHistoryError(f"{path}: the history holds no logged step, so there is nothing to diagnose (a run "
                                "that stopped before its first logging step, or the wrong file). Fix: pass the "
                                "folder of a run that logged at least one step.")
    findings = diagnose_run(rows, config)
    text = format_report(findings, len(steps), int(steps[-1]["step"]), rewards=has_rewards(steps))
    if kind == "trl" and has_rewards(steps):
        text += "\n(TRL log: rules that read the run's config name fields without their values)"
    base = Path(path)
    target = Path(figure) if figure else (base if base.is_dir() else base.parent) / "doctor.png"
    if figure is None and target.is_symlink():  # as every write in a run folder: never through a link
        raise ValueError(f"{target} is a symbolic link (to {os.readlink(target)}); saving the figure through it "
                         "would overwrite a file outside the run. Fix: delete the link, or pass "
                         f"{fix('--figure PATH', 'figure=PATH')} to save it elsewhere.")
    try:
        saved = plot_findings(rows, findings, target)
    except OSError as error:  # the report is done: a figure that cannot be saved must not lose it
        saved = None
        text += (f"\nfigure: not saved ({type(error).__name__}: {error}). Fix: pass "
                 f"{fix('--figure PATH', 'figure=PATH')} in a folder that exists and can be written.")
    if saved is not None:
        text += f"\nfigure: {saved}"
    return findings, text, saved


class EmptyHistoryError(ValueError):
    """A history with no logged step: the CLI exits non-zero with its message."""
