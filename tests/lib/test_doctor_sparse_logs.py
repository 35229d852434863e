"""The doctor on what a sparse or noisy log holds: TRL's rows that average several steps, small
group counts, held-out evaluations of few problems, the sampler's share of tokens outside the
band. Hand-built histories; every expected value is worked out in the comment beside it."""

import math

import pytest
import torch

from course_lib.doctor import diagnose
from course_lib.doctor.report import diagnose_run
from course_lib.doctor.rules import groups_read, looks_binary, rows_are_averages
from course_lib.ops.importance import sampling_correction, token_ratio_outside_band

from test_doctor_rules import HEALTHY, fired, rows


def sparse(steps, **series):
    """Rows logged at ``steps`` (TRL's logging_steps), each keyword a list of one value a row."""
    return [{"step": s, **{k: v[i] for k, v in series.items()}} for i, s in enumerate(steps)]


# ---------------------------------------------------------------------- counting what a row stands for
def test_groups_are_counted_from_the_shares_themselves():
    assert groups_read([{"step": 1, "frac_reward_zero_std": x} for x in (0.25, 0.5, 1.0)]) == 4 * 3
    assert groups_read([{"step": 10, "frac_reward_zero_std": 0.95}]) == 20  # 19 of 20: 2 groups x 10 steps
    assert groups_read([{"step": 1, "frac_reward_zero_std": x} for x in (0.0, 1.0)]) == 1 * 2
    assert rows_are_averages(sparse([10, 20, 30], reward=[0, 0, 0]))
    assert not rows_are_averages(sparse([1, 2, 3], reward=[0, 0, 0]))


def test_a_0_1_reward_averaged_over_steps_still_reads_as_one():
    # TRL at logging_steps=10 logs the mean of 10 batch stds: 0.2858 at a mean rate of 0.1625, where one
    # batch at that rate has sqrt(0.1625 * 0.8375) = 0.369 (0.85 of it is 0.314: not per-step 0/1).
    means, stds = [0.175, 0.1625, 0.175], [0.3674, 0.2858, 0.2794]
    assert not looks_binary(means, stds)
    assert looks_binary(means, stds, averaged=True)  # at least half of 0.369 (0.185)
    assert not looks_binary([0.5] * 3, [0.0] * 3, averaged=True)  # a constant 0.5 is no rate
    assert not looks_binary([1.5] * 3, [0.4] * 3, averaged=True)  # a score above 1 is no rate


