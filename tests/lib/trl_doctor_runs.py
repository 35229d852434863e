"""Child process of ``test_doctor_report.py`` and ``test_doctor_callback.py``: TRL 1.16's
trainers on the tiny model, on the CPU, in a child process (TRL's trainers change
process-wide settings that later tests in the same process would inherit).

Usage: ``python trl_doctor_runs.py OUTPUT_DIR``. Three runs one after the other, so that
starting Python and importing TRL (most of the CPU time) happens once for all three:

- ``OUTPUT_DIR/report``: ``GRPOTrainer``, a constant reward and a short budget, 8 steps, no
  callback: the report reads its ``trainer_state.json`` after the fact;
- ``OUTPUT_DIR/grpo``: ``GRPOTrainer`` with ``DoctorCallback(stop=True)`` and a reward that
  is 0.5 for everything;
- ``OUTPUT_DIR/sft``: ``SFTTrainer`` for 3 steps with a ``DoctorCallback``.

It prints ``CALLBACK RUNS`` before the last two, so a test reads their output apart.
"""

import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from course_lib.data import get_task
from course_lib.doctor import DoctorCallback
from course_lib.models import TINY_DIR
from course_lib.museum import constant_reward, half_reward

out = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(str(TINY_DIR))
common = dict(use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=1)


def tiny():
    return AutoModelForCausalLM.from_pretrained(str(TINY_DIR), dtype=torch.float32)


# A constant reward and completions of 2 tokens: no signal, every group alike, truncation.
args = GRPOConfig(output_dir=out + "/report", per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=2, max_steps=8, learning_rate=1e-5, **common)
trainer = GRPOTrainer(model=tiny(), reward_funcs=[constant_reward], args=args, processing_class=tokenizer,
                      train_dataset=get_task("arithmetic", split="train", n=64, seed=0))
trainer.train()
trainer.state.save_to_json(out + "/report/trainer_state.json")
print("CALLBACK RUNS", flush=True)

# GRPO with a reward that is 0.5 for everything: every group alike, loss and gradient 0.
# (dead_reward_function needs 5 logged steps: stop=True ends the run at the error at step 3.)
grpo = DoctorCallback(stop=True)
args = GRPOConfig(output_dir=out + "/grpo", per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=4, max_steps=6, learning_rate=3e-5, **common)
trainer = GRPOTrainer(model=tiny(), reward_funcs=[half_reward], args=args, processing_class=tokenizer,
                      train_dataset=get_task("arithmetic", split="train", n=64, seed=0), callbacks=[grpo])
trainer.train()
trainer.state.save_to_json(out + "/grpo/trainer_state.json")
print("GRPO_STEPS", trainer.state.global_step, "FOUND", sorted(f.rule for f in grpo.findings))

# SFT for 3 steps: no reward is logged, so the RL rules do not apply.
sft = DoctorCallback()
data = Dataset.from_list([{"text": f"{a} + {b} = {a + b}"} for a in range(8) for b in range(8)])
trainer = SFTTrainer(model=tiny(), args=SFTConfig(output_dir=out + "/sft", per_device_train_batch_size=8, max_steps=3,
                                                  learning_rate=1e-4, **common),
                     train_dataset=data, processing_class=tokenizer, callbacks=[sft])
trainer.train()
trainer.state.save_to_json(out + "/sft/trainer_state.json")
print("SFT_FOUND", len(sft.findings))
