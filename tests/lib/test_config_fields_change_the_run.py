"""Every field of GRPOConfig, RLOOConfig and PPOConfig is accounted for: no setting is accepted and ignored.

Each field is in exactly one of four places:

- ``SHOWN``: changing it changes a cheap, deterministic computation of the run, the
  "fingerprint" below (the algorithm's advantages and a few micro-steps of its loss and
  gradients on a fixed batch, the sampling settings, the batch schedule, the model-loading
  arguments, the prompt order, the sampler-mismatch weights, the reward weights). The test
  builds the config with and without the change and asserts that the fingerprints differ.
- ``REFUSED``: the algorithm ignores it, so any value but the default is refused at construction.
- ``ACTS_IN``: it changes the run through machinery too heavy for a probe (devices, engines,
  the optimizer, LoRA, the trainer's masks, dynamic sampling, ...); the entry names the module
  that reads it and what it does, and the test checks that the module does read it.
- ``IO_ONLY``: it changes only what is logged, saved, printed or evaluated, never an update.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest
import torch

from course_lib.algos import GRPOConfig, PPOConfig, RLOOConfig, get_algorithm, make_config
from course_lib.algos.base import MicroBatch, PolicyOutputs, ScoredBatch
from course_lib.algos.grpo import AGGREGATION_READS, CLIP_FIELDS, LOSSES
from course_lib.ops.importance import sampling_correction
from course_lib.rollout import SamplingConfig
from course_lib.run.batches import PromptSampler
from course_lib.run.model_options import load_kwargs

ALGOS = {"grpo": GRPOConfig, "rloo": RLOOConfig, "ppo": PPOConfig}
B, T = 8, 4

# field -> (algorithms, base settings, changed value); the base makes the field matter
# (e.g. an off-policy ratio for the clip, loss_type="sapo" for SAPO's temperatures).
ALL = ("grpo", "rloo", "ppo")
SHOWN: dict[str, tuple[tuple[str, ...], dict, object]] = {
    # sampling
    "temperature": (ALL, {}, 0.5), "top_p": (ALL, {}, 0.9), "top_k": (ALL, {}, 5), "min_p": (ALL, {}, 0.1),
    "repetition_penalty": (ALL, {}, 1.2), "max_completion_length": (ALL, {}, 64),
    "max_prompt_length": (ALL, {}, 32), "generation_kwargs": (ALL, {}, {"suppress_tokens": [1]}),
    "chat_template_kwargs": (ALL, {}, {"enable_thinking": False}),
    "cache_implementation": (ALL, {}, "static"), "seed": (ALL, {}, 7),
    # data order and loading
    "shuffle_dataset": (ALL, {}, False), "model_init_kwargs": (ALL, {}, {"revision": "main"}),
    "trust_remote_code": (ALL, {}, True),
    # batch schedule
    "per_device_train_batch_size": (ALL, {"num_generations": 2}, 4), "gradient_accumulation_steps": (ALL, {}, 2),
    "num_processes": (ALL, {}, 2), "steps_per_generation": (ALL, {}, 2), "generation_batch_size": (ALL, {}, 16),
    "num_generations": (ALL, {"num_generations": 2}, 4), "num_iterations": (ALL, {}, 3),
    "max_steps": (ALL, {}, 5), "num_train_epochs": (ALL, {}, 1.0), "num_mini_batches": (("rloo", "ppo"), {}, 2),
    # rewards
    "reward_weights": (ALL, {}, [1.0, 0.25]),
    # sampler-mismatch correction
    "vllm_importance_sampling_correction": (ALL, {}, True),
    "vllm_importance_sampling_mode": (ALL, {"vllm_importance_sampling_correction": True}, "token_truncate"),
    "vllm_importance_sampling_clip_min": (ALL, {"vllm_importance_sampling_correction": True}, 0.9),
    "vllm_importance_sampling_clip_max": (ALL, {"vllm_importance_sampling_correction": True}, 1.1),
    "vllm_importance_sampling_cap": (ALL, {"vllm_importance_sampling_correction": True}, 1.1),
    # the loss and the advantages
    "beta": (ALL, {}, 0.3), "epsilon": (ALL, {}, 0.05), "epsilon_high": (("grpo", "rloo"), {}, 0.5),
    "delta": (("grpo",), {}, 1.05), "importance_sampling_level": (("grpo",), {}, "sequence"),
    "scale_rewards": (("grpo",), {}, "none"), "loss_type": (("grpo",), {}, "grpo"),
    "multi_objective_aggregation": (("grpo",), {"reward_weights": [1.0, 3.0]}, "normalize_then_sum"),
    "use_bias_correction_kl": (("grpo",), {"beta": 0.3}, False),
    "sapo_temperature_pos": (("grpo",), {"loss_type": "sapo"}, 3.0),
    "sapo_temperature_neg": (("grpo",), {"loss_type": "sapo"}, 3.0),
    "vespo_k_pos": (("grpo",), {"loss_type": "vespo"}, 0.5), "vespo_lambda_pos": (("grpo",), {"loss_type": "vespo"}, 0.5),
    "vespo_k_neg": (("grpo",), {"loss_type": "vespo"}, 0.5), "vespo_lambda_neg": (("grpo",), {"loss_type": "vespo"}, 0.5),
    "off_policy_mask_threshold": (("grpo",), {}, 0.01), "top_entropy_quantile": (("grpo",), {}, 0.5),
    "entropy_coef": (("grpo",), {}, 0.1),
    "use_adaptive_entropy": (("grpo",), {"entropy_coef": 0.1, "entropy_target": 0.5}, True),
    "entropy_coef_min": (("grpo",), {"entropy_coef": 0.1, "use_adaptive_entropy": True, "entropy_target": 0.5,
                                     "entropy_coef_delta": 0.1}, 0.05),
    "entropy_coef_max": (("grpo",), {"entropy_coef": 0.1, "use_adaptive_entropy": True, "entropy_target": 10.0,
                                     "entropy_coef_delta": 0.1}, 0.15),
    "entropy_coef_delta": (("grpo",), {"entropy_coef": 0.1, "use_adaptive_entropy": True, "entropy_target": 10.0}, 0.2),
    "entropy_target": (("grpo",), {"entropy_coef": 0.1, "use_adaptive_entropy": True}, 10.0),
    "missing_eos_penalty": (("rloo", "ppo"), {}, 1.0), "normalize_reward": (("rloo",), {}, True),
    "reward_clip_range": (("rloo",), {"normalize_reward": True}, 0.5), "normalize_advantage": (("rloo",), {}, True),
    "whiten_rewards": (("ppo",), {}, True), "vf_coef": (("ppo",), {}, 0.5), "cliprange_value": (("ppo",), {}, 0.01),
    "gamma": (("ppo",), {}, 0.5), "lam": (("ppo",), {}, 0.5),
}

# field -> (algorithm, a value other than the default, which is refused)
REFUSED: dict[str, tuple[str, object]] = {
    "epsilon_high": ("ppo", 0.28),      # PPO's clip is symmetric
    "token_level_kl": ("rloo", True),   # one advantage per completion: the per-token KL sums to the same
}

# field -> (module that reads it, what it changes there)
ACTS_IN: dict[str, tuple[str, str]] = {
    "model_name_or_path": ("course_lib.trainer", "the policy that is trained"),
    "device": ("course_lib.trainer", "where training runs"),
    "dtype": ("course_lib.trainer", "training precision"),
    "engine": ("course_lib.trainer", "the rollout engine"),
    "vllm_gpu_memory_utilization": ("course_lib.trainer", "vLLM's memory share"),
    "vllm_kv_cache_gib": ("course_lib.trainer", "vLLM's CPU KV cache"),
    "vllm_max_model_length": ("course_lib.trainer", "vLLM's context window"),
    "vllm_dtype": ("course_lib.trainer", "the sampler's precision"),
    "vllm_model_impl": ("course_lib.trainer", "which model code vLLM runs"),
    "vllm_structured_outputs_regex": ("course_lib.config.rl_config", "guided decoding (needs vLLM to build)"),
    "learning_rate": ("course_lib.run.model_options", "the optimizer"),
    "lr_scheduler_type": ("course_lib.trainer", "the learning-rate schedule"),
    "warmup_steps": ("course_lib.trainer", "the learning-rate schedule"),
    "weight_decay": ("course_lib.run.model_options", "the optimizer"),
    "adam_beta1": ("course_lib.run.model_options", "the optimizer"),
    "adam_beta2": ("course_lib.run.model_options", "the optimizer"),
    "adam_epsilon": ("course_lib.run.model_options", "the optimizer"),
    "max_grad_norm": ("course_lib.trainer", "gradient clipping"),
    "value_learning_rate": ("course_lib.algos.ppo", "the critic's optimizer group"),
    "gradient_checkpointing": ("course_lib.policy", "memory: activations recomputed in the backward"),
    "logprob_kernel": ("course_lib.trainer", "how log-probs are computed (memory and speed)"),
    "logprob_chunk_size": ("course_lib.trainer", "the chunked log-prob path's chunk"),
    "use_lora": ("course_lib.policy", "trains adapters instead of all weights"),
    "lora_r": ("course_lib.policy", "the adapters"),
    "lora_alpha": ("course_lib.policy", "the adapters"),
    "lora_dropout": ("course_lib.policy", "the adapters"),
    "lora_target_modules": ("course_lib.policy", "the adapters"),
    "disable_dropout": ("course_lib.run.model_options", "the policy's dropout"),
    "cast_lm_head_to_fp32": ("course_lib.run.model_options", "the LM head's precision"),
    "mask_truncated_completions": ("course_lib.run.sampled_batches", "the loss mask of truncated completions"),
    "max_tool_calling_iterations": ("course_lib.rollout.tool_run", "multi-turn rollouts' tool rounds"),
    "tool_timeout": ("course_lib.rollout.tool_run", "a slow tool call's outcome, which the model reads"),
    "reward_timeout_s": ("course_lib.run.sampled_batches", "a stalled reward function ends the run"),
    "dynamic_sampling": ("course_lib.run.dynamic_sampling", "which groups train (DAPO)"),
    "max_num_gen_batches": ("course_lib.run.dynamic_sampling", "dynamic sampling's generation rounds"),
    "async_generation": ("course_lib.trainer", "a worker process samples ahead, with stale weights"),
    "max_staleness": ("course_lib.run.async_rollouts", "how stale the worker's sampling weights may be"),
    "weight_sync_steps": ("course_lib.run.async_rollouts", "which weight versions reach the worker"),
    "async_batch_timeout_s": ("course_lib.run.async_rollouts", "how long the trainer waits for a batch from the worker"),
    "async_old_logps": ("course_lib.run.async_rollouts", "the clip's old log-probs of stale samples (sampler's or recomputed)"),
    "sync_ref_model": ("course_lib.trainer", "the reference model moves (TR-DPO)"),
    "ref_model_mixup_alpha": ("course_lib.trainer", "the reference update"),
    "ref_model_sync_steps": ("course_lib.trainer", "the reference update"),
    "use_separate_value_model": ("course_lib.algos.ppo", "the critic's architecture"),
}

# field -> what it changes; no update depends on it
IO_ONLY: dict[str, str] = {
    "output_dir": "where files go",
    "overwrite_output_dir": "whether an earlier run's files may be deleted",
    "logging_steps": "how often samples and the doctor are printed",
    "save_steps": "checkpoint frequency",
    "save_total_limit": "checkpoints kept",
    "log_completions": "printed samples",
    "num_completions_to_print": "printed samples",
    "log_unique_prompts": "printed samples",
    "report_to": "metric sinks",
    "doctor": "findings printed (\"stop\" ends the run with a checkpoint; no update changes)",
    "eval_strategy": "held-out evaluation (never trained on)",
    "eval_steps": "held-out evaluation",
    "num_generations_eval": "held-out evaluation",
}


def _fields(algo: str) -> list[str]:
    return [f.name for f in dataclasses.fields(ALGOS[algo]) if f.init]


@pytest.mark.parametrize("algo", ALGOS)
def test_every_field_is_classified_once(algo):
    places = [{name for name, (algos, _, _) in SHOWN.items() if algo in algos},
              {name for name, (a, _) in REFUSED.items() if a == algo}, set(ACTS_IN), set(IO_ONLY)]
    fields = set(_fields(algo))
    missing = fields - set().union(*places)
    assert not missing, f"{algo}: fields neither shown, refused, acting elsewhere nor IO-only: {sorted(missing)}"
    for i, first in enumerate(places):
        for second in places[i + 1:]:
            assert not (first & second & fields), f"{algo}: classified twice: {sorted(first & second & fields)}"
    unknown = {name for name, (algos, _, _) in SHOWN.items() if algo in algos} - fields
    assert not unknown, f"{algo}: SHOWN names fields {sorted(unknown)} that {ALGOS[algo].__name__} lacks"


# ---------------------------------------------------------------------------------------
# The fingerprint
# ---------------------------------------------------------------------------------------
def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(B, T)
    mask[7, 2:] = 0  # a shorter completion
    old = -torch.rand(B, T, generator=g) * 2 - 0.1
    return dict(
        mask=mask, is_eos=torch.tensor([True, False, True, True, True, True, True, True]),
        per_func=torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.5, 2.0], [1.0, 3.0],
                               [9.0, 0.0], [0.2, 0.1]]),
        old=old, sampling=old + (torch.rand(B, T, generator=g) - 0.5), ref=old - torch.rand(B, T, generator=g),
        fresh=old + (torch.rand(B, T, generator=g) - 0.5) * 1.5, entropies=torch.rand(B, T, generator=g) * 2,
        old_values=torch.randn(B, T, generator=g), values=torch.randn(B, T, generator=g),
    )


def _fingerprint(config) -> dict:
    data, algorithm = _batch(), get_algorithm(config)
    weights = torch.tensor(config.check_reward_weights(2))
    rewards = data["per_func"] @ weights
    scored = ScoredBatch(rewards=rewards, mask=data["mask"], is_eos=data["is_eos"],
                         num_generations=config.num_generations, old_logps=data["old"],
                         ref_logps=data["ref"] if config.beta else None, old_values=data["old_values"],
                         rewards_per_func=data["per_func"])
    advantages = algorithm.advantages(scored, config)
    ratio, correction = None, {}
    if config.effective_vllm_importance_sampling_correction:
        ratio, correction = sampling_correction(
            data["old"], data["sampling"], data["mask"], mode=config.vllm_importance_sampling_mode,
            clip_min=config.vllm_importance_sampling_clip_min, clip_max=config.vllm_importance_sampling_clip_max,
            level=algorithm.sampling_correction_level)
    losses = []
    for scale in (1.0, 1.0, 0.01, 0.01):  # entropy above, then below a target: the adaptive coefficient moves
        logps = data["fresh"].clone().requires_grad_(True)
        values = data["values"].clone().requires_grad_(True)
        micro = MicroBatch(completion_mask=data["mask"], advantages=advantages.advantages, old_logps=data["old"],
                           ref_logps=scored.ref_logps, sampling_ratio=ratio, sampling_logps=data["sampling"],
                           old_values=data["old_values"], returns=advantages.returns)
        out = algorithm.loss(micro, PolicyOutputs(logps=logps, entropies=data["entropies"] * scale, values=values), config,
                             int(data["mask"].sum()))
        out.loss.backward()
        losses.append((out.loss.item(), logps.grad.clone(), None if values.grad is None else values.grad.clone()))
    sampling = SamplingConfig.from_config(config, seed=config.seed)
    return {
        "advantages": (advantages.advantages, advantages.returns, advantages.metrics),
        "losses": losses,
        "correction": (ratio, correction),
        "rewards": rewards,
        "sampling": dataclasses.asdict(sampling),
        "schedule": (config.effective_steps_per_generation, config.effective_generation_batch_size,
                     config.effective_batch_size, config.optimizer_steps_per_generation, config.total_steps(256)),
        "load": load_kwargs(config),
        "prompts": PromptSampler(40, config.seed, shuffle=config.shuffle_dataset).take(40),
    }


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(
            a, b, atol=1e-7, rtol=0, equal_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN metrics on both sides
    return a == b


SHOWN_CASES = [(algo, name) for name, (algos, _, _) in SHOWN.items() for algo in algos]


@pytest.mark.parametrize("algo,name", SHOWN_CASES, ids=[f"{a}-{n}" for a, n in SHOWN_CASES])
def test_changing_the_field_changes_the_run(algo, name):
    _, base, value = SHOWN[name]
    before = make_config(algo, **base)
    after = make_config(algo, **{**base, name: value})
    assert getattr(before, name, None) != value or name == "vllm_importance_sampling_cap"
    assert not _same(_fingerprint(before), _fingerprint(after)), f"{algo}: {name}={value!r} changed nothing"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_field_the_algorithm_ignores_is_refused(name):
    algo, value = REFUSED[name]
    with pytest.raises(ValueError, match=rf"^{name}="):
        make_config(algo, **{name: value})


@pytest.mark.parametrize("name", sorted(ACTS_IN))
def test_a_field_acting_elsewhere_is_read_there(name):
    module, _ = ACTS_IN[name]
    source = open(importlib.util.find_spec(module).origin, encoding="utf-8").read()
    assert re.search(rf"\.{name}\b", source), f"{module} does not read {name}"


@pytest.mark.parametrize("algo", ALGOS)
def test_the_fingerprint_is_deterministic(algo):
    """Two builds of one config give equal fingerprints, so a difference above is the field's doing."""
    settings = {"vllm_importance_sampling_correction": True, "beta": 0.1}
    assert _same(_fingerprint(make_config(algo, **settings)), _fingerprint(make_config(algo, **settings)))


