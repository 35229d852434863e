"""Every command block of README.md runs as written.

The README's ``bash`` and ``python`` blocks are extracted and run in a fresh folder (the
repository's ``examples/``, ``configs/`` and ``.venv`` linked into it, ``python`` on the
``PATH`` being this interpreter). The only changes, which the README states beside its
blocks: a ``train`` line with no ``--max-steps`` gets ``--max-steps 2``, and
``max_steps=200`` in Python becomes ``max_steps=2``. Lines that cannot run in a test are
listed in :data:`NOT_RUN` with the reason, and each listed line must still be in the README,
so the list cannot outlive what it excuses. The blocks that train and evaluate from the command
line are also checked for what they leave (:data:`OUTPUT_CHECKS`): these runs are the suite's
checks of ``train`` and ``eval`` as a user types them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from trl_child import env_for_trl_child

from course_lib.run.history import load_history

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: The start of each README line that is not run, and why.
NOT_RUN = {
    ".venv/bin/python -m course_lib grade": "grades every exercise in a child pytest (about a minute); "
                                           "tests/lib/test_grading.py runs the same grading of the untouched "
                                           "exercises and checks every verdict",
    "make demo": "installs the environment into .venv, then trains SmolLM2 for minutes; tests/lib/test_demo.py "
                 "runs the demo's code on a few steps",
    "make test": "installs the environment, then runs this whole suite (this test included)",
    "make lab": "installs the environment and starts a JupyterLab server that waits for a browser; "
                "tests/browser drives the lessons in JupyterLab",
    "python -m course_lib train --model smollm2-135m": "the one-GPU line: on a CPU, SmolLM2 steps take minutes "
                                                      "(make demo's run); tests/gpu runs the trainer on CUDA",
    "accelerate launch --config_file configs/multi_gpu.yaml": "'...' is a placeholder for the train options; "
                                                              "needs several GPUs",
    "accelerate launch --config_file configs/deepspeed_zero2.yaml": "needs DeepSpeed and CUDA GPUs; "
                                                                    "tests/lib/test_own_task.py runs trl grpo "
                                                                    "on an export",
    "cd sft-run && trl sft --config sft.yaml": "trains the exported run with TRL (100 steps); "
                                               "tests/lib/test_export_trl_post_training.py runs trl sft and trl dpo "
                                               "for 2 steps on exports",
}
#: Blocks that are fragments, not programs, by a line they hold, and why they are not run.
FRAGMENTS = {
    "class Counter:": "shows the shape of an environment; GRPOConfig(...) and dataset are placeholders "
                      "(tests/lib/test_agents_trainer.py trains with environments of this shape)",
}
SHORT_STEPS = 2
EXAMPLE_MODULE = ROOT / "examples" / "digit_sum" / "digit_sum.py"


def _summaries(stdout: str) -> tuple[dict, dict]:
    """The last lines of ``train`` and of ``eval`` in a block's output: their JSON summaries."""
    printed = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    trained = [summary for summary in printed if "algo" in summary]
    evaluated = [summary for summary in printed if "accuracy" in summary]
    assert len(trained) == len(evaluated) == 1, stdout[-3000:]
    return trained[0], evaluated[0]


def _step_rows(run: Path) -> list[dict]:
    """The run's metric rows, one per optimizer step (events, such as the doctor's findings,
    carry a ``type`` and share the file)."""
    return [row for row in load_history(run) if "type" not in row]


def _check_tiny_train_then_eval(cwd: Path, stdout: str) -> None:
    """``train`` logs each of its 2 steps and writes ``final/``, which ``eval`` reads and
    scores on the 200 problems asked for."""
    summary, evaluated = _summaries(stdout)
    assert summary["algo"] == "grpo" and summary["steps"] == SHORT_STEPS
    assert [row["step"] for row in _step_rows(cwd / "runs" / "tiny")] == list(range(1, SHORT_STEPS + 1))
    assert evaluated["model"] == "runs/tiny/final" and evaluated["n"] == 200
    assert 0.0 <= evaluated["accuracy"] <= 1.0


def _check_own_task_and_rewards(cwd: Path, stdout: str) -> None:
    """The example's own task, rewards and check from a file: ``train`` logs each reward by
    its function's name and evaluates with the check, ``eval`` reads the run's checkpoint
    with the same task and check, and the TRL export carries the reward module with it."""
    summary, evaluated = _summaries(stdout)
    assert summary["steps"] == 10 and summary["accuracy_after"] is not None
    history = _step_rows(cwd / "runs" / "digits")
    assert history[-1]["step"] == 10
    assert {"rewards/digit_sum_reward/mean", "rewards/brevity_reward/mean"} <= set(history[-1])
    assert (cwd / "runs" / "digits" / "checkpoint-10" / "trainer_state.json").is_file()
    assert evaluated["model"] == "runs/digits/checkpoint-10" and evaluated["n"] == 32
    assert 0.0 <= evaluated["accuracy"] <= 1.0
    export = cwd / "runs" / "digits-trl"
    assert (export / "digit_sum.py").read_text() == EXAMPLE_MODULE.read_text()  # the reward module travels
    assert "course_rewards.digit_sum_reward" in (export / "grpo.yaml").read_text()


