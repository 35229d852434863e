"""The doctor's rules on hand-built histories: each fires on its failure and stays silent on a
healthy-looking run (values and thresholds worked by hand from the rule's documented reason)."""

import math

import pytest

from course_lib.doctor import RULES, SEVERITIES, Doctor, diagnose, format_report


def rows(n=40, **series):
    """``n`` metric rows; each keyword is a constant, a list (one value a row) or f(step)."""
    out = []
    for i in range(n):
        row = {"step": i + 1}
        for key, value in series.items():
            row[key] = value[i] if isinstance(value, list) else value(i) if callable(value) else value
        out.append(row)
    return out


# A run that learns: the reward rises, entropy drifts down a little, losses and gradients are O(1).
HEALTHY = dict(loss=lambda i: 0.05 * math.sin(i), grad_norm=2.0, reward=lambda i: 0.3 + 0.004 * i,
               reward_std=0.4, frac_reward_zero_std=0.1, entropy=lambda i: 0.6 - 0.002 * i,
               learning_rate=3e-5, **{"completions/clipped_ratio": 0.0, "completions/mean_length": 4.0,
                                      "rewards/correct/mean": 0.3, "rewards/correct/std": 0.45,
                                      "clip_ratio/region_mean": 0.0})


def fired(history, config=None, only=None):
    return {f.rule: f for f in diagnose(history, config, rules=only)}


def test_every_rule_is_documented():
    assert len(RULES) >= 12
    for spec in RULES.values():
        assert spec.severity in SEVERITIES and spec.signals and spec.summary
        for value, why in spec.thresholds.values():
            assert isinstance(value, (int, float)) and len(why) > 20


def test_a_healthy_run_fires_nothing_above_info():
    found = fired(rows(**HEALTHY), {"num_generations": 8, "learning_rate": 3e-5})
    assert [f for f in found.values() if f.severity != "info"] == []


def test_loss_near_zero_with_a_gradient_is_info():
    found = fired(rows(**{**HEALTHY, "loss": 1e-9}))
    assert found["loss_near_zero_is_normal"].severity == "info"
    assert "loss_near_zero_is_normal" not in fired(rows(**HEALTHY))


@pytest.mark.parametrize("extra, config, cause", [
    ({"frac_reward_zero_std": 1.0}, {}, "every group's rewards are equal"),
    ({"frac_reward_zero_std": 0.0, "completions/clipped_ratio": 1.0}, {"mask_truncated_completions": True},
     "mask_truncated_completions"),
    ({"frac_reward_zero_std": 0.0}, {"lora_target_modules": "all-linear"}, "requires_grad"),
    ({"frac_reward_zero_std": 0.0, "reward": None}, {}, "no sample was scored"),  # as a run whose rewards are all None logs
])
def test_no_learning_signal_names_its_cause(extra, config, cause):
    found = fired(rows(**{**HEALTHY, "loss": 0.0, "grad_norm": 0.0, **extra}), config)
    assert cause in found["no_learning_signal"].message
    # Two zero steps after normal ones are not enough (the rule asks for three in a row).
    history = rows(**HEALTHY)
    for row in history[-2:]:
        row.update(loss=0.0, grad_norm=0.0)
    assert "no_learning_signal" not in fired(history)


def test_zero_spread_groups_suggests_the_group_size_from_the_success_rate():
    # A 0/1 reward at success rate 0.9: its batch std is sqrt(0.9 x 0.1) = 0.3.
    found = fired(rows(**{**HEALTHY, "frac_reward_zero_std": 0.8, "reward": 0.9, "rewards/correct/mean": 0.9,
                          "rewards/correct/std": 0.3}), {"num_generations": 4})
    message = found["zero_spread_groups"].message
    # p = 0.9: 0.9^G + 0.1^G <= 0.25 first at G = 14 (0.9^13 = 0.254, 0.9^14 = 0.229).
    assert "too easy" in message and "num_generations=14" in message and "dynamic sampling" in message
    assert "zero_spread_groups" not in fired(rows(**{**HEALTHY, "frac_reward_zero_std": 0.5}))


