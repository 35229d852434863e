"""Training metrics: one JSON row per optimizer step, sample tables, and plots.

Rows are appended to ``<output_dir>/history.jsonl`` as they are produced, so a run that
stops early keeps everything it logged. Optional mirrors: Weights & Biases and
TensorBoard (``report_to``), imported only when asked for.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


class MetricsLogger:
    def __init__(self, output_dir: str | Path, report_to: str = "none", config: dict | None = None,
                 previous_rows: list[dict] | None = None):
        """``previous_rows``: the history of a resumed run, written back before new rows."""
        self.path = Path(output_dir) / "history.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = list(previous_rows or [])
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        self._wandb = self._tensorboard = None
        if report_to == "wandb":
            import wandb

            self._wandb = wandb.init(config=config or {}, dir=str(self.path.parent), resume="allow")
        elif report_to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(log_dir=str(self.path.parent / "tensorboard"))

    def log(self, row: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.rows.append(clean)
        with self.path.open("a") as handle:
            handle.write(json.dumps(clean) + "\n")
        step = row.get("step", len(self.rows))
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)
        if self._tensorboard is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and value is not None:
                    self._tensorboard.add_scalar(key, value, step)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()


def load_history(path: str | Path) -> list[dict]:
    """Rows of a ``history.jsonl`` file (or of the one inside a run folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def format_samples(prompts: list[str], completions: list[str], rewards: list[float], advantages: list[float],
                   limit: int = 4, width: int = 48) -> str:
    """A small text table of samples: what the model is actually doing."""

    def cut(text: str) -> str:
        text = text.replace("\n", "\\n")
        return text if len(text) <= width else text[: width - 1] + "~"

    lines = [f"{'prompt':<{width}} | {'completion':<{width}} | reward | advantage"]
    for p, c, r, a in list(zip(prompts, completions, rewards, advantages))[:limit]:
        lines.append(f"{cut(p):<{width}} | {cut(c):<{width}} | {r:6.2f} | {a:+.3f}")
    return "\n".join(lines)


DEFAULT_PLOT_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/region_mean",
                     "completions/mean_length", "loss", "grad_norm", "learning_rate",
                     "objective/rlhf_reward", "objective/scores", "objective/kl", "val/ratio", "loss/value_avg")


def plot_history(history, keys: tuple[str, ...] | list[str] | None = None, smooth: int = 1):
    """A grid of line plots of the logged metrics (a list of rows or a path); returns the Figure."""
    import matplotlib.pyplot as plt

    rows = load_history(history) if isinstance(history, (str, Path)) else list(history)
    keys = [k for k in (keys or DEFAULT_PLOT_KEYS) if any(r.get(k) is not None for r in rows)]
    keys += sorted({k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")} - set(keys))
    if not keys:
        raise ValueError("no plottable metrics in this history")
    columns = min(4, len(keys))
    figure_rows = math.ceil(len(keys) / columns)
    figure, axes = plt.subplots(figure_rows, columns, figsize=(3.6 * columns, 2.6 * figure_rows), squeeze=False)
    for axis, key in zip(axes.flat, keys):
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        steps, values = zip(*points)
        if smooth > 1 and len(values) >= smooth:
            kernel = [sum(values[max(0, i - smooth + 1): i + 1]) / len(values[max(0, i - smooth + 1): i + 1])
                      for i in range(len(values))]
            axis.plot(steps, values, color="#bbbbbb", linewidth=0.8)
            axis.plot(steps, kernel, color="#1f77b4")
        else:
            axis.plot(steps, values, color="#1f77b4", marker="." if len(values) < 30 else None)
        axis.set_title(key, fontsize=9)
        axis.set_xlabel("optimizer step", fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(keys):]:
        axis.axis("off")
    figure.tight_layout()
    return figure
