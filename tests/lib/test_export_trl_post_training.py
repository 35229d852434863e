"""export-trl for SFT and DPO runs: TRL's own parsers read the exported files with our values under
TRL's names, ``trl sft`` and ``trl dpo`` train on the exported folder, and what cannot be handed over
is refused before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from course_lib.algos import make_config
from course_lib.cli.export_trl import export_run, launch_command
from post_training_rows import pair_rows, sft_rows

SETTINGS = dict(model_name_or_path="tiny", max_steps=3, per_device_train_batch_size=8, save_steps=0, seed=4,
                lr_scheduler_type="constant", dtype="float32")




def _parse(folder, command):
    module = {"sft": "trl.scripts.sft", "dpo": "trl.scripts.dpo"}[command]
    make_parser = __import__(module, fromlist=["make_parser"]).make_parser
    return make_parser().parse_args_and_config(["--config", str(folder / f"{command}.yaml")],
                                               fail_with_unknown_args=True)


def test_trls_sft_parser_reads_the_exported_run(tmp_path):
    config = make_config("sft", output_dir=str(tmp_path / "ours"), learning_rate=3e-4, max_length=40,
                         completion_only_loss=False, **SETTINGS)
    folder = export_run(config, None, sft_rows(), tmp_path / "run")
    script_args, training_args, model_args, _ = _parse(folder, "sft")
    assert (training_args.learning_rate, training_args.max_length, training_args.completion_only_loss) == (3e-4, 40, False)
    assert (training_args.max_steps, training_args.per_device_train_batch_size, training_args.seed) == (3, 8, 4)
    assert script_args.dataset_name == "data" and model_args.model_name_or_path == "model"
    assert not (folder / "course_rewards.py").exists() and not (folder / "grpo.yaml").exists()
    lines = (folder / "data" / "train.jsonl").read_text().splitlines()
    assert len(lines) == 16 and set(__import__("json").loads(lines[0])) == {"prompt", "completion"}
    readme = (folder / "README.txt").read_text()
    assert "trl sft --config sft.yaml" in readme and "learning_rate: 0.0003 here, TRL's default 2e-05" in readme
    assert "tokenized apart" in readme and "Reward functions" not in readme
    assert launch_command(folder, "sft").endswith("trl sft --config sft.yaml")


def test_trls_dpo_parser_reads_the_exported_run_with_pairs_counted_as_trl_counts_them(tmp_path):
    config = make_config("dpo", output_dir=str(tmp_path / "ours"), beta=0.2, loss_type="ipo", learning_rate=5e-5,
                         **SETTINGS)
    folder = export_run(config, None, pair_rows(), tmp_path / "run")
    _, training_args, _, _ = _parse(folder, "dpo")
    assert training_args.per_device_train_batch_size == 4  # 8 rows here = 4 pairs in TRL
    assert (training_args.beta, training_args.loss_type, training_args.learning_rate) == (0.2, ["ipo"], 5e-5)
    rows = [__import__("json").loads(line) for line in (folder / "data" / "train.jsonl").read_text().splitlines()]
    assert set(rows[0]) == {"prompt", "chosen", "rejected"} and rows[0]["chosen"] != rows[0]["rejected"]
    assert "the export halves it" in (folder / "README.txt").read_text()


def test_a_chat_prompts_string_completion_becomes_the_assistants_message(tmp_path):
    from datasets import Dataset

    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "2+2?"}], "completion": "4"}] * 4)
    folder = export_run(make_config("sft", output_dir=str(tmp_path / "ours"), **SETTINGS), None, rows, tmp_path / "run")
    row = __import__("json").loads((folder / "data" / "train.jsonl").read_text().splitlines()[0])
    assert row["completion"] == [{"role": "assistant", "content": "4"}]


def test_what_trl_cannot_take_is_refused_before_anything_is_written(tmp_path):
    strict = make_config("sft", output_dir=str(tmp_path / "ours"), truncation_mode="error", **SETTINGS)
    with pytest.raises(ValueError, match="truncation_mode"):
        export_run(strict, None, sft_rows(), tmp_path / "strict")
    with pytest.raises(ValueError, match="prompt\\+chosen\\+rejected"):
        export_run(make_config("dpo", output_dir=str(tmp_path / "ours"), **SETTINGS), None, sft_rows(), tmp_path / "dpo")
    assert not (tmp_path / "strict").exists() and not (tmp_path / "dpo").exists()


@pytest.mark.parametrize("command", ["sft", "dpo"])
def test_trl_trains_the_exported_run(tmp_path, command):
    """``trl sft`` / ``trl dpo`` run 2 steps on the CPU in the exported folder and log their losses."""
    rows = sft_rows() if command == "sft" else pair_rows()
    config = make_config(command, output_dir=str(tmp_path / "ours"), learning_rate=1e-4, **SETTINGS)
    folder = export_run(config, None, rows, tmp_path / "run")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "WANDB_DISABLED": "true"}
    trl = os.path.join(os.path.dirname(sys.executable), "trl")
    result = subprocess.run([trl, command, "--config", f"{command}.yaml", "--use_cpu", "true", "--report_to", "none",
                             "--max_steps", "2", "--logging_steps", "1"],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "'loss'" in output and "train_runtime" in output
    if command == "dpo":
        assert "rewards/margins" in output