def test_zero_spread_groups_reads_group_baselines_only():
    # Equal rewards in a group zero GRPO's and RLOO's advantages, not a critic's (PPO's GAE).
    alike = rows(**{**HEALTHY, "frac_reward_zero_std": 0.8, "reward": 0.2})
    assert "zero_spread_groups" in fired(alike, {"algo": "grpo", "num_generations": 4})
    assert "zero_spread_groups" in fired(alike, {"algo": "rloo", "num_generations": 4})
    assert "zero_spread_groups" not in fired(alike, {"algo": "ppo", "num_generations": 4})


def test_truncation_doubles_the_completion_budget():
    found = fired(rows(**{**HEALTHY, "completions/clipped_ratio": 0.4}), {"max_completion_length": 16})
    assert "max_completion_length=32" in found["completions_truncated"].message
    never_ends = fired(rows(**{**HEALTHY, "completions/clipped_ratio": 1.0}))
    assert "end-of-sequence" in never_ends["completions_truncated"].message


def test_a_dead_reward_function_is_named():
    found = fired(rows(**{**HEALTHY, "rewards/format/mean": 0.0, "rewards/format/std": 0.0}))
    assert "format (always 0)" in found["dead_reward_function"].message
    assert "correct" not in found["dead_reward_function"].evidence


def test_a_dominant_reward_function_is_named_with_the_weights():
    history = rows(**{**HEALTHY, "rewards/length/mean": 50.0, "rewards/length/std": 20.0})
    found = fired(history, {"reward_weights": None})
    # spreads 0.45 and 20: length holds 20 / 20.45 = 98% of the weighted spread.
    assert found["dominant_reward_function"].evidence["dominant"] == "length"
    # Weights that even the spreads (0.45 * 40 = 18 vs 20 * 1) leave no dominant function.
    assert "dominant_reward_function" not in fired(history, {"reward_weights": [40.0, 1.0]})


def test_reward_hacking_from_held_out_accuracy_and_from_length():
    history = rows(**HEALTHY)
    for row in history[::10]:
        row["eval/greedy_accuracy"] = 0.40 - row["step"] * 0.001  # falls while reward rises by 0.16
    assert "sorting" in fired(history)["reward_hacking"].message
    # A function that pays 0.1 per token (no 0/1 rate) rising with the length: hacking.
    lengths = rows(**{**HEALTHY, "completions/mean_length": lambda i: 10.0 + 0.5 * i,
                      "rewards/length/mean": lambda i: 0.1 * (10.0 + 0.5 * i), "rewards/length/std": 0.2})
    found = fired(lengths)["reward_hacking"]
    assert found.evidence["correlation"] > 0.99 and found.evidence["length_payer"] == "length"
    # R1-Zero: a 0/1 correctness reward (std sqrt(p(1-p))) rising with longer answers is learning.
    p = lambda i: 0.3 + 0.004 * i  # noqa: E731
    r1_zero = rows(**{**HEALTHY, "completions/mean_length": lambda i: 10.0 + 0.5 * i, "rewards/correct/mean": p,
                      "rewards/correct/std": lambda i: math.sqrt(p(i) * (1 - p(i)))})
    assert "reward_hacking" not in fired(r1_zero)
    learning = rows(**HEALTHY)
    for row in learning[::10]:
        row["eval/greedy_accuracy"] = 0.30 + row["step"] * 0.004  # held-out rises with the reward
    assert "reward_hacking" not in fired(learning)


