"""Nothing runs to its end meaning something else than it says.

- A code-execution reward without a working sandbox is refused when the trainer is built, not
  scored 0 until the first completion holding code reaches it.
- Rewards of magnitude 1e30 (or 1e35) give the advantages of the same rewards scaled down:
  the group statistics are taken in float64, where the squared spread does not overflow.
- A user module calling ``sys.exit(0)`` on import is an error, not a run that exits 0 having
  done nothing.
- ``--correct`` results must be bools (or 0 / 1): ``'False'`` or a forgotten ``return`` is
  refused with the function's name.
- A process forked by a tool (or a reward) that returns into the training loop stops before it
  writes into the run's ``history.jsonl``.
- ``lora_target_modules=[]`` and non-finite or non-numeric reward weights are refused with the
  field and the fix.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import textwrap

import numpy as np
import pytest
import torch

from course_lib.algos import make_config
from course_lib.algos.grpo import group_advantages
from course_lib.rewards import compute_rewards


# ------------------------------------------------------------------ 8. the sandbox, at start
def test_a_code_execution_run_without_the_sandbox_is_refused_at_start(tmp_path):
    from datasets import Dataset

    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.sandbox import SandboxUnavailableError, detect_isolation
    from course_lib.trainer import Trainer

    if detect_isolation().available:
        pytest.skip("this machine has a working sandbox: the refusal cannot happen here")
    model, tokenizer = load_policy("tiny")
    rows = Dataset.from_dict({"prompt": ["Write add(a, b)."] * 4, "tests": [json.dumps(["assert add(1, 2) == 3"])] * 4})
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=4)
    with pytest.raises(SandboxUnavailableError, match=r"reward function 'code_execution_reward' runs untrusted "
                                                      r"code in the sandbox, which cannot run here: .*Install"):
        Trainer(config, get_reward_functions(["code_execution_reward"]), rows, model, tokenizer, progress=False)


# ------------------------------------------------------------------ 9 / 13. huge rewards
@pytest.mark.parametrize("scale", [1e20, 1e30, 1e35])
@pytest.mark.parametrize("mode", ["group", "batch"])
def test_huge_rewards_give_the_advantages_of_the_scaled_rewards(scale, mode):
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5, 2.0, 1.0, 1.0, 0.0])
    expected = group_advantages(rewards, 4, mode)
    got = group_advantages(rewards * scale, 4, mode)
    assert torch.isfinite(got).all() and got.abs().sum() > 0
    # the 1e-4 in the denominator is negligible next to both spreads
    assert torch.allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_huge_rewards_through_compute_rewards_are_scored():
    def r_huge(prompts, completions, **_):
        return [1e30 * (i % 2) for i in range(len(completions))]

    per_func, total = compute_rewards([r_huge], ["p"] * 4, ["a", "b", "c", "d"])
    advantages = group_advantages(total, 4)
    # hand-worked: rewards [0, 1, 0, 1] x 1e30: mean 0.5e30, std 0.57735e30, advantages -+0.866
    assert torch.allclose(advantages, torch.tensor([-0.866025, 0.866025, -0.866025, 0.866025]), atol=1e-4)


# ------------------------------------------------------------------ 10. sys.exit on import
def test_a_module_that_exits_on_import_is_an_error(tmp_path, monkeypatch, capsys):
    from course_lib.__main__ import main

    (tmp_path / "quitter.py").write_text("import sys\nsys.exit(0)\ndef r(prompts, completions, **_):\n"
                                         "    return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--model", "tiny", "--task", "arithmetic", "--rewards", "quitter.py:r",
                 "--output-dir", str(tmp_path / "run"), "--max-steps", "1"])
    error = capsys.readouterr().err
    assert code == 2 and "quitter.py called sys.exit(0)" in error and "Fix:" in error
    assert not (tmp_path / "run" / "history.jsonl").exists()


def test_a_module_that_exits_on_import_by_name_is_an_error(tmp_path, monkeypatch):
    from course_lib.common.user_code import UserCodeError, resolve_callable

    (tmp_path / "quitter_by_name.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserCodeError, match=r"importing module 'quitter_by_name' called sys.exit\(3\)"):
        resolve_callable("quitter_by_name:r", what="--rewards")


# ------------------------------------------------------------------ 11. --correct results
@pytest.mark.parametrize("body, accepted", [
    ("return 'False'", None), ("return None", None), ("pass", None), ("return 2", None), ("return 0.5", None),
    ("return True", True), ("return 0", False), ("return 1", True), ("import numpy\n    return numpy.bool_(True)", True),
])
def test_correct_results_must_be_bools(tmp_path, body, accepted):
    from course_lib.cli.train import correct_function
    from course_lib.common.user_code import UserCodeError

    (tmp_path / "checker.py").write_text(f"def check(completion, answer):\n    {body}\n")
    check = correct_function(argparse.Namespace(correct=f"{tmp_path / 'checker.py'}:check"))
    if accepted is None:
        with pytest.raises(UserCodeError, match=r"--correct: check\(completion, answer\) returned .* must return "
                                                r"True or False"):
            check("the answer is 4", "4")
    else:
        assert check("the answer is 4", "4") == accepted


# ------------------------------------------------------------------ 12. a forked copy of the run
def _exit_status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_copy_does_not_write_the_history(tmp_path):
    from course_lib.run.history import MetricsLogger

    logger = MetricsLogger(tmp_path)
    logger.log({"step": 1, "loss": 0.5})
    parent = os.getpid()
    child = os.fork()
    if child == 0:  # the copy, as after a tool's os.fork(): it must never return into the test
        try:
            logger.log({"step": 99, "loss": 0.0})
        finally:
            os._exit(0)
    assert os.getpid() == parent
    assert _exit_status(child) != 0
    rows = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]


def test_a_tool_that_forks_ends_its_child(tmp_path):
    from course_lib.rollout.tool_calls import ToolCall
    from course_lib.rollout.tools import ToolBox

    def forking(n: int) -> int:
        """Fork and return the child's pid (0 in the child).

        Args:
            n: unused
        """
        return os.fork()

    parent = os.getpid()
    result = ToolBox([forking], timeout=None).call(ToolCall(name="forking", arguments={"n": 1}))
    if os.getpid() != parent:  # the child came back: the guard is missing
        os._exit(0)
    child = int(result.content)
    assert child > 0 and _exit_status(child) != 0


# ------------------------------------------------------------------ 13. settings meaning nothing
def test_an_empty_lora_target_list_is_refused():
    from course_lib.config import apply_overrides

    with pytest.raises(ValueError, match=r"lora_target_modules=\[\] is empty.*Fix:"):
        make_config("grpo", model_name_or_path="tiny", lora_target_modules=[])
    with pytest.raises(ValueError, match=r"lora_target_modules=\[\] is empty.*Fix:"):
        apply_overrides(make_config("grpo", model_name_or_path="tiny"), ["lora_target_modules="])


@pytest.mark.parametrize("weights, pattern", [
    ([math.nan, 1.0], r"weights\[0\]=nan is not finite"),
    ([math.inf, 1.0], r"weights\[0\]=inf is not finite"),
    ([1.0, np.float64(-math.inf)], r"weights\[1\]=-inf is not finite"),
    (["x", 1.0], r"weights\[0\]='x' is not a number"),
    ([None, 1.0], r"weights\[0\]=None is not a number"),
    (1.0, r"weights=1.0 is not a list"),
])
def test_bad_reward_weights_are_refused(weights, pattern):
    def one(prompts, completions, **_):
        return [1.0] * len(completions)

    with pytest.raises(ValueError, match=pattern + r".*Fix:"):
        compute_rewards([one, one], ["p", "p"], ["a", "b"], weights=weights)


def test_good_reward_weights_still_combine():
    def one(prompts, completions, **_):
        return [1.0, 2.0]

    _, total = compute_rewards([one, one], ["p", "p"], ["a", "b"], weights=[0.5, np.float32(2)])
    assert total.tolist() == [2.5, 5.0]
