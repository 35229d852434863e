"""The trainer on a CUDA GPU (skipped without one): placement, bf16, fused log-probs, resume.

Run on a GPU machine with ``pytest -m gpu tests/gpu -s``: the step times and peak memory it
prints are the numbers the README quotes for GPUs.
"""

from __future__ import annotations

import time

import pytest
import torch

pytestmark = pytest.mark.gpu  # skipped without a CUDA device (tests/conftest.py)


def _tiny_run(tmp_path, **overrides):
    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=16,
                    num_generations=4, max_completion_length=8, learning_rate=1e-4, save_steps=2, seed=0,
                    lr_scheduler_type="constant")
    settings.update(overrides)
    model, tokenizer = load_policy("tiny")
    return Trainer(make_config("grpo", **settings), get_reward_functions(["proximity_reward"]),
                   get_task("arithmetic", n=128, seed=0), model, tokenizer, progress=False)


def test_the_trainer_puts_everything_on_the_gpu_in_bf16(tmp_path):
    trainer = _tiny_run(tmp_path, beta=0.04)
    assert trainer.accelerator.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in trainer.model.parameters())
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    assert next(trainer.model.parameters()).dtype == expected  # dtype="auto" on a GPU
    rows = trainer.train()
    assert len(rows) == 4 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)


def test_cpu_device_override_keeps_float32_on_a_gpu_machine(tmp_path):
    trainer = _tiny_run(tmp_path, device="cpu", max_steps=1)
    assert next(trainer.model.parameters()).device.type == "cpu"
    assert next(trainer.model.parameters()).dtype == torch.float32


def test_resume_on_the_gpu_reproduces_the_straight_run(tmp_path):
    straight = _tiny_run(tmp_path / "straight", dtype="float32")
    straight.train()
    first = _tiny_run(tmp_path / "legs", dtype="float32", max_steps=2)
    first.train()
    resumed = _tiny_run(tmp_path / "legs", dtype="float32")
    resumed.train(resume_from=tmp_path / "legs" / "checkpoint-2")
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_smollm2_shaped_llama_with_lora_step_time_and_memory(tmp_path):
    """A randomly initialised SmolLM2-135M-shaped Llama (no download), LoRA r=16, bf16, fused head."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import resolve_model_path
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("tiny"))
    model = LlamaForCausalLM(LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                         num_attention_heads=9, num_key_value_heads=3, vocab_size=len(tokenizer),
                                         max_position_embeddings=2048, tie_word_embeddings=True,
                                         pad_token_id=tokenizer.pad_token_id))
    config = make_config("grpo", output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=32,
                         num_generations=8, max_completion_length=64, use_lora=True, lora_r=16, lora_alpha=32,
                         save_steps=0, learning_rate=1e-4)
    trainer = Trainer(config, get_reward_functions(["proximity_reward"]), get_task("arithmetic", n=256, seed=0),
                      model, tokenizer, progress=False)
    times = []
    trainer.on_step = lambda row: times.append(time.perf_counter())
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    per_step = (times[-1] - times[1]) / (len(times) - 2)
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"\nSmolLM2-shaped Llama + LoRA, 32 completions x 64 tokens, bf16: {per_step:.3f} s/step, "
          f"peak {peak:.2f} GiB ({torch.cuda.get_device_name()})")
    assert per_step > 0 and peak > 0


def _sft_run(tmp_path, **overrides):
    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.post_training.data import demonstrations
    from course_lib.trainer import Trainer

    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8,
                    learning_rate=1e-4, save_steps=0, seed=0, lr_scheduler_type="constant", dtype="float32")
    settings.update(overrides)
    model, tokenizer = load_policy("tiny")
    return Trainer(make_config("sft", **settings), None, demonstrations(get_task("arithmetic", n=64, seed=0)), model,
                   tokenizer, progress=False)


def test_sft_packed_on_the_gpu_equals_unpacked_and_logs_token_accuracy(tmp_path):
    """Packing (one row, restarting positions, a block mask) and the gradient-free argmax pass of the
    LM head on CUDA: the same loss, gradient norm, token count and token accuracy as the unpacked run."""
    plain = _sft_run(tmp_path / "plain").train()
    trainer = _sft_run(tmp_path / "packed", packing=True)
    assert trainer.accelerator.device.type == "cuda"
    packed = trainer.train()
    assert len(plain) == len(packed) == 2
    for a, b in zip(plain, packed):
        assert abs(a["loss"] - b["loss"]) < 1e-5, (a["loss"], b["loss"])
        assert abs(a["grad_norm"] - b["grad_norm"]) < 1e-4 * max(1.0, a["grad_norm"]), (a["grad_norm"], b["grad_norm"])
        assert a["num_tokens"] == b["num_tokens"]
        assert 0.0 <= a["mean_token_accuracy"] <= 1.0
        assert abs(a["mean_token_accuracy"] - b["mean_token_accuracy"]) < 1e-6