def test_entropy_collapse_and_explosion():
    flat_reward = {**HEALTHY, "reward": lambda i: 0.3 + 0.02 * (-1) ** i}
    collapse = fired(rows(**{**flat_reward, "entropy": lambda i: 0.6 * 0.9 ** i}))
    assert "entropy_collapse" in collapse and "entropy_explosion" not in collapse
    # The same fall after the reward rose by 0.16 (HEALTHY's 0.3 -> 0.46): a learned task, not a collapse.
    assert "entropy_collapse" not in fired(rows(**{**HEALTHY, "entropy": lambda i: 0.6 * 0.9 ** i}))
    greedy = fired(rows(**{**HEALTHY, "entropy": 0.06}), {"temperature": 0.05})
    assert "temperature=0.05" in greedy["entropy_collapse"].message
    exploding = {**flat_reward, "entropy": lambda i: 0.6 + 0.1 * i}
    explosion = fired(rows(**exploding))
    assert explosion["entropy_explosion"].severity == "error"
    clipped = fired(rows(**exploding), {"learning_rate": 1e-2, "max_grad_norm": 1.0})["entropy_explosion"].message
    assert "try 0.001" in clipped and "max_grad_norm" not in clipped  # already clipped at 1.0: not advised again
    unclipped = fired(rows(**exploding), {"max_grad_norm": 100.0})["entropy_explosion"].message
    assert "max_grad_norm=1.0 (now max_grad_norm=100.0)" in unclipped


def test_entropy_rising_with_a_reward_that_rose_is_left_to_the_reward_rules():
    # The same doubling of entropy while the reward rises 0.30 -> 0.46 (each window's mean is exact:
    # a straight line of slope 0.004 has a standard error of 0.004 per window, the rise is 0.12 between the first and
    # last 10 rows): a reward that pays for spreading mass (a length score), not a step too large.
    rising = rows(**{**HEALTHY, "entropy": lambda i: 0.6 + 0.1 * i})
    assert "entropy_explosion" not in fired(rising)
    # Reward falling while entropy explodes (learning_rate=1e-2): the optimizer finding stays.
    falling = rows(**{**HEALTHY, "reward": lambda i: 0.3 - 0.006 * i, "entropy": lambda i: 0.6 + 0.1 * i})
    assert "entropy_explosion" in fired(falling)


@pytest.mark.parametrize("key, value, quiet", [("clip_ratio/region_mean", 0.35, 0.1),
                                              ("policy/approxkl_avg", 0.2, 0.02)])
def test_policy_moving_too_fast(key, value, quiet):
    found = fired(rows(**{**HEALTHY, key: value}), {"learning_rate": 3e-3, "num_iterations": 4})
    assert "learning_rate=0.003" in found["policy_moves_too_fast"].message
    assert "try 0.0003" in found["policy_moves_too_fast"].message  # the value to set, not only the current one
    assert "num_iterations=4 -> 1" in found["policy_moves_too_fast"].message
    assert "policy_moves_too_fast" not in fired(rows(**{**HEALTHY, key: quiet}))


def test_policy_moving_too_fast_on_policy_does_not_suggest_one_pass_again():
    found = fired(rows(**{**HEALTHY, "clip_ratio/region_mean": 0.35}), {"learning_rate": 1e-2, "num_iterations": 1})
    message = found["policy_moves_too_fast"].message
    assert "try 0.001" in message and "num_iterations" not in message