#: What a block leaves, checked after it ran, by a line the block holds.
OUTPUT_CHECKS = {
    "python -m course_lib train --model tiny --task arithmetic --output-dir runs/tiny": _check_tiny_train_then_eval,
    "T=examples/digit_sum/digit_sum.py": _check_own_task_and_rewards,
}


def readme_blocks(text: str | None = None) -> list[tuple[str, str]]:
    """``(language, code)`` of each ``bash`` and ``python`` block, in order."""
    text = README.read_text() if text is None else text
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(bash|python)\n(.*?)^```", text, re.S | re.M)]


def _logical_lines(code: str) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    return code.replace("\\\n", " ").splitlines()


def runnable_bash(code: str) -> str:
    """The block as the test runs it: NOT_RUN lines dropped, short --max-steps added to long trains."""
    lines = []
    for line in _logical_lines(code):
        if any(line.lstrip().startswith(prefix) for prefix in NOT_RUN):
            continue
        if re.search(r"-m course_lib train\b", line) and "--max-steps" not in line:
            command, hash_, comment = line.partition("  #")
            line = f"{command.rstrip()} --max-steps {SHORT_STEPS}" + (f"  #{comment}" if hash_ else "")
        lines.append(line)
    return "\n".join(lines)


def runnable_python(code: str) -> str:
    return code.replace("max_steps=200", f"max_steps={SHORT_STEPS}")


def _workspace(tmp_path: Path) -> tuple[Path, dict]:
    for name in ("examples", "configs", ".venv"):
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A script, not a link: a link to a virtual environment's python elsewhere loses the environment.
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "WANDB_DISABLED": "true", "MPLBACKEND": "Agg", "COLUMNS": "200"}
    return tmp_path, env


def _blocks_to_run():
    cases = []
    for index, (language, code) in enumerate(readme_blocks()):
        first = code.strip().splitlines()[0]
        fragment = next((reason for line, reason in FRAGMENTS.items() if line in code), None)
        if fragment is not None:
            continue
        if language == "bash" and not runnable_bash(code).strip():
            continue  # every line is in NOT_RUN
        cases.append(pytest.param(language, code, id=f"block{index}-{first[:40]}"))
    return cases


def test_every_excused_line_is_still_in_the_readme_and_every_block_is_run_or_excused():
    text = README.read_text()
    for prefix in list(NOT_RUN) + list(FRAGMENTS):
        assert prefix in text, f"NOT_RUN/FRAGMENTS names {prefix!r}, which the README no longer holds"
    blocks = readme_blocks(text)
    assert len(blocks) >= 8  # the extraction found the README's blocks
    for line in OUTPUT_CHECKS:  # each check has its block, and that block runs
        assert sum(line in runnable_bash(code) for language, code in blocks if language == "bash") == 1, line
    for language, code in blocks:
        if language == "python" and not any(line in code for line in FRAGMENTS):
            compile(code, "README.md", "exec")  # every Python block that runs is a whole program
    # The README states the one change the test makes to the commands.
    assert "`--max-steps 2` added" in text and "tests/lib/test_readme.py" in text


def test_the_short_step_rule_only_touches_trains_without_max_steps():
    code = ("T=x\npython -m course_lib train --task a \\\n    --max-steps 20 --output-dir r\n"
            "python -m course_lib train --model tiny --output-dir runs/dp  # 2 processes\n"
            "python -m course_lib eval --model m\nmake demo    # the main job\n")
    assert runnable_bash(code).splitlines() == [
        "T=x", "python -m course_lib train --task a      --max-steps 20 --output-dir r",
        "python -m course_lib train --model tiny --output-dir runs/dp --max-steps 2  # 2 processes",
        "python -m course_lib eval --model m"]


@pytest.mark.parametrize("language, code", _blocks_to_run())
def test_the_readme_block_runs_as_written(language, code, tmp_path):
    cwd, env = _workspace(tmp_path)
    if language == "bash":
        command = ["bash", "-euo", "pipefail", "-c", runnable_bash(code)]
    else:
        (cwd / "block.py").write_text(runnable_python(code))
        command = [sys.executable, "block.py"]
    if "from trl import" in code and "vllm" not in code:  # TRL's trainers on a CPU: without vLLM's import
        env = env_for_trl_child(env)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{command[-1][:2000]}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n" \
                                   f"{result.stderr[-4000:]}"
    for line, check in OUTPUT_CHECKS.items():
        if language == "bash" and line in code:
            check(cwd, result.stdout)
