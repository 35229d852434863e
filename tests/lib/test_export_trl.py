"""export-trl: TRL's own command-line parser reads the exported run, and TRL's GRPOTrainer,
built from it, computes on its first batch the loss the course library computes."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

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


def test_trl_trains_the_exported_run_with_a_custom_reward_from_a_moved_folder(tmp_path):
    """The export carries the user's reward module: ``trl grpo`` runs 2 steps in a copy of the
    export folder, with the module's original folder gone and no absolute path left behind."""
    import shutil

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
    sys.modules.pop("digit_sum_rewards", None)
    assert str(tmp_path) not in (moved / "grpo.yaml").read_text()
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "DIGIT_SUM_CALLS": str(calls), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and "site-packages" not in p and
                                         str(tmp_path) not in p)}
    trl = os.path.join(os.path.dirname(sys.executable), "trl")
    result = subprocess.run([trl, "grpo", "--config", "grpo.yaml", "--use_cpu", "true", "--report_to", "none",
                             "--save_strategy", "no", "--max_steps", "2", "--logging_steps", "1"],
                            cwd=moved, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert calls.is_file() and len(calls.read_text().split()) >= 2  # the custom reward scored both steps
    assert "rewards/digit_sum_reward/mean" in result.stdout + result.stderr
    assert "'global_step': 2" in result.stdout + result.stderr or "train_runtime" in result.stdout + result.stderr