def test_policy_moving_too_fast_from_the_kl_to_the_reference():
    # KL to the reference 0 at the first step (policy == reference), then 0.8 nats per token.
    runaway = rows(**{**HEALTHY, "kl": lambda i: 0.0 if i == 0 else 0.8})
    found = fired(runaway, {"beta": 0.04, "learning_rate": 3e-3})["policy_moves_too_fast"]
    assert "KL to the reference 0.000 -> 0.800" in found.message and "beta=0.04" in found.message
    assert "larger beta" in found.message and found.evidence["kl_jump"] == pytest.approx(0.8)
    # A TRL log (no config) logs kl only with beta != 0: the same rows fire.
    assert "policy_moves_too_fast" in fired(runaway, {})
    # Without a penalty (beta=0) nothing asks the policy to stay near the reference.
    assert "policy_moves_too_fast" not in fired(runaway, {"beta": 0.0})
    # A rise of 0.4 nats (0.1 -> 0.5) is under the threshold; the tiny GRPO preset's own kl
    # (beta=0.04) stays at 0.003-0.09 per step.
    drift = rows(**{**HEALTHY, "kl": lambda i: 0.1 + 0.4 * i / 39})
    assert "policy_moves_too_fast" not in fired(drift, {"beta": 0.04})
    # A rise of 0.7 within 10 steps is a jump; the same 0.7 spread over 1,700 steps (logged every
    # 10) is cumulative drift of a long run, not a step that is too large.
    jump = rows(**{**HEALTHY, "kl": lambda i: 0.1 if i < 20 else 0.1 + 0.07 * min(i - 19, 10)})
    assert "policy_moves_too_fast" in fired(jump, {"beta": 0.04})
    slow = [dict(r, step=10 * r["step"]) for r in rows(170, **{**HEALTHY, "kl": lambda i: 0.1 + 0.7 * i / 169})]
    assert "policy_moves_too_fast" not in fired(slow, {"beta": 0.04})


def test_nothing_moves_needs_a_tiny_learning_rate_and_flat_curves():
    still = dict(HEALTHY, reward=lambda i: 0.3 + 0.05 * (-1) ** i, entropy=lambda i: 0.6 + 0.01 * (-1) ** i,
                 learning_rate=1e-9)
    found = fired(rows(**still), {"use_lora": True})
    assert "lora_target_modules" in found["nothing_moves"].message
    # 40 steps x 1e-9 = 4e-8: the bound in the message.
    assert found["nothing_moves"].evidence["total_learning_rate"] == pytest.approx(4e-8)
    assert "nothing_moves" not in fired(rows(**{**still, "learning_rate": 3e-5}))  # 40 x 3e-5 = 1.2e-3
    assert "nothing_moves" not in fired(rows(**{**still, "reward": lambda i: 0.3 + 0.01 * i}))
    assert "nothing_moves" not in fired(rows(n=20, **still))


def test_sampler_mismatch_level_and_jump():
    key = "sampling/sampling_logp_difference/mean"
    assert "sampler_mismatch" in fired(rows(**{**HEALTHY, key: 0.3}))
    assert "sampler_mismatch" not in fired(rows(**{**HEALTHY, key: 0.02}))
    jump = fired(rows(**{**HEALTHY, key: lambda i: 0.6 if i == 20 else 0.01}))
    assert jump["sampler_mismatch"].evidence["jump_steps"] == [21]


def test_sampler_mismatch_from_the_importance_ratio_range():
    def ratios(ranges, gap=None):
        # Without the mean log-prob gap (a log that has only the ratio's range): the extremes speak.
        history = rows(**{**HEALTHY, **({"sampling/sampling_logp_difference/mean": gap} if gap else {})})
        for row, (low, high) in zip(history, ranges):
            row["sampling/importance_sampling_ratio/min"], row["sampling/importance_sampling_ratio/max"] = low, high
        return history

    # Inside [0.5, 2] at the first step (same weights), then a min near 0 at every step: fires.
    stale = fired(ratios([(0.9, 1.1)] + [(0.01, 1.6)] * 39))["sampler_mismatch"]
    assert "importance ratio outside [0.5, 2] in 100% of the last 10 steps" in stale.message
    assert stale.evidence["ratio_outside_share"] == 1.0
    # 8 of the last 10 steps outside is the threshold (0.8); 7 of 10 is not sustained.
    eight = [(0.9, 1.1)] * 30 + [(0.9, 3.0)] * 8 + [(0.9, 1.1)] * 2
    assert "sampler_mismatch" in fired(ratios(eight))
    seven = [(0.9, 1.1)] * 30 + [(0.9, 3.0)] * 7 + [(0.9, 1.1)] * 3
    assert "sampler_mismatch" not in fired(ratios(seven))
    # Inside throughout, or outside from the first step (a bf16 sampler's extremes over many
    # tokens: a dtype gap, read from the mean log-prob gap instead): quiet.
    assert "sampler_mismatch" not in fired(ratios([(0.7, 1.4)] * 40))
    assert "sampler_mismatch" not in fired(ratios([(0.2, 12.0)] * 40))
    # With the mean gap logged and small (0.02: a bfloat16 sampler, as the demo's 0.015), the
    # batch's extreme token decides nothing: the same ranges are quiet.
    assert "sampler_mismatch" not in fired(ratios([(0.9, 1.1)] + [(0.01, 1.6)] * 39, gap=0.02))
    # Fewer than 5 steps with the statistics: too few to call sustained.
    assert "sampler_mismatch" not in fired(ratios([(0.9, 1.1)] + [(0.01, 1.6)] * 3))


