"""What a run prints while it trains: the bar's signals, a word when clipping rules, where things went.

- :func:`bar_postfix`: the numbers a user watches, in order of importance, cut to the
  terminal's width: the reward, a correctness reward when one is logged, the
  fraction of prompts that teach nothing (all completions scored alike), entropy, KL to
  the reference, the clipped-token and truncated-completion ratios, and the step time.
  The loss is left out: on-policy it is ~0 by construction (the ratio is 1), which reads as
  broken; it stays in ``history.jsonl``.
- :class:`ClipWatch`: gradient-norm clipping that fires at most steps means
  ``max_grad_norm``, not ``learning_rate``, sets the step size; it says so once.
- :func:`eval_line` and :func:`closing_line`: in-loop evaluation results when computed, and
  one line at the end naming every file and folder the run wrote.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path


#: (label, history key) in the order they are dropped last to first when the bar is narrow.
_SIGNALS = [
    ("reward", "reward"),
    ("correct", None),  # the first logged rewards/<...correct...>/mean
    ("zero_std", "frac_reward_zero_std"),
    ("entropy", "entropy"),
    ("kl", "kl"),
    ("clip", "clip_ratio/region_mean"),
    ("trunc", "completions/clipped_ratio"),
    ("s/step", "timing/step_s"),
]
#: Room the bar itself takes: description, counter, percentage, bar, times.
_BAR_ROOM = 48


def _format(value: float) -> str:
    if abs(value) >= 100 or value == int(value) and abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def bar_postfix(row: dict, width: int | None = None) -> str:
    """``"reward=0.41 correct=0.38 zero_std=0.25 entropy=0.812 ..."`` within ``width`` columns."""
    if width is None:
        # A log file has no width to fit: every signal is written (a terminal's width cuts the tail).
        width = shutil.get_terminal_size((100, 24)).columns if sys.stderr.isatty() else 10_000
    room = max(width - _BAR_ROOM, 16)
    parts = []
    for label, key in _SIGNALS:
        if key is None:
            key = next((k for k in row if k.startswith("rewards/") and "correct" in k and k.endswith("/mean")), None)
        value = row.get(key) if key else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            part = f"{label}={_format(float(value))}"
            if len(" ".join([*parts, part])) > room:
                break
            parts.append(part)
    return " ".join(parts)


class ClipWatch:
    """Counts the steps whose gradient norm exceeded ``max_grad_norm`` (the clip fired).

    After ``after`` steps, if it fired at more than half of them, :meth:`update` returns a
    one-time notice; it is silent otherwise (and when clipping is off, ``max_grad_norm <= 0``).
    """

    def __init__(self, max_grad_norm: float, after: int = 10) -> None:
        self.max_grad_norm, self.after = float(max_grad_norm), after
        self.steps = self.clipped = 0
        self.largest = 0.0
        self.told = False

    def update(self, grad_norm: float) -> str | None:
        if self.max_grad_norm <= 0 or not math.isfinite(grad_norm):
            return None
        self.steps += 1
        self.largest = max(self.largest, grad_norm)
        self.clipped += grad_norm > self.max_grad_norm
        if self.told or self.steps < self.after or self.clipped * 2 <= self.steps:
            return None
        self.told = True
        return (f"note: gradient clipping fired at {self.clipped} of the first {self.steps} steps (grad_norm up to "
                f"{self.largest:.3g} > max_grad_norm={self.max_grad_norm:g}): every update has the length "
                "max_grad_norm sets, whatever learning_rate says. If that is not intended, lower learning_rate "
                "(the gradient norm of this run is larger than GRPO's at the same rate, e.g. after switching to "
                "RLOO), or raise max_grad_norm.")


def eval_line(step: int, row: dict) -> str | None:
    """``"eval at step 20: eval/reward=0.41 eval/greedy_accuracy=0.375"`` when the row holds eval results."""
    values = {k: v for k, v in row.items() if k.startswith("eval/") and isinstance(v, (int, float))}
    if not values:
        return None
    return f"eval at step {step}: " + " ".join(f"{k}={_format(float(v))}" for k, v in sorted(values.items()))


def closing_line(output_dir: Path, step: int, interrupted: bool, report_to: str = "none") -> str:
    """One line naming what the run left in ``output_dir``."""
    from .checkpoint import list_checkpoints

    output_dir = Path(output_dir)
    parts = [f"history.jsonl ({step} step{'s' if step != 1 else ''})"]
    checkpoints = list_checkpoints(output_dir) if output_dir.is_dir() else []
    if checkpoints:
        parts.append(f"checkpoints {', '.join(c.name for c in checkpoints)}"
                     + (" (resume: same run with resume_from='latest' / --resume-from latest)" if interrupted else ""))
    if (output_dir / "final").is_dir() and not interrupted:
        parts.append("final/ (the trained model: load_policy or --model)")
    for logger in ("tensorboard", "wandb"):
        if report_to == logger and (output_dir / logger).exists():
            parts.append(f"{logger}/")
    state = "stopped early" if interrupted else "done"
    return f"{state}: {output_dir} holds " + "; ".join(parts)


class StepReport:
    """The training loop's console output: a tqdm bar with :func:`bar_postfix`, the notes of
    :class:`ClipWatch` and :func:`eval_line` under it, :func:`closing_line` at the end.
    ``shown=False`` (progress off, or not the main process) prints nothing."""

    def __init__(self, total: int, initial: int, description: str, max_grad_norm: float, shown: bool) -> None:
        from tqdm.auto import tqdm

        self.shown, self.clip_watch = shown, ClipWatch(max_grad_norm)
        self.bar = tqdm(total=total, initial=initial, desc=description, disable=not shown)

    def step(self, step: int, row: dict) -> None:
        from tqdm.auto import tqdm

        self.bar.update(1)
        if self.shown:  # a hidden bar needs no postfix
            self.bar.set_postfix_str(bar_postfix(row))
        for note in (self.clip_watch.update(row.get("grad_norm", math.nan)), eval_line(step, row)):
            if note and self.shown:
                tqdm.write(note)

    def close_bar(self) -> None:
        self.bar.close()

    def closing(self, output_dir: Path, step: int, interrupted: bool, report_to: str = "none") -> None:
        import sys

        from tqdm.auto import tqdm

        if self.shown:
            tqdm.write(closing_line(output_dir, step, interrupted, report_to), file=sys.stderr)
