"""Training dashboard (lessons 04, 06, 08, 11): small line plots of the logged metrics.

A training run logs one dict per step (a row of `history.jsonl`), with TRL's metric
names where one exists: `reward`, `reward_std`, `frac_reward_zero_std`, `kl`,
`entropy`, `clip_ratio/*`, `completions/mean_length`, `loss`, `learning_rate`, ...; with
evaluation during training (`course_lib.run.in_loop_eval`) the held-out `eval/reward` shares the
reward panel and `eval/greedy_accuracy` gets its own.
`plot_training_history` draws one panel per metric (or per group of metrics) against
the step; rows may miss keys and values may be NaN or None, those points are skipped.
`LiveDashboard` collects rows during training and, inside a notebook, redraws every
`every` rows in an ipywidgets `Output`; elsewhere it only collects.
Rows of type "doctor" (the run doctor's findings, in `history.jsonl`, or handed live with
`trainer.doctor.on_finding = dashboard.update`) are drawn as dashed lines, coloured by
severity, on the panels of the metrics their rule reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..run.history import load_history
from ..toy.plots import moving_average
from ..common.figures import new_figure

__all__ = ["DEFAULT_PANELS", "LiveDashboard", "load_history", "metric_series", "plot_training_history"]

#: Panels drawn first when present, in this order; a tuple shares one panel.
DEFAULT_PANELS: tuple[str | tuple[str, ...], ...] = (
    ("reward", "eval/reward"),  # training vs held-out reward: generalisation at a glance
    ("eval/greedy_accuracy", "eval/accuracy"),
    ("reward_std", "reward_std_in_groups"),
    "frac_reward_zero_std",
    "kl",
    "entropy",
    ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"),
    "completions/mean_length",
    "completions/clipped_ratio",
    "loss",
    "grad_norm",
    "learning_rate",
    "objective/rlhf_reward",
    "objective/scores",
    "objective/kl",
    "policy/entropy_avg",
    "val/ratio",
    "loss/value_avg",
    "entropy_coef",
)
#: Legend names of metrics that share a panel: the legend says what a line means, the
#: panel title keeps the logged name (what a learner finds in the logs).
LEGEND_NAMES = {
    "reward": "training reward",
    "eval/reward": "held-out reward",
    "eval/greedy_accuracy": "held-out greedy accuracy",
    "eval/accuracy": "held-out accuracy",
    "clip_ratio/low_mean": "clipped at 1 - ε (A < 0)",
    "clip_ratio/high_mean": "clipped at 1 + ε_high (A > 0)",
    "clip_ratio/region_mean": "clipped, either side",
}
_STEP_KEYS = ("step", "global_step")
_NOT_METRICS = {"step", "global_step", "epoch", "episode", "tokens_seen", "time", "timestamp", "elapsed",
                "wall_time"}


def _as_float(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def metric_series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """`(steps, values)` of the rows that hold a finite `key`.

    The step is the row's `step` (or `global_step`), else its position (1-based).
    """
    steps, values = [], []
    for position, row in enumerate(history, start=1):
        value = _as_float(row.get(key))
        if not math.isfinite(value):
            continue
        step = next((_as_float(row[k]) for k in _STEP_KEYS if k in row), math.nan)
        steps.append(step if math.isfinite(step) else position)
        values.append(value)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def _numeric_keys(history: Iterable[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in history:
        for key, value in row.items():
            if key not in _NOT_METRICS and math.isfinite(_as_float(value)):
                seen.setdefault(key, None)
    return list(seen)


def _default_panels(history: Sequence[Mapping[str, Any]], max_panels: int) -> list[tuple[str, ...]]:
    present = _numeric_keys(history)
    panels: list[tuple[str, ...]] = []
    used: set[str] = set()
    for entry in DEFAULT_PANELS:
        group = tuple(k for k in ((entry,) if isinstance(entry, str) else entry) if k in present)
        if group:
            panels.append(group)
            used.update(group)
    rest = sorted(k for k in present if k not in used)
    # per-function reward means before everything else (stds, mins, maxes...)
    rest.sort(key=lambda k: not (k.startswith("rewards/") and k.endswith("/mean")))
    panels += [(key,) for key in rest]
    return panels[:max_panels]


def _auto_window(history: Sequence[Mapping[str, Any]], panels: Sequence[tuple[str, ...]]) -> int:
    """A moving-average window of about a tenth of the longest curve; 1 (none) under 20 points."""
    longest = max((metric_series(history, m)[1].size for group in panels for m in group), default=0)
    return max(1, round(longest / 10)) if longest >= 20 else 1


def plot_training_history(history: Sequence[Mapping[str, Any]] | str | Path,
                          keys: Sequence[str | Sequence[str]] | None = None, smooth: int | str = "auto",
                          columns: int = 3, max_panels: int = 12, title: str | None = None) -> Figure:
    """A grid of small line plots, one per metric (or group of metrics), vs the step.

    Args:
        history: rows of logged metrics (dicts), or the path of a `history.jsonl`.
        keys: the panels: a metric name, or a list of names sharing one panel. None =
            the metrics present, `DEFAULT_PANELS` first (clip ratios share a panel),
            then `rewards/<name>/mean`, then the others alphabetically, at most
            `max_panels`.
        smooth: trailing moving-average window; the raw points stay visible, faint.
            "auto" (the default): about a tenth of the longest curve, none under 20 points.
        columns: panels per row.
        title: figure title.

    Returns:
        A Figure with one axes per panel (empty grid cells are removed). In each axes
        the first line of a metric holds its raw points: x = step, y = value, rows
        without a finite value skipped. With no metric at all, one axes says so.
    """
    if isinstance(history, (str, Path)):
        history = load_history(history)
    panels = [(k,) if isinstance(k, str) else tuple(k) for k in keys] if keys is not None \
        else _default_panels(history, max_panels)
    if not panels:
        fig = new_figure(5, 2.5)
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no metrics logged yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    if smooth == "auto":
        smooth = _auto_window(history, panels)
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth={smooth!r}: use a window of 1 or more steps, or 'auto'.")
    columns = max(1, min(columns, len(panels)))
    rows = math.ceil(len(panels) / columns)
    fig = new_figure(4.0 * columns, 2.5 * rows)
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.remove()
            continue
        group = panels[index]
        for metric in group:
            steps, values = metric_series(history, metric)
            # one prefix (clip_ratio/...): the last part tells them apart; else the full name
            same_prefix = len({m.split("/")[0] for m in group}) == 1
            short = (LEGEND_NAMES.get(metric) or (metric.split("/")[-1] if same_prefix else metric)) \
                if len(group) > 1 else None
            marker = "o" if 0 < values.size <= 30 else None
            (line,) = ax.plot(steps, values, marker=marker, markersize=3, linewidth=1,
                              alpha=0.35 if smooth > 1 else 1.0, label=short)
            if smooth > 1 and values.size:
                ax.plot(steps, moving_average(values, smooth), color=line.get_color(), linewidth=1.8)
        _mark_findings(ax, history, group)
        if not any(metric_series(history, metric)[1].size for metric in group):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_title(" / ".join(group) if len(group) == 1 else _common_prefix(group), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers: no 2.5
        # no "1e-12+9e-1" offsets on flat curves; powers of ten for learning rates
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)
        if len(group) > 1:
            ax.legend(fontsize=7)
        if index >= len(panels) - columns:
            ax.set_xlabel("step", fontsize=8)
            ax.xaxis.set_tick_params(labelbottom=True)
    if title or smooth > 1:
        suffix = f" (moving average of {smooth}, raw faint)" if smooth > 1 else ""
        fig.suptitle((title or "Training metrics") + suffix, fontsize=11)
    return fig


_SEVERITY_COLORS = {"info": "tab:blue", "warning": "tab:orange", "error": "tab:red"}


def _reads(signal: str, metric: str) -> bool:
    if "<name>" in signal:
        prefix, suffix = signal.split("<name>")
        return metric.startswith(prefix) and metric.endswith(suffix)
    return signal == metric


def _mark_findings(ax, history: Sequence[Mapping[str, Any]], group: Sequence[str]) -> None:
    """A dashed line, coloured by severity, where a run-doctor finding (a row of type "doctor")
    that reads one of the panel's metrics first fired; its rule's name beside it."""
    for row in history:
        if row.get("type") != "doctor" or not any(_reads(s, m) for s in row.get("signals", ()) for m in group):
            continue
        color = _SEVERITY_COLORS.get(row.get("severity"), "0.4")
        ax.axvline(row["step"], color=color, linestyle="--", linewidth=1)
        ax.text(row["step"], 0.98, " " + str(row.get("rule", "")), transform=ax.get_xaxis_transform(),
                fontsize=6, color=color, va="top", rotation=90)


def _common_prefix(keys: Sequence[str]) -> str:
    prefixes = {key.split("/")[0] for key in keys}
    return prefixes.pop() if len(prefixes) == 1 else ", ".join(keys)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class LiveDashboard:
    """Collect metric rows during training and redraw the dashboard every `every` rows.

    Inside a Jupyter kernel (or with `display=True`) the plots appear in an ipywidgets
    `Output` shown at construction; otherwise rows are only collected and `figure()`
    draws them on demand. Pass `update` as the trainer's per-step callback.

    Args:
        keys, smooth, columns, max_panels: as in `plot_training_history`.
        every: redraw period in rows.
        display: force (True) or disable (False) the widget; None = detect a notebook.
    """

    def __init__(self, keys: Sequence[str | Sequence[str]] | None = None, every: int = 10, smooth: int | str = "auto",
                 columns: int = 3, max_panels: int = 12, display: bool | None = None) -> None:
        if every < 1:
            raise ValueError(f"every={every} must be >= 1 (redraw period in rows). Fix: e.g. every=10.")
        self.history: list[dict[str, Any]] = []
        self.every = every
        self.plot_options = dict(keys=keys, smooth=smooth, columns=columns, max_panels=max_panels)
        self.output = None
        if display if display is not None else _in_notebook():
            import ipywidgets as widgets
            from IPython.display import display as show

            self.output = widgets.Output()
            show(self.output)

    def update(self, row: Mapping[str, Any]) -> None:
        """Append one row of metrics; redraw when the widget is live and `every` rows came."""
        self.history.append(dict(row))
        if self.output is not None and len(self.history) % self.every == 0:
            self.redraw()

    __call__ = update

    def extend(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append several rows, then redraw once."""
        self.history.extend(dict(row) for row in rows)
        self.redraw()

    def figure(self) -> Figure:
        """The dashboard of every row collected so far."""
        return plot_training_history(self.history, **self.plot_options)

    def redraw(self) -> None:
        """Redraw now in the widget (no-op outside a notebook)."""
        if self.output is None:
            return
        from IPython.display import display as show

        with self.output:
            self.output.clear_output(wait=True)
            show(self.figure())
