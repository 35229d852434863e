"""export-trl: TRL's own command-line parser reads the exported run, and TRL's GRPOTrainer,
built from it, computes on its first batch the loss the course library computes."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from course_lib.algos import make_config
from course_lib.algos.grpo import policy_loss
from course_lib.data import get_task
from course_lib.cli.export_trl import export_run
from course_lib.policy import completion_forward

SETTINGS = dict(model_name_or_path="tiny", per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
                learning_rate=1e-3, temperature=1.2, beta=0.04, loss_type="dapo", epsilon_high=0.28, max_steps=2,
                save_steps=0, lr_scheduler_type="constant", dtype="float32", seed=5)


@pytest.fixture()
def exported(tmp_path, monkeypatch):
    config = make_config("grpo", output_dir=str(tmp_path / "ours"), **SETTINGS)
    folder = export_run(config, ["proximity_reward"], get_task("arithmetic", n=32, seed=0), tmp_path / "run")
    monkeypatch.syspath_prepend(str(folder))  # TRL's script imports course_rewards from the working folder
    monkeypatch.chdir(folder)
    sys.modules.pop("course_rewards", None)
    return config, folder


def test_trls_parser_reads_the_exported_run(exported):
    from trl.scripts.grpo import make_parser

    config, folder = exported
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(
        ["--config", str(folder / "grpo.yaml")], fail_with_unknown_args=True)
    for name in ("per_device_train_batch_size", "num_generations", "max_completion_length", "learning_rate",
                 "temperature", "beta", "loss_type", "epsilon_high", "max_steps", "seed"):
        assert getattr(training_args, name) == getattr(config, name), name
    assert model_args.model_name_or_path == "model"  # the embedded model, copied: the folder moves as a whole
    assert (folder / "model" / "config.json").is_file() and script_args.dataset_name == "data"
    assert training_args.output_dir == "trl-output"
    assert script_args.reward_funcs == ["course_rewards.proximity_reward"]
    readme = (folder / "README.txt").read_text()
    assert "trl grpo --config grpo.yaml" in readme and "learning_rate: 0.001 here, TRL's default 1e-06" in readme
    assert "TRL shuffles it" in readme


def test_trls_trainer_on_the_exported_config_computes_our_loss(exported):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer
    from trl.scripts.grpo import make_parser

    config, folder = exported
    _, training_args, model_args, _ = make_parser().parse_args_and_config(
        ["--config", str(folder / "grpo.yaml"), "--use_cpu", "true", "--report_to", "none",
         "--save_strategy", "no", "--disable_tqdm", "true"], fail_with_unknown_args=True)
    rewards = importlib.import_module("course_rewards")
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    dataset = load_dataset(str(folder / "data"))["train"]
    trainer = GRPOTrainer(model=model, reward_funcs=[rewards.proximity_reward], args=training_args,
                          train_dataset=dataset, processing_class=tokenizer)
    seen = []
    trl_loss = trainer._compute_loss

    def recording_loss(model, inputs):
        loss = trl_loss(model, inputs)
        if not seen:  # ours, on the same batch and the same weights (before the first step)
            with torch.no_grad():
                logps, _, _ = completion_forward(model, inputs["prompt_ids"], inputs["prompt_mask"],
                                                 inputs["completion_ids"], inputs["completion_mask"],
                                                 temperature=config.temperature)
            ours = policy_loss(
                logps, inputs.get("old_per_token_logps"), inputs["advantages"], inputs["completion_mask"],
                loss_type=config.loss_type, epsilon=config.epsilon, epsilon_high=config.epsilon_high,
                beta=config.beta, ref_logps=inputs.get("ref_per_token_logps"),
                num_items_in_batch=inputs["num_items_in_batch"], max_completion_length=config.max_completion_length,
                gradient_accumulation_steps=config.gradient_accumulation_steps,
                steps_per_generation=config.effective_steps_per_generation)
            seen.append((loss.detach(), ours.loss.detach()))
        return loss

    trainer._compute_loss = recording_loss
    trainer.train()
    assert trainer.state.global_step == 2
    theirs, ours = seen[0]
    assert torch.isfinite(theirs) and abs(float(theirs)) > 0  # a real batch with a signal
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)


DIGIT_SUM_REWARDS = textwrap.dedent('''
    """A task the library does not ship: the sum of a number's digits."""
    import os
    import re


    def digit_sum_reward(prompts, completions, answer, **kwargs):
        with open(os.environ["DIGIT_SUM_CALLS"], "a") as log:
            log.write(f"{len(completions)}\\n")
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        found = [re.findall(r"-?\\d+", t) for t in texts]
        return [1.0 if f and f[0] == str(a) else 0.0 for f, a in zip(found, answer)]


    if __name__ == "__main__":
        raise SystemExit("imported by the export, never run")
''')


def test_the_export_carries_a_custom_reward_that_scores_from_a_moved_folder(tmp_path, monkeypatch):
    """The export carries the user's reward module: in a copy of the export folder, with the
    module's original folder gone and no absolute path left behind, every dotted path of
    ``reward_funcs`` in grpo.yaml imports (as TRL's script imports them, from the working
    folder) and the user's reward scores. ``trl grpo`` training on such an export (a task and
    rewards of one's own, exported by the command line, in a moved folder) is
    ``tests/lib/test_own_task.py``'s."""
    import shutil

    import yaml

    source = tmp_path / "user"
    source.mkdir()
    (source / "digit_sum_rewards.py").write_text(DIGIT_SUM_REWARDS)
    from course_lib.common.user_code import resolve_callable

    reward = resolve_callable(f"{source / 'digit_sum_rewards.py'}:digit_sum_reward")
    config = make_config("grpo", output_dir=str(tmp_path / "ours"), **{**SETTINGS, "per_device_train_batch_size": 4,
                                                                         "num_generations": 2})
    export_run(config, [reward, "number_reward"], get_task("arithmetic", n=16, seed=0), tmp_path / "export")
    moved = tmp_path / "elsewhere" / "export"
    shutil.copytree(tmp_path / "export", moved)
    shutil.rmtree(tmp_path / "export")
    shutil.rmtree(source)
    for name in ("digit_sum_rewards", "course_rewards"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    grpo_yaml = (moved / "grpo.yaml").read_text()
    assert str(tmp_path) not in grpo_yaml
    paths = yaml.safe_load(grpo_yaml)["reward_funcs"]
    assert len(paths) == 2 and all(path.startswith("course_rewards.") for path in paths), paths
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("DIGIT_SUM_CALLS", str(calls))
    monkeypatch.syspath_prepend(str(moved))
    monkeypatch.chdir(moved)
    functions = [getattr(importlib.import_module(path.rpartition(".")[0]), path.rpartition(".")[2]) for path in paths]
    assert Path(sys.modules["digit_sum_rewards"].__file__).resolve() == (moved / "digit_sum_rewards.py").resolve()
    completions = [[{"role": "assistant", "content": "13"}], [{"role": "assistant", "content": "x"}]]
    assert functions[0](prompts=[None, None], completions=completions, answer=[13, 13]) == [1.0, 0.0]
    assert calls.read_text().split() == ["2"]  # the user's own function ran, from the copy
    assert len(functions[1](prompts=[None, None], completions=completions, answer=[13, 13])) == 2
    for name in ("digit_sum_rewards", "course_rewards"):
        sys.modules.pop(name, None)