# ---------------------------------------------------------------------- zero_spread_groups
def test_zero_spread_groups_needs_a_share_above_half_beyond_its_noise():
    p = 0.3
    base = {**HEALTHY, "reward": p, "rewards/correct/mean": p, "rewards/correct/std": math.sqrt(p * (1 - p))}
    # 2 groups a step, last 10 shares averaging 0.6: 20 groups, sd sqrt(0.6 * 0.4 / 20) = 0.110;
    # 0.6 - 0.5 = 0.1 is under two of them (0.219): chance, quiet.
    halves = [0.5, 1.0, 0.5, 0.5, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert "zero_spread_groups" not in fired(rows(20, **{**base, "frac_reward_zero_std": [0.5] * 10 + halves}),
                                             {"num_generations": 8})
    # 8 groups a step at 0.625: 80 groups, sd sqrt(0.625 * 0.375 / 80) = 0.054; 0.125 > 0.108: fires.
    found = fired(rows(20, **{**base, "frac_reward_zero_std": 0.625}), {"num_generations": 8})
    assert found["zero_spread_groups"].evidence["frac_reward_zero_std"] == pytest.approx(0.625)


# ---------------------------------------------------------------------- wrong_sign_reward
def test_a_flipped_correctness_reward_is_named_on_three_averaged_rows():
    log = sparse([10, 20, 30], reward=[-0.175, -0.1625, -0.175],
                 **{"rewards/wrong_sign_correctness/mean": [-0.175, -0.1625, -0.175],
                    "rewards/wrong_sign_correctness/std": [0.3674, 0.2858, 0.2794]})
    assert "wrong_sign_correctness returns only 0 and -1" in fired(log)["wrong_sign_reward"].message
    # A function not named for correctness needs the trend of 20 rows: three are too few to say.
    other = [{("rewards/penalty/" + k.rsplit("/", 1)[1]) if k.startswith("rewards/") else k: v for k, v in r.items()}
             for r in log]
    assert "wrong_sign_reward" not in fired(other)


# ---------------------------------------------------------------------- learning_rate_too_high
def _momentum_log(entropy, rate=8.5e-3, kl=None):
    # TRL at logging_steps=10, learning_rate=1e-2, beta=0: by step 10 nearly every group is alike
    # (0.95 = 19 of 20), then all are (1.0): no advantage, no gradient, no KL from step 11 on.
    extra = {"kl": [kl] * 6} if kl is not None else {}
    return sparse([10, 20, 30, 40, 50, 60], entropy=entropy, grad_norm=[0.0] * 6, loss=[0.0] * 6,
                  frac_reward_zero_std=[0.95, 1.0, 1.0, 1.0, 1.0, 1.0], reward=[0.0125, 0, 0, 0, 0, 0],
                  learning_rate=[rate] * 6, **extra)


def test_the_policy_moving_with_no_gradient_shows_on_averaged_rows():
    moving = fired(_momentum_log([1.82, 1.51, 1.22, 1.15, 1.14, 1.13]))["learning_rate_too_high"]
    # Rows of 10 steps: entropy must move 0.5 / sqrt(10) = 0.158 nats; it moved 1.51 -> 1.13 = 0.38
    # over steps 20-60, where every group of every step was alike.
    assert moving.evidence["moves_without_gradient"] == (20, "entropy")
    assert "from step 20 grad_norm is 0 yet entropy kept changing" in moving.message
    assert "max_grad_norm" not in moving.message  # a TRL log: clipped at transformers' 1.0 already
    # The same stretch at a small rate with entropy within 0.02 of itself: no evidence of anything.
    assert "learning_rate_too_high" not in fired(_momentum_log([1.2, 1.21, 1.19, 1.2, 1.21, 1.2], rate=3e-5))
    # With a KL logged (beta > 0) the penalty still pulls on the policy: equal groups are no stillness.
    assert "learning_rate_too_high" not in fired(_momentum_log([1.82, 1.51, 1.22, 1.15, 1.14, 1.13], rate=3e-5,
                                                               kl=0.05))


def test_a_large_rate_then_a_silent_run_is_named_without_a_visible_jump():
    # logging_steps=5 at 3e-3: the first row already truncates most completions; from step 10 every
    # group is alike and the gradient is 0 to the end (7 rows, 35 steps); the reward 0.05 -> 0.
    log = sparse([5, 10, 15, 20, 25, 30, 35, 40], entropy=[0.80, 0.86, 0.82, 0.94, 0.95, 0.98, 0.97, 0.95],
                 grad_norm=[0.0] * 8, loss=[0.0] * 8, frac_reward_zero_std=[0.8] + [1.0] * 7,
                 reward=[0.05] + [0.0] * 7, learning_rate=[2.7e-3 - 3e-4 * i for i in range(8)])
    found = fired(log)["learning_rate_too_high"]
    assert found.evidence["silent_from"] == 10 and "at learning_rate=0.0027 every group" in found.message
    # The same silence at the tiny preset's rate (3e-5) is a task or reward problem, not the rate.
    calm = [{**r, "learning_rate": 3e-5} for r in log]
    assert "learning_rate_too_high" not in fired(calm)


def test_a_lone_gradient_spike_in_a_trl_log_is_read_as_clipped():
    history = rows(**{**HEALTHY, "grad_norm": lambda i: 151.0 if i == 25 else 2.0})
    assert "learning_rate_too_high" not in fired(history, {})  # no config: transformers clips at 1.0
    found = fired(history, {"max_grad_norm": 100.0})["learning_rate_too_high"]  # unclipped: evidence alone
    assert "grad_norm spiked to 151 at step 26" in found.message


def test_entropy_over_a_few_kept_completions_is_no_jump():
    # max_completion_length=3 with masked truncation: at step 21, 31 of 32 completions are cut, and
    # the entropy of the one left reads 0.10 against 0.8 around it.
    history = rows(30, **{**HEALTHY, "entropy": lambda i: 0.10 if i == 20 else 0.8 + 0.02 * (-1) ** i,
                          "completions/clipped_ratio": lambda i: 0.969 if i == 20 else 0.5})
    config = {"mask_truncated_completions": True, "per_device_train_batch_size": 32, "max_grad_norm": 1.0}
    assert "learning_rate_too_high" not in fired(history, config)
    # Unmasked, all 32 completions are measured: the same fall is a jump.
    assert "learning_rate_too_high" in fired(history, {**config, "mask_truncated_completions": False})


# ---------------------------------------------------------------------- reward_hacking
def _with_evals(history, accuracies):
    every = len(history) // len(accuracies)
    for k, accuracy in enumerate(accuracies):
        history[(k + 1) * every - 1]["eval/greedy_accuracy"] = accuracy
    return history


def test_held_out_flatness_needs_three_evaluations_and_a_reward_above_greedy_accuracy():
    rising = {**HEALTHY, "reward": lambda i: 0.15 + 0.10 * i / 59}  # sampled 0/1 rate 0.15 -> 0.25
    noisy = [0.48, 0.54, 0.48, 0.46, 0.44, 0.54]  # 50-problem evaluations: first third 0.51, last 0.49
    # The sampled rate (last 10 rows: 0.242) is under the greedy accuracy (0.49): sharpening, quiet.
    assert "reward_hacking" not in fired(_with_evals(rows(60, **rising), noisy))
    # A reward in other units climbing while greedy accuracy is 0 at every evaluation: hacking.
    hacked = {**HEALTHY, "reward": lambda i: 1.0 + 0.5 * i}
    found = fired(_with_evals(rows(60, **hacked), [0.0] * 6))["reward_hacking"]
    assert "went 0.000 -> 0.000 (the first and last third of 6 evaluations)" in found.message
    # Two evaluations are too few to call held-out accuracy flat.
    assert "reward_hacking" not in fired(_with_evals(rows(60, **hacked), [0.0, 0.0]))


# ---------------------------------------------------------------------- too_few_rows
def test_a_sparse_log_says_which_rules_it_leaves_silent():
    log = _momentum_log([0.7] * 6, rate=3e-5)
    found = fired(log)["too_few_rows"]
    assert found.severity == "info"
    assert "6 logged rows, one every 10 optimizer steps" in found.message
    assert "nothing_moves (9 rows, step 90 at this interval)" in found.message
    assert "reward_hacking (20 rows, step 200 at this interval)" in found.message
    assert "too_few_rows" not in fired(rows(6, **HEALTHY))  # a row a step: nothing is waiting on rows
    # After the fact, a long sparse log passed through the state: the report does not keep it.
    long_log = [{**HEALTHY_ROW, "step": 10 * (i + 1)} for i in range(30)]
    assert "too_few_rows" not in {f.rule for f in diagnose_run(long_log, {})}
    assert "too_few_rows" in {f.rule for f in diagnose_run(long_log[:6], {})}


HEALTHY_ROW = {k: v for k, v in rows(1, **HEALTHY)[0].items() if k != "step"}


# ---------------------------------------------------------------------- the sampler's share outside the band
def test_the_share_of_tokens_outside_the_band_is_counted_by_hand():
    old = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, 0.0, 0.0, 0.0]])
    sampled = torch.tensor([[0.0, -0.2, -1.0, float("nan")], [-0.8, 0.5, 0.1, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    # log-ratios on valid, scored tokens: 0, -0.8, -1.0 | 0.8, -0.5, -0.1 (NaN and the masked one
    # dropped); outside [log 0.5, log 2] = [-0.693, 0.693]: -0.8, -1.0, 0.8 -> 3 of 6.
    assert token_ratio_outside_band(old, sampled, mask) == pytest.approx(0.5)
    assert token_ratio_outside_band(old, sampled, torch.zeros_like(mask)) == 0.0
    _, metrics = sampling_correction(old, sampled, mask)
    assert metrics["sampling/token_ratio_outside_band"] == pytest.approx(0.5)


def test_sampler_mismatch_reads_the_share_where_it_is_logged():
    share, gap = "sampling/token_ratio_outside_band", "sampling/sampling_logp_difference/mean"
    # A bfloat16 sampler: 0.3% of tokens outside, a mean gap of 0.02, extremes outside [0.5, 2]: quiet.
    bf16 = {**HEALTHY, share: 0.003, gap: 0.02, "sampling/importance_sampling_ratio/min": 0.2,
            "sampling/importance_sampling_ratio/max": 2.8}
    assert "sampler_mismatch" not in fired(rows(**bf16))
    # Stale weights: 30% of tokens outside (the first museum's stale_sampler logs 15-47%).
    found = fired(rows(**{**bf16, share: 0.3}))["sampler_mismatch"]
    assert "30% of completion tokens have a trainer/sampler probability ratio outside [0.5, 2]" in found.message
    # Where the share decides, a mean gap over 0.1 with only 2% of tokens outside is not enough.
    assert "sampler_mismatch" not in fired(rows(**{**bf16, share: 0.02, gap: 0.15}))
    # Without the share (a TRL log), the mean gap decides as before.
    assert "sampler_mismatch" in fired(rows(**{**HEALTHY, gap: 0.15}))


def test_the_report_keeps_learning_rate_first_on_a_sparse_blow_up():
    found = diagnose(_momentum_log([1.82, 1.51, 1.22, 1.15, 1.14, 1.13]), {})
    loud = [f.rule for f in found if f.severity != "info"]
    assert loud[0] == "learning_rate_too_high", loud
