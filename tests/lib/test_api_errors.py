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
from course_lib.run import wording
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
