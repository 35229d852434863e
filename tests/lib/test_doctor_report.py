"""After the fact: the doctor reads TRL's trainer_state.json as well as our run folders."""

import json

import pytest

from course_lib.doctor.report import doctor_run, load_run


def test_a_trl_log_history_is_merged_by_step_with_eval_keys_renamed(tmp_path):
    log = [{"step": 1, "loss": 0.1, "reward": 0.2}, {"step": 1, "eval_reward": 0.3, "eval_runtime": 1.0},
           {"step": 2, "loss": 0.0, "reward": 0.4},
           {"step": 2, "train_runtime": 3.0, "train_loss": 0.05}]  # TRL's closing summary
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": log, "global_step": 2}))
    rows, config, kind = load_run(tmp_path)
    assert kind == "trl" and config == {}
    assert rows == [{"step": 1, "loss": 0.1, "reward": 0.2, "eval/reward": 0.3, "eval_runtime": 1.0},
                    {"step": 2, "loss": 0.0, "reward": 0.4}]


def test_a_folder_without_a_history_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="output_dir"):
        load_run(tmp_path)


_TRL_RUN = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from course_lib.data import get_task
from course_lib.doctor.museum import constant_reward
from course_lib.models import TINY_DIR

out = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(str(TINY_DIR), dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(str(TINY_DIR))
args = GRPOConfig(output_dir=out, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True,
                  per_device_train_batch_size=8, num_generations=4, max_completion_length=2, max_steps=8,
                  logging_steps=1, learning_rate=1e-5)
trainer = GRPOTrainer(model=model, reward_funcs=[constant_reward], args=args,
                      train_dataset=get_task("arithmetic", split="train", n=64, seed=0), processing_class=tokenizer)
trainer.train()
trainer.state.save_to_json(out + "/trainer_state.json")
"""


@pytest.mark.slow
def test_a_real_trl_run_with_a_constant_reward_and_a_short_budget(tmp_path):
    """TRL 1.16's GRPOTrainer, the tiny model, 8 steps: its own log names the same failures.

    TRL runs in a child process: its trainer changes process-wide settings that later tests
    in the same process would inherit."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-c", _TRL_RUN, str(tmp_path)], check=True, env=env, timeout=600,
                   capture_output=True)
    findings, text, figure = doctor_run(tmp_path)
    fired = {f.rule for f in findings}
    assert {"no_learning_signal", "zero_spread_groups", "completions_truncated", "dead_reward_function"} <= fired
    assert "TRL log" in text and figure.exists()
