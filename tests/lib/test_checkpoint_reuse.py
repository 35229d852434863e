"""A checkpoint folder is a model: ``load_policy("run/checkpoint-N")`` and ``eval --model run/checkpoint-N``
load it (the run folder gives its ``final/``), and a LoRA checkpoint of an embedded model
names its base by name, so the folder loads after it moved to another place or machine."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

SETTINGS = dict(model_name_or_path="tiny", max_steps=1, per_device_train_batch_size=4, num_generations=2,
                max_completion_length=4, save_steps=1, learning_rate=1e-2, seed=3)


def _train(output_dir, **overrides):
    config = make_config("grpo", output_dir=str(output_dir), **{**SETTINGS, **overrides})
    trainer = Trainer(config, get_reward_functions(["proximity_reward"]), get_task("arithmetic", n=16, seed=0),
                      progress=False)
    trainer.train()
    return trainer


def _logits(model, tokenizer):
    ids = tokenizer("12 + 7 =", return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora") / "run"
    trainer = _train(folder, use_lora=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"])
    return folder, _logits(trainer.model.eval(), trainer.tokenizer)


def test_a_lora_checkpoint_of_an_embedded_model_names_its_base_by_name(lora_run):
    folder, _ = lora_run
    adapter = json.loads((folder / "checkpoint-1" / "model" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "tiny"


def test_the_checkpoint_folder_itself_loads_after_it_moved(lora_run, tmp_path):
    folder, trained = lora_run
    moved = tmp_path / "elsewhere" / "checkpoint-1"
    shutil.copytree(folder / "checkpoint-1", moved)
    model, tokenizer = load_policy(moved)
    torch.testing.assert_close(_logits(model, tokenizer), trained, rtol=1e-4, atol=1e-4)


def test_a_full_model_checkpoint_and_a_run_folder_load_too(tmp_path):
    trainer = _train(tmp_path / "full")
    trained = _logits(trainer.model.eval(), trainer.tokenizer)
    for target in (tmp_path / "full" / "checkpoint-1", tmp_path / "full"):  # the run folder: its final/
        model, tokenizer = load_policy(target)
        torch.testing.assert_close(_logits(model, tokenizer), trained, rtol=1e-4, atol=1e-4)


def test_eval_takes_a_checkpoint_folder(lora_run, capsys):
    from course_lib.__main__ import main

    folder, _ = lora_run
    assert main(["eval", "--model", str(folder / "checkpoint-1"), "--n", "2", "--show", "0",
                 "--max-new-tokens", "4"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["n"] == 2 and 0.0 <= result["accuracy"] <= 1.0