LOSS_FIELD_CASES = [(lt, name) for lt in LOSSES for name in CLIP_FIELDS]
CLIP_CHANGES = {"epsilon": 0.05, "epsilon_high": 0.05, "delta": 1.05}


@pytest.mark.parametrize("loss_type,name", LOSS_FIELD_CASES, ids=[f"{a}-{n}" for a, n in LOSS_FIELD_CASES])
def test_a_clip_field_changes_the_run_of_each_loss_type_that_reads_it_and_is_refused_by_the_others(loss_type, name):
    base = {"loss_type": loss_type, "importance_sampling_level": "sequence" if loss_type == "luspo" else "token"}
    value = CLIP_CHANGES[name]
    if name in LOSSES[loss_type].reads:
        before, after = make_config("grpo", **base), make_config("grpo", **{**base, name: value})
        assert not _same(_fingerprint(before), _fingerprint(after)), f"{loss_type}: {name}={value!r} changed nothing"
    else:
        with pytest.raises(ValueError, match=rf"^{name}={value!r} is never read with loss_type='{loss_type}'.*Fix: "):
            make_config("grpo", **{**base, name: value})


@pytest.mark.parametrize("aggregation", sorted(AGGREGATION_READS))
def test_scale_rewards_changes_the_run_only_where_the_aggregation_reads_it(aggregation):
    base = {"multi_objective_aggregation": aggregation, "reward_weights": [1.0, 3.0], "num_generations": 2}
    if "scale_rewards" in AGGREGATION_READS[aggregation]:
        for value in ("batch", "none"):
            after = make_config("grpo", **{**base, "scale_rewards": value})
            assert not _same(_fingerprint(make_config("grpo", **base)), _fingerprint(after)), value
    else:
        for value in ("batch", "none", False):
            with pytest.raises(ValueError, match=rf"^scale_rewards=.* is never read with "
                                                 rf"multi_objective_aggregation='{aggregation}'"):
                make_config("grpo", **{**base, "scale_rewards": value})
        assert make_config("grpo", **{**base, "scale_rewards": True}).scale_rewards == "group"  # TRL's spelling


def test_rloo_has_no_whiten_rewards_which_it_would_ignore():
    from course_lib.config.tools import UnknownFieldError

    with pytest.raises(UnknownFieldError, match="whiten_rewards"):
        make_config("rloo", whiten_rewards=True)
    assert make_config("ppo", whiten_rewards=True).whiten_rewards is True
