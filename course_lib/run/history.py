"""Training metrics: one JSON row per optimizer step, and sample tables (plots: ``course_lib.widgets``).

Rows are appended to ``<output_dir>/history.jsonl`` as they are produced, so a run that
stops early keeps everything it logged. Optional mirrors: Weights & Biases and
TensorBoard (``report_to``), imported only when asked for.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

from ..common.forks import FORKED_COPY_EXIT, leave_if_forked  # noqa: F401 (FORKED_COPY_EXIT: public here)


#: Metrics that measure the machine's speed, not the run: they differ between identical runs.
WALL_CLOCK_KEYS = ("tokens/s", "eps", "timing/step_s", "timing/generation_s")


class StepClock:
    """``timing/step_s`` (wall seconds between logged rows) and ``timing/generation_s`` (seconds
    spent in the rollout engine in that time): the run doctor's generation-share signal."""

    def __init__(self):
        self.restart()

    def restart(self) -> None:
        self.last, self.generation_s = time.perf_counter(), 0.0

    @contextlib.contextmanager
    def generating(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.generation_s += time.perf_counter() - started

    def lap(self) -> dict[str, float]:
        now = time.perf_counter()
        row = {"timing/step_s": now - self.last, "timing/generation_s": self.generation_s}
        self.last, self.generation_s = now, 0.0
        return row


class MetricsLogger:
    def __init__(self, output_dir: str | Path, report_to: str = "none", config: dict | None = None,
                 previous_rows: list[dict] | None = None, write: bool = True):
        """``previous_rows``: the history of a resumed run, written back before new rows.
        ``write=False`` keeps the rows in memory only (the non-main processes of a run)."""
        self.path = Path(output_dir) / "history.jsonl"
        previous = list(previous_rows or [])
        # Metric rows (one per optimizer step) and events (rows with a "type", e.g. the run
        # doctor's findings) share the file; `rows` holds the metric rows only.
        self.rows: list[dict] = [r for r in previous if "type" not in r]
        self.events: list[dict] = [r for r in previous if "type" in r]
        self.entries: list[dict] = previous  # both, in the file's order (what a checkpoint saves)
        self.write = write
        self.pid = os.getpid()  # the run's process: a forked copy must not write (leave_if_forked)
        self._wandb = self._tensorboard = None
        if not write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in previous))
        if report_to == "wandb":
            import wandb

            self._wandb = wandb.init(config=config or {}, dir=str(self.path.parent), resume="allow")
        elif report_to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(log_dir=str(self.path.parent / "tensorboard"))

    def log(self, row: dict) -> None:
        leave_if_forked(self.pid, "user code (a tool or a reward function)")
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.rows.append(clean)
        self.entries.append(clean)
        if not self.write:
            return
        with self.path.open("a") as handle:
            handle.write(json.dumps(clean) + "\n")
        step = row.get("step", len(self.rows))
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)
        if self._tensorboard is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and value is not None:
                    self._tensorboard.add_scalar(key, value, step)

    def log_event(self, row: dict) -> None:
        """Append a row that is not a step's metrics (it carries a ``"type"``) to the file."""
        leave_if_forked(self.pid, "user code (a tool or a reward function)")
        if "type" not in row:
            raise ValueError("an event row needs a 'type' key (e.g. 'doctor'); metric rows go through log().")
        self.events.append(row)
        self.entries.append(row)
        if self.write:
            with self.path.open("a") as handle:
                handle.write(json.dumps(row) + "\n")

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()


def load_history(path: str | Path) -> list[dict]:
    """Read a ``history.jsonl`` file (or the one inside a run folder): a JSON object a line.

    Blank lines are skipped. A run that is still writing may leave a half-written last
    line: it is ignored. A broken line elsewhere raises ``ValueError`` with its number.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "history.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    rows: list[dict] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise ValueError(f"{path}: line {number} is not JSON ({error.msg}). "
                             "Fix: one JSON object per line.") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number} holds {type(row).__name__}, not a JSON object.")
        rows.append(row)
    return rows


def format_samples(prompts: list[str], completions: list[str], rewards: list[float], advantages: list[float],
                   limit: int | None = 4, width: int = 48) -> str:
    """A small text table of samples: what the model is actually doing; ``limit=None`` shows every row."""

    def cut(text: str) -> str:
        text = text.replace("\n", "\\n")
        return text if len(text) <= width else text[: width - 1] + "~"

    lines = [f"{'prompt':<{width}} | {'completion':<{width}} | reward | advantage"]
    for p, c, r, a in list(zip(prompts, completions, rewards, advantages))[:limit]:
        lines.append(f"{cut(p):<{width}} | {cut(c):<{width}} | {r:6.2f} | {a:+.3f}")
    return "\n".join(lines)


def unique_prompt_samples(prompts: list[str], completions: list[str], rewards: list[float],
                          advantages: list[float]) -> tuple[list, list, list, list]:
    """The sample columns keeping only the first completion of each distinct prompt
    (`log_unique_prompts`)."""
    seen: set[str] = set()
    keep = [i for i, p in enumerate(prompts) if not (p in seen or seen.add(p))]
    return tuple([column[i] for i in keep] for column in (prompts, completions, rewards, advantages))


def mean_rows(rows: list[dict]) -> dict:
    """Each key's mean over the rows that have it (the micro-steps of one optimizer step)."""
    keys = {k for r in rows for k in r}
    return {k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in keys}


def prompt_text(prompt) -> str:
    """A prompt as one line of the sample table: its last message's content, or the text itself."""
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
