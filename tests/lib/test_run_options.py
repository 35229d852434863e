"""Practitioner options (TRL 1.16 names) and evaluation during training, on the tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch

from course_lib.algos import make_config
from course_lib.run.batches import PromptSampler
from course_lib.data import get_task
from course_lib.run.history import unique_prompt_samples
from course_lib.run.model_options import apply_model_options, cast_lm_head_to_fp32, disable_dropout, mix_into_reference
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.rollout import SamplingConfig
from course_lib.rollout.base import tokenize_prompts
from course_lib.trainer import Trainer

REWARDS = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])


def _trainer(tmp_path, eval_dataset=None, model=None, **overrides):
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=2, learning_rate=1e-3,
                    per_device_train_batch_size=4, num_generations=4, max_completion_length=6, logging_steps=1,
                    save_steps=0, seed=3)
    settings.update(overrides)
    config = make_config(overrides.pop("algo", "grpo"), **settings)
    tokenizer = None
    if model is None and "model_init_kwargs" not in overrides:
        model, tokenizer = load_policy("tiny")
    return Trainer(config, REWARDS, get_task("arithmetic", n=32, seed=0), model, tokenizer, progress=False,
                   eval_dataset=eval_dataset)


def test_disable_dropout_makes_training_mode_deterministic():
    model, tokenizer = load_policy("tiny")
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    model.train()
    for attention_dropout, mlp_dropout in ((0.5, 0.0), (0.0, 0.5)):  # each kind on its own is live
        model.model.layers[0].self_attn.attention_dropout = attention_dropout
        model.model.layers[0].mlp.act_fn = torch.nn.Sequential(torch.nn.Dropout(mlp_dropout), torch.nn.SiLU())
        assert not torch.equal(model(ids).logits, model(ids).logits)
    model.model.layers[0].self_attn.attention_dropout = 0.5
    assert disable_dropout(model) == 2
    torch.testing.assert_close(model(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_cast_lm_head_to_fp32_keeps_the_head_and_logits_in_float32():
    model, _ = load_policy("tiny", dtype=torch.bfloat16)
    config = make_config("grpo", cast_lm_head_to_fp32=True, dtype="bfloat16")
    apply_model_options(model, config)
    assert model.lm_head.weight.dtype == torch.float32
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    logits = model(torch.tensor([[1, 5, 9]])).logits
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_cast_lm_head_to_fp32_refuses_a_tied_head():
    model, _ = load_policy("tiny")
    model.lm_head.weight = model.model.embed_tokens.weight  # tie them
    with pytest.raises(ValueError, match="cast_lm_head_to_fp32=True needs an LM head that is not tied.*Fix:"):
        cast_lm_head_to_fp32(model)


def test_mix_into_reference_by_hand():
    reference, policy = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        reference.weight.copy_(torch.tensor([[1.0, 2.0]]))
        policy.weight.copy_(torch.tensor([[3.0, -2.0]]))
        reference.bias.fill_(0.0)
        policy.bias.fill_(1.0)
    mix_into_reference(reference, policy, alpha=0.6)
    torch.testing.assert_close(reference.weight, torch.tensor([[0.6 * 3 + 0.4 * 1, 0.6 * -2 + 0.4 * 2]]))
    torch.testing.assert_close(reference.bias, torch.tensor([0.6]))
    with pytest.raises(ValueError, match="sync_ref_model"):
        mix_into_reference(torch.nn.Linear(3, 1), policy, 0.5)


def test_sync_ref_model_moves_the_reference_every_n_steps(tmp_path):
    trainer = _trainer(tmp_path, beta=0.04, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=1.0,
                       max_steps=3)
    trainer.train()
    with trainer.reference.model() as reference:
        ref = dict(reference.named_parameters())
    # alpha = 1 copies the policy at step 2; step 3 moved the policy again, not the reference
    name = "model.layers.0.mlp.up_proj.weight"
    policy = dict(trainer.model.named_parameters())[name]
    initial = dict(load_policy("tiny")[0].named_parameters())[name]
    assert not torch.equal(ref[name], initial) and not torch.equal(ref[name], policy)


def test_shuffle_dataset_false_keeps_the_dataset_order():
    assert PromptSampler(5, seed=0, shuffle=False).take(7) == [0, 1, 2, 3, 4, 0, 1]
    assert PromptSampler(5, seed=0).take(5) != [0, 1, 2, 3, 4]


def test_generation_kwargs_override_the_sampling_fields_and_keep_the_rest():
    sampling = SamplingConfig(temperature=1.0, generation_kwargs={"temperature": 0.5, "max_new_tokens": 7,
                                                                  "suppress_tokens": [3]})
    assert (sampling.temperature, sampling.max_tokens) == (0.5, 7)
    assert sampling.generation_kwargs == {"suppress_tokens": [3]}


def test_generation_kwargs_reach_hf_generate(tmp_path):
    """suppress_tokens is honoured: the suppressed token never appears in any completion."""
    from course_lib.rollout import make_engine

    model, tokenizer = load_policy("tiny")
    engine = make_engine("hf", model, tokenizer, record_logps=False)
    free = engine.generate(["1 + 1 ="], n=8, sampling=SamplingConfig(temperature=1.5, max_tokens=8, seed=0))
    common = int(torch.mode(free.completion_ids[free.completion_mask.bool()]).values)
    kept = engine.generate(["1 + 1 ="], n=8, sampling=SamplingConfig(
        temperature=1.5, max_tokens=8, seed=0, generation_kwargs={"suppress_tokens": [common]}))
    assert common not in kept.completion_ids[kept.completion_mask.bool()].tolist()


def test_chat_template_kwargs_reach_the_template():
    _, tokenizer = load_policy("tiny")
    tokenizer.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                               "{% if enable_thinking is defined and not enable_thinking %}<no_think>{% endif %}")
    prompt = [[{"role": "user", "content": "hi"}]]
    plain, = tokenize_prompts(tokenizer, prompt)
    no_think, = tokenize_prompts(tokenizer, prompt, chat_template_kwargs={"enable_thinking": False})
    assert tokenizer.decode(no_think).endswith("<no_think>") and not tokenizer.decode(plain).endswith("<no_think>")


def test_model_init_kwargs_reach_from_pretrained(tmp_path):
    trainer = _trainer(tmp_path, model_init_kwargs={"attn_implementation": "eager"}, max_steps=1)
    assert trainer.model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="model_init_kwargs=.*dtype.*Fix: set dtype"):
        make_config("grpo", model_init_kwargs={"torch_dtype": "bfloat16"})


def test_unique_prompt_samples():
    columns = (["a", "a", "b", "b"], ["1", "2", "3", "4"], [1.0, 0.0, 0.5, 0.5], [0.7, -0.7, 0.0, 0.0])
    assert unique_prompt_samples(*columns) == (["a", "b"], ["1", "3"], [1.0, 0.5], [0.7, 0.0])


def test_evaluation_during_training_logs_held_out_metrics(tmp_path):
    held_out = get_task("arithmetic", split="test", n=6, seed=1)
    trainer = _trainer(tmp_path, eval_dataset=held_out, eval_strategy="steps", eval_steps=2, max_steps=3,
                       num_generations_eval=2)
    history = trainer.train()
    evaluated = [row["step"] for row in history if "eval/reward" in row]
    assert evaluated == [2, 3]  # every eval_steps, and after the last step
    saved = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    row = next(r for r in saved if r["step"] == 2)
    assert 0.0 <= row["eval/greedy_accuracy"] <= 1.0 and math.isfinite(row["eval/greedy_reward"])
    assert math.isfinite(row["eval/rewards/correctness_first_number_reward/mean"])
    # the greedy accuracy is the rule of course_lib.evaluation on the same greedy completions
    from course_lib.evaluation import evaluate_accuracy

    assert history[-1]["eval/greedy_accuracy"] == pytest.approx(
        evaluate_accuracy(trainer.model, trainer.tokenizer, held_out, max_new_tokens=6))
    from course_lib.widgets.dashboard import _default_panels

    assert _default_panels(history, 12)[0] == ("reward", "eval/reward")
    with pytest.raises(ValueError, match="eval_strategy='steps' needs held-out prompts.*Fix:"):
        _trainer(tmp_path / "no_eval", eval_strategy="steps")


def test_modern_grpo_settings_train_end_to_end(tmp_path):
    """CISPO with the HF engine's recorded sampling log-probs, the correction, off-policy masking,
    high-entropy tokens and an adaptive entropy bonus: one short run, finite, all metrics logged."""
    trainer = _trainer(tmp_path, loss_type="cispo", epsilon_high=5.0, vllm_importance_sampling_correction=True,
                       vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.5,
                       off_policy_mask_threshold=0.5, top_entropy_quantile=0.5, entropy_coef=0.01,
                       use_adaptive_entropy=True, temperature=1.5, disable_dropout=True, max_steps=2,
                       steps_per_generation=2)
    history = trainer.train()
    for row in history:
        assert math.isfinite(row["loss"]) and "cispo_clip_ratio" in row and "entropy_coef" in row
        assert row["sampling/importance_sampling_ratio/min"] > 0.5  # the same model sampled
    assert trainer.batch.sampling_logps is not None


def test_the_adaptive_entropy_coefficient_survives_a_resume(tmp_path):
    settings = dict(entropy_coef=0.01, use_adaptive_entropy=True, entropy_target=10.0, entropy_coef_delta=0.01,
                    temperature=1.5, max_steps=3)
    full = _trainer(tmp_path / "full", **settings)
    full.train()
    first = _trainer(tmp_path / "resumed", save_steps=1, **{**settings, "max_steps": 2})
    first.train()
    resumed = _trainer(tmp_path / "resumed", **settings)
    resumed.train(resume_from=tmp_path / "resumed" / "checkpoint-2")
    # entropy is below the (high) target at every step: the coefficient rises by delta each step
    assert full.algorithm.entropy_control.coef == pytest.approx(0.04)
    assert resumed.algorithm.entropy_control.coef == pytest.approx(full.algorithm.entropy_control.coef)
