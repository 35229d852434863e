"""The TRL export runs no code it was not given as code, and prints a command a shell reads as written.

- Reward names reach ``course_rewards.py`` only when they resolve at export time: a name
  carrying code, a name that is not an identifier, or an unknown name is refused before a
  file is written.
- The printed ``cd <output> && trl grpo ...`` (``launch_command``) quotes the folder: a folder named with
  ``$(...)`` or a quote is one word to the shell, and nothing in its name runs.
"""

from __future__ import annotations

import shlex
import subprocess

import pytest

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.cli.export_trl import export_run, launch_command
from course_lib.common.user_code import UserCodeError

SETTINGS = dict(model_name_or_path="tiny", per_device_train_batch_size=4, num_generations=2, max_completion_length=4,
                max_steps=2, save_steps=0)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return make_config("grpo", output_dir=str(tmp_path_factory.mktemp("ours")), **SETTINGS)


@pytest.fixture(scope="module")
def dataset():
    return get_task("arithmetic", n=8, seed=0)


@pytest.mark.parametrize("name", [
    "correctness_reward = __import__('os').system('touch PWNED') or None #",  # code in a name
    "x\nimport os; os.system('touch PWNED')",
    "my-reward",  # not an identifier: the module would not parse
    "foo",  # unknown: the module would raise on import
    "course_lib.rewards:no_such_reward",  # a reference that does not resolve
])
def test_a_reward_name_that_does_not_resolve_is_refused_before_anything_is_written(name, config, dataset, tmp_path):
    output = tmp_path / "run"
    with pytest.raises(UserCodeError) as raised:
        export_run(config, ["correctness_reward", name], dataset, output, copy_model=False)
    assert repr(name.strip())[:20].strip("'\"")[:8] in str(raised.value) or name.split(":")[-1] in str(raised.value)
    assert not (output / "course_rewards.py").exists() and not (output / "grpo.yaml").exists()
    assert not list(tmp_path.rglob("PWNED"))


def test_the_reward_module_holds_only_imports_of_what_resolved(config, dataset, tmp_path):
    folder = export_run(config, ["correctness_reward", "course_lib.rewards.answers:number_reward",
                                         "course_lib.rewards.gsm8k:gsm8k_xmlcount"], dataset,
                        tmp_path / "run", copy_model=False)
    text = (folder / "course_rewards.py").read_text()
    assert "REWARD_FUNCTIONS['correctness_reward']" in text
    assert "REWARD_FUNCTIONS['number_reward']" in text  # the shipped function, found by identity
    assert "from course_lib.rewards.gsm8k import gsm8k_xmlcount as gsm8k_xmlcount" in text
    namespace: dict = {}
    exec(compile(text, "course_rewards.py", "exec"), namespace)  # imports and runs nothing else
    from course_lib.rewards import correctness_reward, gsm8k_xmlcount, number_reward

    assert namespace["correctness_reward"] is correctness_reward and namespace["number_reward"] is number_reward
    assert namespace["gsm8k_xmlcount"] is gsm8k_xmlcount


@pytest.mark.parametrize("folder_name", ["run $(touch PWNED) x", "it's `touch PWNED` here", 'a "quoted" run; touch PWNED'])
def test_the_printed_command_quotes_the_output_folder(folder_name, config, dataset, tmp_path):
    output = tmp_path / folder_name
    folder = export_run(config, ["correctness_reward"], dataset, output, copy_model=False)
    # README.txt holds no path (the folder moves); the command printed after an export does.
    assert str(tmp_path) not in (folder / "README.txt").read_text()
    for line in [launch_command(folder)]:
        words = shlex.split(line)
        assert words[:3] == ["cd", str(output.resolve()), "&&"], words
        # What a user's shell does with the pasted line, trl replaced by pwd: it lands in the folder, runs nothing else.
        cd_part = line.split(" && ")[0]
        result = subprocess.run(["bash", "-c", f"{cd_part} && pwd"], capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(output.resolve())
    assert not list(tmp_path.rglob("PWNED")) and not (tmp_path / "PWNED").exists()


def test_a_reward_reading_a_column_the_task_lacks_is_refused_before_anything_is_written(config, dataset, tmp_path):
    """``code_execution_reward`` reads the ``tests`` column: arithmetic rows have none, so TRL would fail."""
    assert "tests" not in dataset.column_names
    output = tmp_path / "run"
    with pytest.raises(UserCodeError, match=r"code_execution_reward.*\['tests'\].*columns: \['answer', 'prompt'"):
        export_run(config, ["correctness_reward", "code_execution_reward"], dataset, output, copy_model=False)
    assert not output.exists()


def test_a_task_with_the_column_exports_the_code_reward(config, tmp_path):
    from datasets import Dataset

    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "Write add."}], "tests": ["assert add(1, 2) == 3"]}])
    folder = export_run(config, ["code_execution_reward"], rows, tmp_path / "run", copy_model=False)
    assert "REWARD_FUNCTIONS['code_execution_reward']" in (folder / "course_rewards.py").read_text()
