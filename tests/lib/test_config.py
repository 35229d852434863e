"""Tests of course_lib.config: defaults, validation, warnings, overrides, I/O, TRL parity."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import pytest
import torch

from course_lib.algos import GRPOConfig, PPOConfig, RLOOConfig, config_from_dict, make_config
from course_lib.algos.grpo import LOSSES
from course_lib.config import ConfigWarning, RLConfig, apply_overrides, field_docs
from course_lib.config.tools import to_trl_grpo_config

# Fields whose default we take from TRL 1.16's GRPOConfig.
TRL_DEFAULTS = [
    "beta", "num_iterations", "epsilon", "epsilon_high", "delta", "importance_sampling_level",
    "reward_weights", "scale_rewards", "loss_type", "mask_truncated_completions", "temperature", "top_p",
    "min_p", "repetition_penalty", "num_generations", "max_completion_length", "steps_per_generation",
    "generation_batch_size", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "max_steps",
    "num_train_epochs", "warmup_steps", "seed", "logging_steps", "save_steps", "log_completions",
    "num_completions_to_print", "vllm_gpu_memory_utilization", "vllm_max_model_length", "report_to",
    "use_bias_correction_kl", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max", "vllm_importance_sampling_cap", "multi_objective_aggregation",
    "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
    "vespo_lambda_neg", "off_policy_mask_threshold", "top_entropy_quantile", "entropy_coef",
    "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target",
]

GRPO_ONLY = ["loss_type", "scale_rewards", "delta", "importance_sampling_level", "use_bias_correction_kl",
             "top_entropy_quantile", "entropy_coef", "off_policy_mask_threshold", "multi_objective_aggregation"]


def _default(cls, name):
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


@pytest.mark.parametrize("name", TRL_DEFAULTS)
def test_defaults_follow_trl_grpo_config(name):
    import trl

    trl_value = _default(trl.GRPOConfig, name)
    trl_value = getattr(trl_value, "value", trl_value)  # enums such as SchedulerType
    assert _default(GRPOConfig, name) == trl_value


def test_seed_defaults():
    config = GRPOConfig()
    assert (config.beta, config.epsilon, config.delta, config.loss_type) == (0.0, 0.2, None, "dapo")
    assert config.vllm_importance_sampling_mode == "sequence_mask" and config.top_k is None
    assert (config.vllm_importance_sampling_clip_max, config.vllm_importance_sampling_cap) == (3.0, None)
    rloo = RLOOConfig()
    # TRL 1.16's RLOOConfig defaults; the older RLOOTrainer's are the preset older_trl_rloo.
    assert (rloo.num_generations, rloo.beta, rloo.temperature, rloo.num_iterations) == (2, 0.05, 1.0, 1)
    assert (rloo.token_level_kl, rloo.reward_clip_range, rloo.normalize_reward, rloo.normalize_advantage) == (
        False, 10.0, False, False)
    ppo = PPOConfig()
    assert (ppo.vf_coef, ppo.cliprange_value, ppo.gamma, ppo.lam, ppo.num_generations) == (0.1, 0.2, 1.0, 0.95, 1)
    assert ppo.use_separate_value_model is False and ppo.missing_eos_penalty is None


@pytest.mark.parametrize("cls", [RLConfig, GRPOConfig, RLOOConfig, PPOConfig])
def test_every_field_has_a_docstring(cls):
    docs = field_docs(cls)
    assert list(docs) == [f.name for f in dataclasses.fields(cls) if f.init]
    assert [name for name, doc in docs.items() if not doc] == []


def test_field_docs_cite_papers_and_subclasses_win():
    grpo, rloo = field_docs(GRPOConfig), field_docs(RLOOConfig)
    for name, paper in [("epsilon_high", "DAPO"), ("delta", "INTELLECT-2"), ("importance_sampling_level", "GSPO"),
                        ("scale_rewards", "Dr. GRPO"), ("vllm_importance_sampling_correction", "Off-Policy")]:
        assert paper in grpo[name], name
    assert "rloo_k" in rloo["num_generations"] and "rloo_k" not in grpo["num_generations"]
    assert "contradicts" in rloo["token_level_kl"]  # the seed's True-vs-False inconsistency is documented


# --------------------------------------------------------------------------------------
# Validation: every error names the field and the value, and says how to fix it
# --------------------------------------------------------------------------------------
BAD = [
    (dict(num_generations=1), "num_generations=1"),
    (dict(per_device_train_batch_size=4, num_generations=3), "num_generations=3"),
    (dict(steps_per_generation=2, generation_batch_size=16), "steps_per_generation=2"),
    (dict(per_device_train_batch_size=4, generation_batch_size=10, num_generations=2), "generation_batch_size=10"),
    (dict(epsilon=-0.1), "epsilon=-0.1"),
    (dict(epsilon_high=-0.1), "epsilon_high=-0.1"),
    (dict(loss_type="gspo"), "loss_type='gspo'"),
    (dict(importance_sampling_level="seq"), "importance_sampling_level='seq'"),
    (dict(scale_rewards="std"), "scale_rewards='std'"),
    (dict(beta=-0.01), "beta=-0.01"),
    (dict(temperature=0.0), "temperature=0.0"),
    (dict(top_p=0.0), "top_p=0.0"),
    (dict(top_p=1.5), "top_p=1.5"),
    (dict(min_p=1.5), "min_p=1.5"),
    (dict(top_k=-1), "top_k=-1"),
    (dict(num_iterations=0), "num_iterations=0"),
    (dict(delta=1.0), "delta=1.0"),
    (dict(engine="sglang"), "engine='sglang'"),
    (dict(dtype="fp8"), "dtype='fp8'"),
    (dict(lr_scheduler_type="polynomial"), "lr_scheduler_type='polynomial'"),
    (dict(report_to="mlflow"), "report_to='mlflow'"),
    (dict(per_device_train_batch_size=0), "per_device_train_batch_size=0"),
    (dict(repetition_penalty=0.0), "repetition_penalty=0.0"),
    (dict(vllm_importance_sampling_clip_max=0.0), "vllm_importance_sampling_clip_max=0.0"),
    (dict(vllm_importance_sampling_mode="token"), "vllm_importance_sampling_mode='token'"),
    (dict(vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.5),
     "vllm_importance_sampling_clip_min=2.0"),
    (dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=None),
     "vllm_importance_sampling_clip_max"),
    (dict(top_entropy_quantile=0.0), "top_entropy_quantile=0.0"),
    (dict(top_entropy_quantile=1.5), "top_entropy_quantile=1.5"),
    (dict(loss_type="gspo"), "loss_type='gspo'"),
    (dict(multi_objective_aggregation="mean"), "multi_objective_aggregation='mean'"),
    (dict(sapo_temperature_neg=0.0), "sapo_temperature_neg=0.0"),
    (dict(entropy_coef_min=0.5, entropy_coef_max=0.1), "entropy_coef_min=0.5"),
    (dict(off_policy_mask_threshold=-1.0), "off_policy_mask_threshold=-1.0"),
    (dict(loss_type="vespo", engine="vllm"), "vllm_importance_sampling_mode='sequence_mask'"),
    (dict(lora_dropout=1.0), "lora_dropout=1.0"),
    (dict(reward_weights=[]), "reward_weights=[]"),
]


@pytest.mark.parametrize("kwargs, named", BAD, ids=[n for _, n in BAD])
def test_invalid_values_raise_with_field_value_and_fix(kwargs, named):
    with pytest.raises(ValueError) as info:
        GRPOConfig(**kwargs)
    message = str(info.value)
    assert named in message and "Fix:" in message


@pytest.mark.parametrize("cls, kwargs, named", [
    (RLOOConfig, dict(num_mini_batches=2, steps_per_generation=2), "num_mini_batches=2"),
    (RLOOConfig, dict(num_mini_batches=0), "num_mini_batches=0"),
    (RLOOConfig, dict(reward_clip_range=0.0), "reward_clip_range=0.0"),
    (PPOConfig, dict(gamma=1.5), "gamma=1.5"),
    (PPOConfig, dict(lam=-0.1), "lam=-0.1"),
    (PPOConfig, dict(vf_coef=-1.0), "vf_coef=-1.0"),
    (PPOConfig, dict(num_generations=0), "num_generations=0"),
])
def test_algorithm_specific_validation(cls, kwargs, named):
    with pytest.raises(ValueError, match="Fix:") as info:
        cls(**kwargs)
    assert named in str(info.value)


def test_reward_weights_checked_against_the_number_of_functions():
    assert GRPOConfig().check_reward_weights(2) == [1.0, 1.0]
    assert GRPOConfig(reward_weights=[1, 0.5]).check_reward_weights(2) == [1.0, 0.5]
    with pytest.raises(ValueError, match=r"reward_weights=\[1.0, 0.5\] has 2 entries but 3"):
        GRPOConfig(reward_weights=[1.0, 0.5]).check_reward_weights(3)


# --------------------------------------------------------------------------------------
# Warnings
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, fragment", [
    (dict(importance_sampling_level="sequence", loss_type="dapo"), "GSPO"),
    (dict(importance_sampling_level="sequence", loss_type="dr_grpo"), "GSPO"),
    (dict(delta=1.1), "INTELLECT-2"),
    (dict(epsilon_high=0.1), "clip-higher"),
    (dict(vllm_importance_sampling_correction=True), "no effect"),
])
def test_risky_settings_warn(kwargs, fragment):
    with pytest.warns(ConfigWarning, match=fragment) as record:
        GRPOConfig(**kwargs)
    assert record[0].filename == __file__  # the warning points at the line that built the config


@pytest.mark.parametrize("kwargs", [
    dict(importance_sampling_level="sequence", loss_type="grpo"),  # GSPO's own setup
    dict(delta=1.5, epsilon_high=0.28),
    dict(engine="vllm", vllm_importance_sampling_correction=True),
    dict(mask_truncated_completions=True, beta=0.04),
])
def test_sound_settings_do_not_warn(kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        GRPOConfig(**kwargs)


@pytest.mark.parametrize("cls", [GRPOConfig, RLOOConfig, PPOConfig])
def test_defaults_do_not_warn(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls()


# --------------------------------------------------------------------------------------
# Derived values
# --------------------------------------------------------------------------------------
def test_derived_batch_values_follow_trl_resolution():
    config = GRPOConfig(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3)
    assert (config.effective_steps_per_generation, config.effective_generation_batch_size) == (2, 6)
    assert config.steps_per_generation is None  # the argument itself is left as given
    config = GRPOConfig(per_device_train_batch_size=3, num_generations=3, generation_batch_size=12)
    assert config.effective_steps_per_generation == 4
    config = GRPOConfig(per_device_train_batch_size=3, num_generations=4, steps_per_generation=4, num_processes=2)
    assert config.effective_generation_batch_size == 24 and config.unique_prompts_per_generation == 6
    assert config.effective_batch_size == 3 * 1 * 2
    rloo = RLOOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_mini_batches=3)
    assert rloo.effective_steps_per_generation == 6


def test_derived_epsilon_high_correction_and_scale_rewards():
    assert GRPOConfig().effective_vllm_importance_sampling_correction is False
    assert GRPOConfig(engine="vllm").effective_vllm_importance_sampling_correction is True
    assert GRPOConfig(engine="vllm", vllm_importance_sampling_correction=False
                      ).effective_vllm_importance_sampling_correction is False
    assert GRPOConfig(scale_rewards=True).scale_rewards == "group"
    assert GRPOConfig(scale_rewards=False).scale_rewards == "none"
    assert GRPOConfig(top_k=0).top_k is None


def test_configs_are_frozen():
    config = GRPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.beta = 0.1  # type: ignore[misc]
    assert dataclasses.replace(config, epsilon_high=0.3).epsilon_high == 0.3


# --------------------------------------------------------------------------------------
# Overrides, aliases, factory
# --------------------------------------------------------------------------------------
def test_apply_overrides_coerces_each_type():
    config = apply_overrides(GRPOConfig(), [
        "beta=0.04", "num_iterations=2", "mask_truncated_completions=true", "epsilon_high=0.28",
        "reward_weights=1.0,0.5", "loss_type=dr_grpo", "top_k=50", "min_p=none", "scale_rewards=false",
        "--lora-target-modules=q_proj,v_proj", "max_prompt_length=128",
    ])
    assert config.beta == 0.04 and config.num_iterations == 2 and config.mask_truncated_completions is True
    assert config.epsilon_high == 0.28 and config.reward_weights == [1.0, 0.5]
    assert config.loss_type == "dr_grpo" and config.top_k == 50 and config.min_p is None
    assert config.scale_rewards == "none" and config.lora_target_modules == ["q_proj", "v_proj"]
    assert config.max_prompt_length == 128
    assert apply_overrides(config, ["epsilon_high=None"]).epsilon_high is None
    assert apply_overrides(config, {"beta": 0.1, "seed": "7"}).seed == 7


def test_apply_overrides_errors():
    with pytest.raises(ValueError, match="Did you mean 'epsilon_high'"):
        apply_overrides(GRPOConfig(), ["epsilon_hihg=0.3"])
    with pytest.raises(ValueError, match="num_iterations='two' does not fit"):
        apply_overrides(GRPOConfig(), ["num_iterations=two"])
    with pytest.raises(ValueError, match="loss_type='gspo' does not fit"):
        apply_overrides(GRPOConfig(), ["loss_type=gspo"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(GRPOConfig(), ["beta"])
    with pytest.raises(ValueError, match="computed from the other fields"):
        apply_overrides(GRPOConfig(), ["effective_steps_per_generation=3"])
    with pytest.raises(ValueError, match="num_generations=5"):  # re-validated after the change
        apply_overrides(GRPOConfig(), ["num_generations=5"])


def test_seed_aliases():
    rloo = make_config("rloo", rloo_k=4, kl_coef=0.03, num_ppo_epochs=2, cliprange=0.1,
                       per_device_train_batch_size=8)
    assert (rloo.num_generations, rloo.beta, rloo.num_iterations, rloo.epsilon) == (4, 0.03, 2, 0.1)
    assert (rloo.rloo_k, rloo.kl_coef, rloo.num_ppo_epochs, rloo.cliprange) == (4, 0.03, 2, 0.1)
    assert apply_overrides(rloo, ["rloo_k=8", "normalize_advantages=true"]).normalize_advantage is True
    assert make_config("ppo", kl_coef=0.2).beta == 0.2
    with pytest.raises(ValueError, match="given twice"):
        make_config("rloo", rloo_k=4, num_generations=4)
    with pytest.raises(ValueError, match="no field 'rloo_k'"):
        make_config("grpo", rloo_k=4)  # GRPO speaks of num_generations only
    with pytest.raises(ValueError, match="Did you mean 'rloo'"):
        make_config("rlo")
    assert isinstance(make_config("GRPO"), GRPOConfig)


# --------------------------------------------------------------------------------------
# Serialisation and TRL
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [
    GRPOConfig(epsilon_high=0.28, reward_weights=[1.0, 2.0], scale_rewards=False, num_generations=4,
               per_device_train_batch_size=4, steps_per_generation=3),
    RLOOConfig(num_mini_batches=2, normalize_reward=True, missing_eos_penalty=1.0),
    PPOConfig(gamma=0.99, lam=0.9, generation_batch_size=16),
    RLConfig(),
], ids=["grpo", "rloo", "ppo", "base"])
def test_dict_roundtrip_through_json(config):
    data = json.loads(json.dumps(config.to_dict()))
    assert data["algo"] == config.algo
    assert "effective_steps_per_generation" not in data
    rebuilt = type(config).from_dict(data) if type(config) is RLConfig else config_from_dict(data)
    assert type(rebuilt) is type(config) and rebuilt == config


def test_from_dict_rejects_wrong_class_and_unknown_keys():
    with pytest.raises(ValueError, match="does not match GRPOConfig"):
        GRPOConfig.from_dict(PPOConfig().to_dict())
    with pytest.raises(ValueError, match="Did you mean 'beta'"):
        GRPOConfig.from_dict({"algo": "grpo", "betta": 0.1})


def test_to_trl_grpo_config_carries_the_same_values():
    config = GRPOConfig(
        output_dir="/tmp/course-trl-parity", beta=0.04, epsilon=0.1, epsilon_high=0.28, delta=1.5,
        num_iterations=2, importance_sampling_level="sequence", loss_type="grpo", scale_rewards="batch",
        reward_weights=[1.0, 0.5], mask_truncated_completions=True, temperature=0.9, top_p=0.95, top_k=20,
        min_p=0.05, repetition_penalty=1.1, per_device_train_batch_size=6, gradient_accumulation_steps=2,
        num_generations=3, steps_per_generation=4, max_completion_length=64, learning_rate=3e-4,
        lr_scheduler_type="cosine", warmup_steps=5, max_steps=10, seed=3, dtype="float32",
        vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=2.5,
    )
    trl_config = config.to_trl_grpo_config()
    for name in ("beta", "epsilon", "epsilon_high", "delta", "num_iterations", "importance_sampling_level",
                 "loss_type", "scale_rewards", "reward_weights", "mask_truncated_completions", "temperature",
                 "top_p", "top_k", "min_p", "repetition_penalty", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "num_generations", "max_completion_length", "learning_rate",
                 "warmup_steps", "max_steps", "seed"):
        assert getattr(trl_config, name) == getattr(config, name), name
    assert trl_config.steps_per_generation == config.effective_steps_per_generation == 4
    assert trl_config.generation_batch_size == config.effective_generation_batch_size == 24
    assert trl_config.lr_scheduler_type.value == "cosine"
    assert (trl_config.bf16, trl_config.fp16, trl_config.use_vllm) == (False, False, False)
    assert trl_config.vllm_importance_sampling_correction is False
    assert trl_config.vllm_importance_sampling_mode == "token_truncate"
    assert trl_config.vllm_importance_sampling_clip_max == 2.5
    new = GRPOConfig(output_dir="/tmp/course-trl-parity", dtype="float32", loss_type="cispo", epsilon_high=5.0,
                     sapo_temperature_neg=1.2, vespo_k_pos=1.5, off_policy_mask_threshold=0.4,
                     top_entropy_quantile=0.2, entropy_coef=0.01, use_adaptive_entropy=True, entropy_target=0.3,
                     multi_objective_aggregation="normalize_then_sum", vllm_importance_sampling_clip_min=0.5)
    trl_new = new.to_trl_grpo_config()
    for name in ("loss_type", "epsilon_high", "sapo_temperature_neg", "vespo_k_pos", "off_policy_mask_threshold",
                 "top_entropy_quantile", "entropy_coef", "use_adaptive_entropy", "entropy_target",
                 "multi_objective_aggregation", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
                 "vllm_importance_sampling_clip_max"):
        assert getattr(trl_new, name) == getattr(new, name), name
    # TRL 1.16 resolves the same epsilon_high fallback
    assert GRPOConfig(output_dir="/tmp/course-trl-parity", dtype="float32").to_trl_grpo_config().epsilon_high is None
    with pytest.raises(ValueError, match="GRPOConfig"):
        to_trl_grpo_config(RLOOConfig())


# --------------------------------------------------------------------------------------
# Each algorithm's config holds only the fields it reads
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["rloo", "ppo"])
@pytest.mark.parametrize("name", GRPO_ONLY)
def test_grpo_only_fields_are_refused_by_the_other_algorithms(algo, name):
    value = {"loss_type": "grpo", "scale_rewards": "none", "delta": 2.0, "importance_sampling_level": "sequence",
             "use_bias_correction_kl": False, "top_entropy_quantile": 0.2, "entropy_coef": 0.01,
             "off_policy_mask_threshold": 0.5, "multi_objective_aggregation": "normalize_then_sum"}[name]
    with pytest.raises(ValueError, match=f"has no field {name!r}"):
        make_config(algo, **{name: value})
    with pytest.raises(ValueError, match=f"has no field {name!r}"):
        apply_overrides(make_config(algo), [f"{name}={value}"])
    assert name in {f.name for f in dataclasses.fields(GRPOConfig)}


def test_max_steps_or_epochs():
    # A generation batch is 40 x 2 = 80 completions = 20 prompts of G = 4 and gives 2 optimizer
    # steps (steps_per_generation 2 over accumulation 1).
    config = make_config("grpo", per_device_train_batch_size=40, num_generations=4, steps_per_generation=2,
                         num_train_epochs=1.5)
    assert config.max_steps == -1 and config.unique_prompts_per_generation == 20
    # 20 prompts per generation batch: 4 whole batches in 95 prompts; 2 * 1.5 * 4 = 12 steps
    assert config.total_steps(95) == 12
    assert make_config("grpo", max_steps=7).total_steps(95) == 7
    with_replays = make_config("grpo", per_device_train_batch_size=8, num_generations=4, num_iterations=3,
                               gradient_accumulation_steps=2, num_train_epochs=1.0)
    # 4 prompts a batch, 2 micro-batches replayed 3 times = 3 optimizer steps a batch; 10 batches
    assert with_replays.total_steps(40) == 30
    with pytest.raises(ValueError, match="max_steps=0"):
        make_config("grpo", max_steps=0)
    with pytest.raises(ValueError, match="num_train_epochs=0"):
        make_config("grpo", num_train_epochs=0)


def test_the_deprecated_cap_sets_clip_max_with_a_warning():
    with pytest.warns(ConfigWarning, match="vllm_importance_sampling_cap=2.0 is deprecated"):
        config = GRPOConfig(vllm_importance_sampling_cap=2.0)
    assert (config.vllm_importance_sampling_clip_max, config.vllm_importance_sampling_cap) == (2.0, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the saved form no longer carries the alias
        assert config_from_dict(config.to_dict()) == config


def test_ppo_value_learning_rate_defaults_to_the_policy_rate_and_refuses_non_positive():
    assert make_config("ppo").value_learning_rate is None
    assert make_config("ppo", value_learning_rate=1e-3).value_learning_rate == 1e-3
    with pytest.raises(ValueError, match="value_learning_rate"):
        make_config("ppo", value_learning_rate=0.0)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_every_literal_field_refuses_a_value_its_annotation_does_not_list(algo):
    """The annotation is the list of allowed values: no second tuple to keep in step."""
    import dataclasses
    import typing

    from course_lib.algos import ALGORITHMS
    from course_lib.config.validation import literal_choices

    config_class = ALGORITHMS[algo].config_class
    hints = typing.get_type_hints(config_class)
    literal_fields = {spec.name: literal_choices(hints[spec.name]) for spec in dataclasses.fields(config_class)
                      if spec.init and literal_choices(hints[spec.name])}
    assert {"engine", "dtype", "device", "lr_scheduler_type", "report_to", "eval_strategy"} <= set(literal_fields)
    for name, allowed in literal_fields.items():
        with pytest.raises(ValueError, match=rf"^{name}='not-a-choice' is not a known choice\. Fix: use one of "
                                             rf"{re.escape(', '.join(allowed))}\.$"):
            make_config(algo, **{name: "not-a-choice"})


def test_the_grpo_loss_types_are_the_config_annotation():
    import typing

    from course_lib.algos.grpo import LOSS_TYPES, GRPOConfig
    from course_lib.config.validation import literal_choices

    assert literal_choices(typing.get_type_hints(GRPOConfig)["loss_type"]) == LOSS_TYPES


def test_the_loss_reads_every_grpo_loss_field_by_one_list_and_the_shapes_default_as_in_the_table():
    import inspect

    from course_lib.algos.grpo import CONFIG_LOSS_FIELDS, KNOBS, policy_loss

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    params = set(inspect.signature(policy_loss).parameters)
    assert set(CONFIG_LOSS_FIELDS) <= set(fields)
    assert set(CONFIG_LOSS_FIELDS) <= params | set(KNOBS)
    # The only config fields policy_loss takes otherwise: the schedule's effective value and the
    # entropy coefficient the adaptive controller applies.
    assert (params & set(fields)) - set(CONFIG_LOSS_FIELDS) == {"steps_per_generation", "entropy_coef"}
    assert {name: fields[name].default for name in KNOBS} == KNOBS


@pytest.mark.parametrize("loss_type", [name for name, spec in LOSSES.items() if spec.level])
def test_a_loss_type_built_for_one_ratio_level_warns_at_the_other(loss_type):
    level = LOSSES[loss_type].level  # the table's word; the config's warning must agree with it
    other = "token" if level == "sequence" else "sequence"
    with pytest.warns(ConfigWarning, match=rf"loss_type='{loss_type}'.*importance_sampling_level='{level}'"):
        GRPOConfig(loss_type=loss_type, importance_sampling_level=other)


def test_ppo_refuses_epsilon_high_which_its_symmetric_clip_would_ignore():
    with pytest.raises(ValueError, match=r"^epsilon_high=0\.28 has no effect on PPO.*Fix: leave epsilon_high unset"):
        make_config("ppo", epsilon_high=0.28)
    assert make_config("rloo", epsilon_high=0.28).epsilon_high == 0.28  # RLOO's sequence clip reads it


def test_rloo_refuses_token_level_kl_which_its_one_advantage_per_completion_would_ignore():
    with pytest.raises(ValueError, match=r"^token_level_kl=True has no effect on RLOO.*Fix: leave token_level_kl=False"):
        make_config("rloo", token_level_kl=True)
    with pytest.raises(ValueError, match="token_level_kl=True"):
        apply_overrides(make_config("rloo"), ["token_level_kl=true"])
    assert make_config("rloo", token_level_kl=False).token_level_kl is False  # the older trainer's default


def test_logprob_chunk_size_is_refused_where_the_kernel_does_not_read_it():
    assert make_config("grpo", logprob_kernel="chunked", logprob_chunk_size=256).logprob_chunk_size == 256
    for kernel in ("triton", "full"):
        with pytest.raises(ValueError, match=rf"^logprob_chunk_size=256 is not read with logprob_kernel='{kernel}'"):
            make_config("grpo", logprob_kernel=kernel, logprob_chunk_size=256)


def test_num_completions_to_print_none_prints_every_row():
    from course_lib.run.history import format_samples

    rows = [f"p{i}" for i in range(6)], [f"c{i}" for i in range(6)], [1.0] * 6, [0.5] * 6
    assert len(format_samples(*rows, limit=None).splitlines()) == 1 + 6  # header + every row
    assert len(format_samples(*rows, limit=2).splitlines()) == 1 + 2


def test_runtime_lists_of_choices_are_read_from_the_config_literals():
    import typing

    from course_lib.algos.grpo import group_advantages, policy_loss
    from course_lib.ops.importance import IS_MODES
    from course_lib.rollout import ENGINES
    from course_lib.config.validation import field_choices
    from course_lib.widgets.advantage import SCALINGS

    base, grpo = typing.get_type_hints(RLConfig), typing.get_type_hints(GRPOConfig)
    assert ENGINES == typing.get_args(base["engine"]) == ("hf", "vllm")
    assert IS_MODES == typing.get_args(base["vllm_importance_sampling_mode"])
    assert SCALINGS == typing.get_args(typing.get_args(grpo["scale_rewards"])[0]) == ("group", "batch", "none")
    assert field_choices(GRPOConfig, "importance_sampling_level") == ("token", "sequence")
    with pytest.raises(TypeError, match="not a field annotated with a Literal"):
        field_choices(RLConfig, "beta")
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    for mode in SCALINGS:  # every listed mode runs, and a name outside the list is refused with the list
        group_advantages(rewards, 2, scale_rewards=mode)
    with pytest.raises(ValueError, match="'group', 'batch', 'none'"):
        group_advantages(rewards, 2, scale_rewards="groups")
    logps, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="use one of token, sequence"):
        policy_loss(logps, None, torch.ones(2), mask, importance_sampling_level="seq")


def test_sampling_config_from_config_carries_every_sampling_field():
    from course_lib.rollout import SamplingConfig

    config = make_config("grpo", temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1,
                         max_completion_length=64, max_prompt_length=128, generation_kwargs={"do_sample": True},
                         chat_template_kwargs={"enable_thinking": False})
    sampled = SamplingConfig.from_config(config, seed=7, first_row=3)
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.min_p, sampled.repetition_penalty) == (
        0.7, 0.9, 20, 0.05, 1.1)
    assert (sampled.max_tokens, sampled.max_prompt_length, sampled.seed, sampled.first_row) == (64, 128, 7, 3)
    assert sampled.generation_kwargs == {"do_sample": True}
    assert sampled.chat_template_kwargs == {"enable_thinking": False}
    greedy = SamplingConfig.from_config(config, seed=0, greedy=True)
    assert greedy.greedy and (greedy.top_p, greedy.top_k, greedy.min_p, greedy.repetition_penalty) == (
        1.0, None, None, 1.0)
    assert (greedy.max_tokens, greedy.max_prompt_length) == (64, 128)


def test_one_moving_average_serves_the_toy_plots_and_the_dashboard():
    import numpy as np

    from course_lib.toy.plots import moving_average
    from course_lib.widgets import dashboard

    assert dashboard.moving_average is moving_average
    np.testing.assert_allclose(moving_average([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])  # trailing mean