def test_generation_share_advises_the_engine():
    history = rows(**{**HEALTHY, "timing/generation_s": 0.8, "timing/step_s": 1.0})
    assert "engine='vllm'" in fired(history, {"engine": "hf"})["generation_dominates"].message
    assert "engine='vllm'" not in fired(history, {"engine": "vllm"})["generation_dominates"].message
    assert "generation_dominates" not in fired(rows(**{**HEALTHY, "timing/generation_s": 0.5, "timing/step_s": 1.0}))


def test_the_engine_advice_quotes_the_speed_ups_the_readme_measured():
    import re
    from pathlib import Path

    from course_lib.presets import fast_engine_settings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| rollouts |"))
    fp32, bf16 = re.search(r"([\d.]+)× in float32, ([\d.]+)× with a bfloat16 sampler", row).groups()
    history = rows(**{**HEALTHY, "timing/generation_s": 0.8, "timing/step_s": 1.0})
    for text in (fired(history, {"engine": "hf"})["generation_dominates"].message, fast_engine_settings.__doc__):
        assert f"{fp32}x" in text and f"{bf16}x" in text, text
        assert not set(re.findall(r"([\d.]+)x faster", text)) - {fp32, bf16}, text  # no other figure


def test_non_finite_values_name_the_step():
    history = rows(**HEALTHY)
    history[7]["grad_norm"] = None  # the logger writes NaN/inf as null
    found = fired(history)["non_finite_values"]
    assert found.severity == "error" and found.evidence == {"step": 8, "keys": ["grad_norm"]}
    assert "learning rate" in found.message
    history = rows(**HEALTHY)
    history[4]["reward"] = None  # every reward function returned None for the batch: a NaN total
    found = fired(history)["non_finite_values"]
    assert found.evidence == {"step": 5, "keys": ["reward"]} and "no completion of that batch was scored" in found.message
    assert "learning rate" not in found.message


def test_the_live_doctor_reports_each_finding_once():
    doctor, history, reports = Doctor({"max_completion_length": 8}), rows(**HEALTHY), []
    for row in history[10:]:
        row["completions/clipped_ratio"] = 0.5
    for end in range(1, len(history) + 1):
        reports += doctor.check(history[:end])
    truncated = [f for f in reports if f.rule == "completions_truncated"]
    # The last 10 rows average 4 x 0.5 / 10 = 0.2 at step 14 (not above), 0.25 at step 15.
    assert len(truncated) == 1 and truncated[0].step == 15
    row = truncated[0].as_row()
    assert row["type"] == "doctor" and row["severity"] == "warning"
    # Doctor rows in the history are not read as metrics.
    assert diagnose(history + [row]) == diagnose(history)
    assert "completions_truncated" in format_report(reports, len(history))


def test_unknown_rule_names_the_known_ones():
    with pytest.raises(ValueError, match="known"):
        diagnose(rows(**HEALTHY), rules=["no_such_rule"])


