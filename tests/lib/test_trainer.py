"""The trainer on the tiny model: schedule, resume, algorithms, rewards errors (``train`` and ``eval`` from
the command line: the README's block, run and checked in ``tests/lib/test_readme.py``)."""

import math
from pathlib import Path

import pytest
import torch

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import RewardFunctionError, get_reward_functions
from course_lib.run.history import WALL_CLOCK_KEYS
from course_lib.schedule import schedule_table
from course_lib.trainer import Trainer

# Proximity gives graded rewards, so groups have variance even when the model is usually right.
CORRECT = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])


def _trainer(tmp_path, algo="grpo", rows=64, **overrides):
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=2, learning_rate=1e-3,
                    per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=4,
                    max_completion_length=6, logging_steps=1, save_steps=0, seed=3)
    settings.update(overrides)
    config = make_config(algo, **settings)
    model, tokenizer = load_policy("tiny")
    return Trainer(config, CORRECT, get_task("arithmetic", n=rows, seed=0), model, tokenizer, progress=False)


def _record_schedule(trainer):
    """Wrap the trainer so it records (prompts of each micro-batch, optimizer step after it)."""
    events = []
    micro, opt = trainer._micro_step, trainer._optimizer_step

    def micro_step(mb):
        events.append(["micro", list(mb.rows)])
        return micro(mb)

    def optimizer_step():
        events.append(["opt"])
        return opt()

    trainer._micro_step, trainer._optimizer_step = micro_step, optimizer_step
    return events


@pytest.mark.parametrize("per_device,accum,generations,steps_per_gen", [
    (3, 2, 3, 4),   # the seed's Example 1
    (3, 4, 4, 4),   # Example 3 (with its typo corrected)
    (6, 2, 3, 2),   # Example 4
])
def test_micro_batches_and_optimizer_steps_follow_the_schedule_table(tmp_path, per_device, accum, generations,
                                                                     steps_per_gen):
    trainer = _trainer(tmp_path, per_device_train_batch_size=per_device, gradient_accumulation_steps=accum,
                       num_generations=generations, steps_per_generation=steps_per_gen,
                       max_steps=2 * steps_per_gen // accum)
    events = _record_schedule(trainer)
    trainer.train()
    numbering: dict[int, int] = {}
    observed = []
    for event in events:
        if event[0] == "micro":
            observed.append({"prompts": [numbering.setdefault(r, len(numbering)) for r in event[1]],
                             "optimizer_step": False})
        else:
            observed[-1]["optimizer_step"] = True
    expected = schedule_table(per_device, accum, generations, steps_per_generation=steps_per_gen, cycles=2)
    assert [(r["prompts"], r["optimizer_step"]) for r in observed] == \
           [(list(row.prompts), row.optimizer_step) for row in expected]


def _comparable(row):
    return {k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS}


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    settings = dict(max_steps=6, save_steps=3, steps_per_generation=2, num_iterations=2, beta=0.04, temperature=1.5)
    full = _trainer(tmp_path / "full", **settings)
    full_history = full.train()
    resumed = _trainer(tmp_path / "resumed", **settings)
    resumed.config = resumed.config  # same config, fresh model
    resumed_history = resumed.train(resume_from=tmp_path / "full" / "checkpoint-3")
    assert [_comparable(r) for r in resumed_history[3:]] == [_comparable(r) for r in full_history[3:]]
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_each_algorithm_updates_the_policy_and_logs_its_metrics(tmp_path, algo):
    overrides = {"beta": 0.04} if algo == "grpo" else {}
    # Hot sampling and two prompts a step make groups with unequal rewards (a learning signal).
    trainer = _trainer(tmp_path, algo=algo, temperature=1.5, per_device_train_batch_size=8, **overrides)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train()
    assert len(history) == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    expected = {"grpo": ["reward", "reward_std", "frac_reward_zero_std", "kl", "clip_ratio/region_mean"],
                "rloo": ["objective/kl", "objective/rlhf_reward", "objective/scores", "policy/approxkl_avg",
                         "policy/clipfrac_avg", "loss/policy_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens",
                         "lr", "episode", "eps", "objective/entropy", "objective/non_score_reward"],
                "ppo": ["objective/kl", "loss/value_avg", "val/clipfrac_avg", "policy/approxkl_avg"]}[algo]
    for key in expected + ["grad_norm", "learning_rate", "completions/mean_length", "entropy", "tokens/s"]:
        assert key in history[-1] and history[-1][key] is not None and math.isfinite(history[-1][key]), key
    assert (Path(trainer.output_dir) / "history.jsonl").exists()
    assert (Path(trainer.output_dir) / "final" / "config.json").exists()


#: What every algorithm logs under one name (TRL GRPO's), so that the progress bar, the dashboard
#: and the doctor read GRPO, RLOO and PPO runs alike.
SHARED_KEYS = ["reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/low_mean",
               "clip_ratio/high_mean", "clip_ratio/region_mean", "completions/clipped_ratio",
               "completions/mean_length", "grad_norm", "learning_rate", "loss", "num_tokens", "tokens/s",
               "timing/step_s", "timing/generation_s"]


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_the_three_algorithms_log_the_shared_signals_under_one_name(tmp_path, algo):
    trainer = _trainer(tmp_path, algo=algo, max_steps=1, beta=0.04, temperature=1.5, per_device_train_batch_size=8)
    row = trainer.train()[-1]
    missing = [key for key in SHARED_KEYS if key not in row or not math.isfinite(row[key])]
    assert not missing, f"{algo} does not log {missing}"
    assert 0.0 <= row["clip_ratio/region_mean"] <= 1.0
    if "policy/clipfrac_avg" in row:  # RLOO and PPO: the same quantity under both names
        assert row["clip_ratio/region_mean"] == pytest.approx(row["policy/clipfrac_avg"])


def test_lora_with_kl_uses_the_base_model_as_reference(tmp_path):
    trainer = _trainer(tmp_path, use_lora=True, lora_r=4, lora_alpha=8, lora_dropout=0.0, beta=0.04,
                       lora_target_modules=["q_proj", "v_proj"], max_steps=3, learning_rate=5e-3,
                       temperature=1.5, per_device_train_batch_size=8)
    assert trainer.reference._copy is None  # no second model in memory
    history = trainer.train()
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: policy == reference
    assert history[-1]["kl"] > 0


def test_truncated_completions_all_masked_give_finite_metrics(tmp_path):
    trainer = _trainer(tmp_path, max_completion_length=1, mask_truncated_completions=True, beta=0.04,
                       loss_type="grpo")
    history = trainer.train()
    for row in history:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value), key


