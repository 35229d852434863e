"""Errors name the fix in the words of the interface in use, and a misspelt field gets a suggestion.

- ``GRPOConfig(learning_rat=...)`` (the constructor, not only ``make_config``) names the
  closest field; the message is a ``TypeError`` as for any unknown keyword.
- ``report_to`` whose package is missing is refused when the config is built, with the
  install command, not inside ``train()`` after the model loaded.
- A fix reached from Python names Python arguments; from the command line, flags.
"""

from __future__ import annotations

import importlib.util

import pytest

from course_lib.run import checkpoint as ckpt
from course_lib.common import wording
from course_lib.algos import make_config
from course_lib.algos.grpo_config import GRPOConfig
from course_lib.algos.ppo import PPOConfig
from course_lib.algos.rloo import RLOOConfig


@pytest.mark.parametrize("cls", [GRPOConfig, RLOOConfig, PPOConfig])
def test_a_misspelt_field_in_the_constructor_names_the_closest_one(cls):
    with pytest.raises(TypeError, match=r"has no field 'learning_rat'\. Did you mean 'learning_rate'\?"):
        cls(learning_rat=1e-5)
    with pytest.raises(TypeError, match=r"Did you mean 'per_device_train_batch_size'\?"):
        cls(per_device_train_batch_sise=4)


def test_the_constructor_takes_the_aliases_make_config_takes():
    assert RLOOConfig(rloo_k=4).num_generations == make_config("rloo", rloo_k=4).num_generations == 4


@pytest.mark.parametrize("report_to, package", [("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_report_to_without_its_package_is_refused_at_construction_with_the_install_command(report_to, package,
                                                                                         monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ValueError, match=rf"report_to='{report_to}' needs the {package} package, which is not "
                                         rf"installed.*pip install {package}.*\[logging\]"):
        GRPOConfig(report_to=report_to)
    # Where the package is there, the same config is accepted (the other path of this check).
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == package else real(name, *a))
    assert GRPOConfig(report_to=report_to).report_to == report_to


def test_fixes_are_worded_for_python_from_python_and_for_the_command_line_from_it(tmp_path, monkeypatch):
    monkeypatch.setattr(wording, "_COMMAND_LINE", False)
    with pytest.raises(ckpt.CheckpointError) as from_python:
        ckpt.resolve_resume("latest", tmp_path)
    assert "resume_from" in str(from_python.value) and "--" not in str(from_python.value)
    with pytest.raises(TypeError) as misspelt:
        GRPOConfig(learning_rat=1.0)
    assert "--" not in str(misspelt.value) and "field_docs(GRPOConfig)" in str(misspelt.value)
    monkeypatch.setattr(wording, "_COMMAND_LINE", True)
    with pytest.raises(ckpt.CheckpointError) as from_cli:
        ckpt.resolve_resume("latest", tmp_path)
    assert "--resume-from" in str(from_cli.value) and "--output-dir" in str(from_cli.value)


def test_the_command_line_words_a_misspelt_set_in_flags(capsys, tmp_path):
    from course_lib.__main__ import main

    assert main(["train", "--output-dir", str(tmp_path / "x"), "--set", "learning_rat=1e-5"]) == 2
    assert not wording.command_line_active()  # Python calls after the command keep Python's wording
    err = capsys.readouterr().err
    assert "Did you mean 'learning_rate'?" in err and "--list-fields" in err


# ------------------------------------------------------------------ fixes reached from Python, in Python's words


def test_python_errors_deep_in_the_library_name_python_arguments_not_flags(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import save_file

    from course_lib.data import DataError, load_gsm8k
    from course_lib.config.tools import apply_overrides
    from course_lib.run.folder import OutputDirError, claim_output_dir

    monkeypatch.setattr(wording, "_COMMAND_LINE", False)
    seen = []
    # A checkpoint of another model's shapes.
    (tmp_path / "ckpt" / "model").mkdir(parents=True)
    save_file({"weight": torch.zeros(3, 5), "bias": torch.zeros(3)}, tmp_path / "ckpt" / "model" / "model.safetensors")
    with pytest.raises(ckpt.CheckpointError, match=r"do not fit this model.*Fix: resume with the model ") as error:
        ckpt.restore_weights(tmp_path / "ckpt", torch.nn.Linear(2, 2))
    seen.append(error)
    # An output folder holding a symlink where a run writes (Trainer.train claims the folder this way).
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "history.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(OutputDirError, match=r"overwrite_output_dir=True to start a new run") as error:
        with claim_output_dir(tmp_path / "out"):
            pass
    seen.append(error)
    # GSM8K from the hub while offline.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"Fix: load_gsm8k\(path=") as error:
        load_gsm8k()
    seen.append(error)
    # A config value nested too deeply to parse.
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(ValueError, match=r"nests too deeply.*field_docs\(GRPOConfig\)") as error:
        apply_overrides(GRPOConfig(), {"chat_template_kwargs": deep})
    seen.append(error)
    for error in seen:
        text = str(error.value).split(" Fix: ", 1)[1]  # the fix, past the echoed value
        assert "--" not in text, text
    # The same errors from the command line name its flags.
    monkeypatch.setattr(wording, "_COMMAND_LINE", True)
    with pytest.raises(OutputDirError, match=r"--overwrite-output-dir"):
        with claim_output_dir(tmp_path / "out"):
            pass
    with pytest.raises(DataError, match=r"--task gsm8k:<folder"):
        load_gsm8k()


def _message_text(node) -> str:
    """The text of an error message expression: its literal parts in order, ``{}`` for values;
    an argument of ``wording.fix(...)`` counts as routed and is left out."""
    import ast

    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else "{}"
    if isinstance(node, ast.JoinedStr):
        return "".join(_message_text(part) for part in node.values)
    if isinstance(node, ast.FormattedValue):
        return _message_text(node.value) if isinstance(node.value, ast.Call) else "{}"
    if isinstance(node, ast.Call):
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if called == "fix":
            return "{}"
        return " ".join(_message_text(arg) for arg in node.args)
    return " ".join(_message_text(child) for child in ast.iter_child_nodes(node)
                    if isinstance(child, ast.expr))


#: Modules that only the command line runs: flags are their words.
COMMAND_LINE_MODULES = {"__main__.py", "cli/train.py", "cli/probe_rewards.py"}


def test_no_error_outside_the_command_line_names_a_bare_flag():
    """Every ``raise`` in the library (the command-line modules aside) words a flag through
    ``wording.fix``; a quoted shell command (`pip install --no-deps ...`, `python -m course_lib
    train --num-processes N`) names its own program and is fine for either user."""
    import ast
    import re
    from pathlib import Path

    import course_lib

    root = Path(course_lib.__file__).parent
    flag = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
    quoted = re.compile(r"`[^`]*`|python -m course_lib[^)]*")
    bare = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in COMMAND_LINE_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = quoted.sub("", _message_text(node.exc))
                bare += [f"{name}:{node.lineno}: {m}" for m in flag.findall(text)]
    assert not bare, "flags in errors a Python user can reach; word them with course_lib.common.wording.fix:\n" + \
        "\n".join(bare)