def test_nothing_moves_counts_optimizer_steps_from_the_logged_step():
    # A TRL log at its default logging_steps=10: 40 rows for 400 optimizer steps at 1e-6. The
    # summed rate is 400 x 1e-6 = 4e-4 (not 40 x 1e-6 = 4e-5), above the rule's 1e-4: silent.
    trl = [dict(r, step=10 * r["step"]) for r in rows(reward=lambda i: 0.30 + 0.05 * (-1) ** i, entropy=0.45,
                                                        learning_rate=1e-6, loss=0.0, grad_norm=0.3,
                                                        **{"clip_ratio/region_mean": 0.0})]
    assert "nothing_moves" not in fired(trl)
    frozen = [dict(r, learning_rate=1e-8) for r in trl]
    found = fired(frozen)["nothing_moves"]
    assert "after 400 optimizer steps (40 logged rows)" in found.message
    assert found.evidence["total_learning_rate"] == pytest.approx(400 * 1e-8)


def test_zero_spread_groups_tells_low_diversity_from_difficulty():
    # Near-greedy: a 0/1 reward at p = 0.35 with G = 8 predicts 0.35^8 + 0.65^8 = 3.2% equal
    # groups; 83% are logged. The samples are copies: no "too hard", no num_generations advice.
    p = 0.35
    greedy = rows(**{**HEALTHY, "frac_reward_zero_std": 0.83, "reward": p, "rewards/correct/mean": p,
                     "rewards/correct/std": math.sqrt(p * (1 - p))})
    message = fired(greedy, {"num_generations": 8, "temperature": 0.05})["zero_spread_groups"].message
    assert "= 3% of groups of 8 alike, not 83%" in message and "too hard" not in message
    assert "num_generations=" not in message and "temperature=0.05" in message
    # A constant 0.5 (std 0) is no success rate: the rule leaves it to dead_reward_function.
    constant = rows(**{**HEALTHY, "frac_reward_zero_std": 1.0, "reward": 0.5, "rewards/correct/mean": 0.5,
                       "rewards/correct/std": 0.0})
    assert "zero_spread_groups" not in fired(constant) and "dead_reward_function" in fired(constant)


def test_a_reward_that_varied_and_is_now_constant_is_saturated_not_dead():
    history = rows(**{**HEALTHY, "rewards/format/mean": lambda i: min(1.0, 0.5 + 0.05 * i),
                      "rewards/format/std": lambda i: 0.0 if i >= 10 else 0.3})
    assert "dead_reward_function" not in fired(history)
    dead = rows(**{**HEALTHY, "rewards/format/mean": 1.0, "rewards/format/std": 0.0})
    assert "format (always 1)" in fired(dead)["dead_reward_function"].message


def test_the_report_puts_the_most_upstream_finding_first():
    # A learning rate that blew the policy up (entropy 0.8 -> 3 in two steps) then every group
    # alike with loss and gradient 0: the optimizer finding comes before its consequences.
    blown = rows(30, loss=0.0, grad_norm=lambda i: 3.0 if i == 0 else 0.0, reward=lambda i: 0.1 if i == 0 else 0.0,
                 frac_reward_zero_std=lambda i: 0.3 if i == 0 else 1.0, learning_rate=1e-2,
                 entropy=lambda i: [0.8, 1.5, 3.0][i] if i < 3 else 3.0,
                 **{"completions/clipped_ratio": 0.0, "rewards/correct/mean": lambda i: 0.1 if i == 0 else 0.0,
                    "rewards/correct/std": lambda i: 0.3 if i == 0 else 0.0})
    found = diagnose(blown, {"learning_rate": 1e-2})
    assert found[0].rule == "learning_rate_too_high" and "learning_rate=0.01 now, try 0.001" in found[0].message
    text = format_report(found, len(blown), 30)
    assert "Act on the first: learning_rate_too_high" in text
    assert text.index("learning_rate_too_high") < text.index("no_learning_signal")