def test_a_raising_reward_function_stops_training_with_its_name(tmp_path):
    def broken_reward(prompts, completions, **kwargs):
        raise KeyError("oops")

    config = make_config("grpo", output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                         num_generations=4, max_completion_length=4, save_steps=0)
    model, tokenizer = load_policy("tiny")
    trainer = Trainer(config, [broken_reward], get_task("arithmetic", n=16), model, tokenizer, progress=False)
    with pytest.raises(RewardFunctionError, match="broken_reward"):
        trainer.train()


def test_invalid_trainer_inputs_fail_with_a_clear_message(tmp_path):
    model, tokenizer = load_policy("tiny")
    config = make_config("grpo", output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                         num_generations=4)
    with pytest.raises(ValueError, match="reward_funcs"):
        Trainer(config, [], get_task("arithmetic", n=16), model, tokenizer)
    with pytest.raises(ValueError, match="reward_weights|weights"):
        Trainer(make_config("grpo", output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                            num_generations=4, reward_weights=[1.0, 2.0, 3.0]), CORRECT, get_task("arithmetic", n=16),
                model, tokenizer)


def test_ppo_with_a_separate_value_model_trains_its_own_trunk(tmp_path):
    trainer = _trainer(tmp_path, algo="ppo", use_separate_value_model=True, temperature=1.5,
                       per_device_train_batch_size=8)
    critic_body = trainer.value_head.backbone
    assert critic_body is not None and critic_body is not trainer.model.get_decoder()
    before = [p.detach().clone() for p in critic_body.parameters()]
    policy_before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, critic_body.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(policy_before, trainer.model.parameters()))
    assert math.isfinite(history[-1]["loss/value_avg"])


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.xdist_group("vllm_engine")
def test_grpo_with_the_vllm_engine_syncs_weights_and_corrects_with_tis(tmp_path):
    pytest.importorskip("vllm")
    # A large learning rate moves the policy far in one step: without a weight sync, the
    # engine's sampling log-probs would drift away from the trainer's.
    trainer = _trainer(tmp_path, engine="vllm", max_steps=3, learning_rate=2e-2, temperature=1.5,
                       per_device_train_batch_size=8, vllm_kv_cache_gib=0.5)
    assert trainer.config.effective_vllm_importance_sampling_correction  # on by default with vLLM
    history = trainer.train()
    for row in history:
        assert row["sampling/sampling_logp_difference/mean"] < 1e-3, row
        assert row["sampling/importance_sampling_ratio/min"] > 0.99
        assert row["sampling/importance_sampling_ratio/max"] <= 3.0  # sequence_mask, clip_max 3.0 (TRL 1.16)
    before = [p.detach().clone() for p in load_policy("tiny")[0].parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_saving_the_final_lora_model_keeps_the_trainer_adapters(tmp_path):
    trainer = _trainer(tmp_path, use_lora=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj"], max_steps=1)
    trainer.train()
    assert any("lora_" in name for name, _ in trainer.model.named_parameters())
    saved, _ = load_policy(str(tmp_path / "final"))
    assert not any("lora_" in name for name, _ in saved.named_parameters())  # merged into plain weights


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.xdist_group("vllm_engine")
def test_a_bfloat16_sampler_is_corrected_by_truncated_importance_sampling(tmp_path):
    pytest.importorskip("vllm")
    trainer = _trainer(tmp_path, engine="vllm", vllm_dtype="bfloat16", max_steps=1, temperature=1.5,
                       per_device_train_batch_size=8, vllm_kv_cache_gib=0.5)
    row = trainer.train()[0]
    # bf16 sampling differs from the fp32 trainer: the weights are no longer all 1, and the
    # default sequence_mask mode keeps none above clip_max = 3.0.
    assert row["sampling/sampling_logp_difference/mean"] > 1e-3
    assert row["sampling/importance_sampling_ratio/min"] < 1.0 < row["sampling/importance_sampling_ratio/max"] <= 3.0
    assert math.isfinite(row["loss"])


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_logged_entropy_is_exact_with_fused_log_probs(tmp_path, algo):
    """The fused path logs the true entropy (equal to the full-logits one), not -mean(log p)."""
    rows = {}
    for fused in (True, False):
        trainer = _trainer(tmp_path / str(fused), algo=algo, max_steps=1, temperature=1.5,
                           logprob_kernel="auto" if fused else "full")
        rows[fused] = trainer.train()[0]
    assert rows[True]["entropy"] == pytest.approx(rows[False]["entropy"], abs=1e-5)
    # the Monte-Carlo stand-in the trainer used to log is a different number here
    batch = trainer.batch
    valid = batch.completion_mask.bool()
    logps = trainer._forward_in_chunks(trainer.model, {k: getattr(batch, k) for k in (
        "prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})[0]
    assert abs((-logps[valid]).mean().item() - rows[True]["entropy"]) > 1e-3


def test_max_steps_unset_runs_num_train_epochs(tmp_path):
    # 16 prompts, 2 per generation batch (per_device 8 / G 4), one optimizer step per batch:
    # 8 steps an epoch, 0.5 epoch = 4 steps.
    trainer = _trainer(tmp_path, rows=16, max_steps=-1, num_train_epochs=0.5, per_device_train_batch_size=8)
    assert trainer.max_steps == 4
    history = trainer.train()
    assert [row["step"] for row in history] == [1, 2, 3, 4]
    assert history[-1]["epoch"] == pytest.approx(0.5)


@pytest.mark.parametrize("algo, mode, level", [
    ("grpo", "sequence_mask", "sequence"), ("grpo", "token_truncate", "token"), ("rloo", "token_truncate", "sequence"),
    ("ppo", "token_mask", "token"), ("ppo", "sequence_truncate", "sequence")])
def test_the_sampling_correction_reaches_every_algorithm(tmp_path, algo, mode, level):
    """With the correction on, each algorithm's batch carries the weight of the configured mode at
    the algorithm's level (RLOO's action is the completion), and its loss reads it."""
    trainer = _trainer(tmp_path, algo=algo, max_steps=1, vllm_importance_sampling_correction=True,
                       vllm_importance_sampling_mode=mode)
    seen = []
    loss = trainer.algorithm.loss

    def recording_loss(micro_batch, outputs, config, num_items_in_batch):
        seen.append(micro_batch.sampling_ratio)
        return loss(micro_batch, outputs, config, num_items_in_batch)

    trainer.algorithm = type("Recording", (), {k: getattr(trainer.algorithm, k) for k in (
        "name", "always_needs_old_logps", "sampling_correction_level", "advantages", "batches", "make_value_head",
        "state", "load_state")})()
    trainer.algorithm.loss = recording_loss
    trainer.train()
    ratio = seen[0]
    assert ratio is not None
    assert ratio.shape[1] == (1 if level == "sequence" else trainer.batch.completion_mask.shape[1])
    # the same model sampled: every weight is 1 up to the recomputation's rounding
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-4)
    assert "sampling/importance_sampling_ratio/mean" in trainer.logger.rows[0]


def test_long_prompts_are_truncated_from_the_left_with_a_warning(tmp_path):
    from course_lib.rollout.base import PromptTruncationWarning

    trainer = _trainer(tmp_path, max_steps=1, max_prompt_length=12)
    with pytest.warns(PromptTruncationWarning, match="max_prompt_length=12"):
        trainer.train()
    assert trainer.batch.prompt_ids.shape[1] == 12


def test_train_with_only_model_and_task_starts_from_the_measured_settings():
    import argparse

    from course_lib.cli.train import add_train_arguments, build_run
    from course_lib.presets import MEASURED

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    for algo in ("grpo", "rloo"):
        config, rewards, _ = build_run(parser.parse_args(["--algo", algo, "--model", "tiny", "--task", "arithmetic",
                                                          "--train-rows", "64"]))
        for name, value in MEASURED[("tiny", "arithmetic", algo)].items():
            assert getattr(config, name) == value, name
    # --set and --max-steps still win over the preset
    config, _, _ = build_run(parser.parse_args(["--model", "tiny", "--task", "arithmetic", "--train-rows", "64",
                                                "--max-steps", "7", "--set", "learning_rate=1e-3"]))
    assert (config.max_steps, config.learning_rate) == (7, 1e-3)


def test_ppo_value_learning_rate_moves_the_head_at_its_own_rate(tmp_path):
    # One update of a zero-initialised head: Adam's first step moves every weight by about its
    # learning rate (m / sqrt(v) = +-1), so the head's largest change is ~ value_learning_rate,
    # while the policy's largest change stays ~ learning_rate.
    trainer = _trainer(tmp_path, algo="ppo", learning_rate=1e-5, value_learning_rate=1e-2, max_steps=1,
                       lr_scheduler_type="constant", per_device_train_batch_size=8, weight_decay=0.0)
    assert [group["lr"] for group in trainer.optimizer.param_groups] == [1e-5, 1e-2]
    head_before = trainer.value_head.summary.weight.detach().clone()
    policy_before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    head_step = (trainer.value_head.summary.weight - head_before).abs().max().item()
    policy_step = max((p - b).abs().max().item() for p, b in zip(trainer.model.parameters(), policy_before))
    assert head_step == pytest.approx(1e-2, rel=0.05)
    assert policy_step == pytest.approx(1e-5, rel=0.05)


def test_trainer_generate_is_greedy_decoding_of_the_current_policy(tmp_path):
    from course_lib.evaluation import greedy_completions

    trainer = _trainer(tmp_path, max_steps=1)
    trainer.train()
    prompts = get_task("arithmetic", split="test", n=6, seed=0)["prompt"]
    expected = greedy_completions(trainer.model, trainer.tokenizer, prompts, max_new_tokens=6)
    assert trainer.generate(prompts).texts == expected


def test_a_trainer_built_after_another_librarys_bf16_trainer_runs_in_float32(tmp_path):
    """TRL's SFTTrainer(bf16=True) leaves mixed precision "bf16" in accelerate's process-wide state;
    a course trainer built later in the same process must not inherit it silently: its config
    says float32 (the tiny model's dtype), so its accelerator trains without autocast."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        assert Accelerator(cpu=True, mixed_precision="bf16").mixed_precision == "bf16"  # what the other trainer left
        model, tokenizer = load_policy("tiny")
        config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                             per_device_train_batch_size=4, num_generations=4, max_completion_length=4,
                             save_steps=0, device="cpu")
        trainer = Trainer(config, get_reward_functions(["proximity_reward"]), get_task("arithmetic", n=8), model,
                          tokenizer, progress=False)
        assert trainer.accelerator.mixed_precision == "no"
        assert next(trainer.model.parameters()).dtype.is_floating_point
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
