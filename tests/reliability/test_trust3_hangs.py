"""Nothing waits forever, and one huge tool result costs what the kept part costs.

- A generation worker that is stopped (SIGSTOP) sends no batch: after
  ``async_batch_timeout_s`` the trainer kills it, saves its completed steps and stops with an
  error naming the field.
- An environment whose ``reset`` never returns stops the run after ``tool_timeout`` seconds
  with an error naming the row, as a tool call would fail.
- A tool result far beyond the token budget is cut by characters before it is tokenized: the
  tokenizer never sees more than the budget's worth of characters, and the mark still counts
  (about) the tokens cut.

Every test runs under a SIGALRM deadline: a regression fails, it never hangs the suite.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from course_lib.run import checkpoint as ckpt
from course_lib.run.async_rollouts import GenerationWorkerError

from tiny_runs import deadline, tiny_trainer


# ------------------------------------------------------------------ 5. a stopped worker
def test_a_stopped_worker_is_given_up_after_the_timeout(tmp_path):
    run = tiny_trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=4, save_steps=0,
                       async_batch_timeout_s=5.0)
    stopped = []

    def stop_worker(row):
        if row["step"] == 1:
            stopped.append(run.pipeline.process)
            os.kill(run.pipeline.process.pid, signal.SIGSTOP)

    run.on_step = stop_worker
    try:
        with deadline(240), pytest.raises(GenerationWorkerError) as failed:
            run.train()
    finally:
        for process in stopped:  # never leave a stopped process behind, whatever happened
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
    message = str(failed.value)
    assert "async_batch_timeout_s=5.0" in message and "Fix:" in message
    assert not stopped[0].is_alive()
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == f"checkpoint-{run.step}" and str(latest) in message


def test_the_batch_timeout_is_checked():
    from course_lib.algos import make_config

    with pytest.raises(ValueError, match=r"async_batch_timeout_s=0 must be a positive number of seconds\. Fix:"):
        make_config("grpo", model_name_or_path="tiny", async_batch_timeout_s=0)


# ------------------------------------------------------------------ 6. a reset that never returns
class StuckReset:
    def reset(self, **_):
        time.sleep(30)  # "forever" for the test; the daemon thread ends by itself later

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: how much to add
        """
        return step

    def get_reward(self) -> float:
        return 0.0


def test_a_reset_that_never_returns_stops_after_the_tool_timeout(tmp_path):
    from datasets import Dataset

    from course_lib.algos import make_config
    from course_lib.models import load_policy
    from course_lib.rollout.tools import EnvironmentResetError
    from course_lib.trainer import Trainer

    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512  # RoPE: room for the tool list in the prompt
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=32, save_steps=0,
                         tool_timeout=0.5)
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Go"}]] * 8})
    trainer = Trainer(config, None, rows, model, tokenizer, progress=False, environment_factory=StuckReset)
    started = time.monotonic()
    with deadline(20), pytest.raises(EnvironmentResetError, match=r"StuckReset\.reset did not return within "
                                                                    r"tool_timeout=0\.5 s on dataset row \d+\. Fix:"):
        trainer._generate()
    assert time.monotonic() - started < 10


# ------------------------------------------------------------------ 7. a huge tool result
class _SpyTokenizer:
    """The tiny tokenizer, recording the longest text it was asked to tokenize."""

    def __init__(self, tokenizer):
        self._tokenizer, self.longest = tokenizer, 0

    def __call__(self, text, **kwargs):
        texts = [text] if isinstance(text, str) else list(text)
        self.longest = max([self.longest, *map(len, texts)])
        return self._tokenizer(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_a_huge_tool_result_is_cut_before_it_is_tokenized():
    from course_lib.models import load_policy
    from course_lib.rollout import agents
    from course_lib.rollout.agents import _ResultFitter
    from course_lib.rollout.tools import ToolResult

    _, tokenizer = load_policy("tiny")
    content = "the value is 12345, and more text follows; " * 5000  # 215,000 characters
    true_tokens = len(tokenizer(content, add_special_tokens=False)["input_ids"])
    spy = _SpyTokenizer(tokenizer)
    room = 64
    with deadline(60):
        fitted = _ResultFitter(spy, None, None).fit([ToolResult("search", content)], room)
    assert fitted is not None
    suffix, (kept,) = fitted
    assert len(suffix) <= room
    assert spy.longest <= (room + 1) * getattr(agents, "CHARS_PER_TOKEN", 32) + 2000, f"tokenized {spy.longest} characters"
    mark = kept[kept.rindex("...["):]
    dropped = int(mark.split("[")[1].split()[0])
    kept_tokens = len(tokenizer(kept[:kept.rindex(" ...[")], add_special_tokens=False)["input_ids"])
    assert dropped == pytest.approx(true_tokens - kept_tokens, rel=0.05)
    assert content.startswith(kept[:kept.rindex(" ...[")][:50])
