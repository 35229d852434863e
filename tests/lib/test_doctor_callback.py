"""DoctorCallback in real TRL 1.16 trainers (tiny model, CPU, a child process: TRL's trainers
change process-wide settings that later tests would inherit), and the doctor's input handling."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.__main__ import main
from course_lib.doctor.report import doctor_run

ROOT = Path(__file__).resolve().parents[2]

_TRL_RUNS = r"""
import sys, torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer
from course_lib.data import get_task
from course_lib.doctor import DoctorCallback
from course_lib.museum import half_reward
from course_lib.models import TINY_DIR

out = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(str(TINY_DIR))
common = dict(use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=1)

# GRPO with a reward that is 0.5 for everything: every group alike, loss and gradient 0.
# (dead_reward_function needs 5 logged steps: stop=True ends the run at the error at step 3.)
grpo = DoctorCallback(stop=True)
args = GRPOConfig(output_dir=out + "/grpo", per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=4, max_steps=6, learning_rate=3e-5, **common)
trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(str(TINY_DIR), dtype=torch.float32),
                      reward_funcs=[half_reward], args=args, processing_class=tokenizer,
                      train_dataset=get_task("arithmetic", split="train", n=64, seed=0), callbacks=[grpo])
trainer.train()
trainer.state.save_to_json(out + "/grpo/trainer_state.json")
print("GRPO_STEPS", trainer.state.global_step, "FOUND", sorted(f.rule for f in grpo.findings))

# SFT for 2 steps: no reward is logged, so the RL rules do not apply.
sft = DoctorCallback()
data = Dataset.from_list([{"text": f"{a} + {b} = {a + b}"} for a in range(8) for b in range(8)])
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(TINY_DIR), dtype=torch.float32),
                     args=SFTConfig(output_dir=out + "/sft", per_device_train_batch_size=8, max_steps=3,
                                    learning_rate=1e-4, **common),
                     train_dataset=data, processing_class=tokenizer, callbacks=[sft])
trainer.train()
trainer.state.save_to_json(out + "/sft/trainer_state.json")
print("SFT_FOUND", len(sft.findings))
"""


@pytest.mark.slow
def test_the_callback_reports_live_in_trl_grpo_and_stays_out_of_sft(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", _TRL_RUNS, str(tmp_path)], env=env, timeout=900,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # Printed live, once: three steps in a row with loss and gradient 0 (every group alike).
    assert out.count("[doctor error]") == 1 and "no_learning_signal" in out
    assert "FOUND ['no_learning_signal']" in out
    # stop=True: the error finding at step 3 ends the 6-step run there.
    assert "GRPO_STEPS 3 " in out
    # Written as it fires (a killed run keeps it) and into the saved log, which the report reads back.
    lines = [json.loads(x) for x in (tmp_path / "grpo" / "doctor.jsonl").read_text().splitlines()]
    assert [(x["rule"], x["step"]) for x in lines] == [("no_learning_signal", 3)]
    state = json.loads((tmp_path / "grpo" / "trainer_state.json").read_text())
    assert [e["rule"] for e in state["log_history"] if e.get("type") == "doctor"] == ["no_learning_signal"]
    findings, text, _ = doctor_run(tmp_path / "grpo", figure=tmp_path / "grpo.png")
    assert [f.rule for f in findings] == ["no_learning_signal"] and "every group's rewards are equal" in text
    # SFT: one line, no finding.
    assert "SFT_FOUND 0" in out and "this log has no rewards" in out
    assert main(["doctor", str(tmp_path / "sft"), "--figure", str(tmp_path / "sft.png")]) == 0


def _write_history(folder: Path, rows) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "history.jsonl"


def test_an_empty_history_or_trl_log_exits_non_zero_with_a_message(tmp_path, capsys):
    _write_history(tmp_path / "run", [])
    assert main(["doctor", str(tmp_path / "run")]) == 2
    assert "no logged step" in capsys.readouterr().err
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    assert main(["doctor", str(tmp_path / "trl")]) == 2
    assert "no logged step" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "trainer_state.json").write_text("{not json")
    assert main(["doctor", str(tmp_path / "broken")]) == 2


def _constant_rows(n=12):
    return [{"step": i + 1, "loss": 0.0, "grad_norm": 0.0, "reward": 0.5, "frac_reward_zero_std": 1.0,
             "rewards/half/mean": 0.5, "rewards/half/std": 0.0, "entropy": 0.7} for i in range(n)]


def test_history_jsonl_itself_is_accepted_and_a_bad_figure_path_keeps_the_report(tmp_path, capsys):
    path = _write_history(tmp_path / "run", _constant_rows())
    findings, text, saved = doctor_run(path, figure=tmp_path / "no" / "such" / "folder" / "f.png")
    assert saved is None and "figure: not saved" in text
    assert {f.rule for f in findings} == {"dead_reward_function", "no_learning_signal"}
    # The error first; the constant function (info: it changes no advantage) named below it.
    assert "Act on the first: no_learning_signal" in text
    assert text.index("ERROR   no_learning_signal") < text.index("INFO    dead_reward_function")
    assert main(["doctor", str(path), "--figure", str(tmp_path / "no" / "f.png")]) == 1  # an error finding
    assert "no_learning_signal" in capsys.readouterr().out


def test_a_log_without_rewards_says_the_rl_rules_do_not_apply(tmp_path):
    # An SFT log: loss, grad_norm, learning_rate, entropy (TRL's SFTTrainer logs it), no reward.
    rows = [{"step": i + 1, "loss": 2.0 - 0.01 * i, "grad_norm": 3.0, "learning_rate": 2e-5,
             "entropy": 0.5 + 0.1 * i} for i in range(30)]
    findings, text, _ = doctor_run(_write_history(tmp_path / "sft", rows), figure=tmp_path / "f.png")
    assert findings == [] and "this log has no rewards" in text


def test_a_dpo_log_is_no_rl_log(tmp_path):
    # TRL's DPOTrainer logs implicit rewards of fixed pairs (rewards/chosen, rewards/margins...).
    rows = [{"step": i + 1, "loss": 0.69 - 0.01 * i, "grad_norm": 5.0, "learning_rate": 5e-7,
             "rewards/chosen": 0.01 * i, "rewards/rejected": -0.01 * i, "rewards/accuracies": 0.5,
             "rewards/margins": 0.02 * i, "logps/chosen": -40.0, "logps/rejected": -42.0} for i in range(20)]
    (tmp_path / "dpo").mkdir()
    (tmp_path / "dpo" / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
    findings, text, _ = doctor_run(tmp_path / "dpo", figure=tmp_path / "f.png")
    assert findings == [] and "this log has no rewards" in text
