"""Progress where no bar can be drawn: periodic plain lines with counts and times."""

from __future__ import annotations

import io
import re
import time

from course_lib import progress
from course_lib.progress import format_duration, heartbeat, progress_bar


def test_durations_read_as_clock_times():
    assert format_duration(0) == "0:00"
    assert format_duration(75) == "1:15"
    assert format_duration(3725) == "1:02:05"


def test_without_a_terminal_the_bar_prints_periodic_lines_and_a_last_one(monkeypatch):
    monkeypatch.setattr(progress, "draws_bars", lambda: False)
    out = io.StringIO()
    with progress_bar(total=4, desc="eval before", every_s=0.0, file=out) as bar:
        for _ in range(4):
            time.sleep(0.01)
            bar.update(1)
    lines = out.getvalue().splitlines()
    # one line per update before the end (every_s=0), then the closing line; never a carriage return
    assert [re.match(r"eval before: (\d)/4", line).group(1) for line in lines] == ["1", "2", "3", "4"]
    assert "about" in lines[0] and "left" in lines[0] and "(25%)" in lines[0]
    assert lines[-1].startswith("eval before: 4/4 (100%), 0:00 elapsed") and "left" not in lines[-1]
    assert "\r" not in out.getvalue()


def test_lines_are_spaced_by_the_interval(monkeypatch):
    monkeypatch.setattr(progress, "draws_bars", lambda: False)
    out = io.StringIO()
    with progress_bar(total=1000, desc="x", every_s=3600, file=out) as bar:
        for _ in range(1000):
            bar.update(1)
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]  # only the closing line


def test_disabled_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(progress, "draws_bars", lambda: False)
    with progress_bar(total=3, desc="quiet", disable=True) as bar:
        bar.update(3)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_heartbeat_reports_while_a_long_call_runs():
    out = io.StringIO()
    with heartbeat("converting", every_s=0.05, file=out):
        time.sleep(0.18)
    lines = out.getvalue().splitlines()
    assert lines[0] == "converting ..."
    assert sum("still running" in line for line in lines) >= 2
    assert lines[-1].startswith("converting: done in 0:00")


def test_greedy_evaluation_shows_progress_when_it_has_several_batches(capsys):
    from course_lib.data import get_task
    from course_lib.evaluation import greedy_completions
    from course_lib.models import load_policy

    model, tokenizer = load_policy("tiny")
    prompts = get_task("arithmetic", split="test", n=6, seed=0)["prompt"]
    greedy_completions(model, tokenizer, prompts, max_new_tokens=2, batch_size=2, desc="held-out")
    assert "held-out: 6/6 (100%)" in capsys.readouterr().out  # captured output is not a terminal
    greedy_completions(model, tokenizer, prompts[:2], max_new_tokens=2, batch_size=2, desc="one batch")
    assert "one batch" not in capsys.readouterr().out
