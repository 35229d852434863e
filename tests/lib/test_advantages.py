"""Tests of course_lib.algos: hand-worked cases, TRL's code path, invariants."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.algos.rloo import clip_rewards, generation_major_to_prompt_major, normalize_advantages, normalize_rewards, prompt_major_to_generation_major, rloo_advantages
from course_lib.rewards import combine_rewards
from course_lib.algos.ppo import gae, whiten
from course_lib.algos.grpo import group_advantages
from course_lib.ops.stats import nanstd

NAN = float("nan")


# --------------------------------------------------------------------------------------
# group_advantages: hand-worked
# --------------------------------------------------------------------------------------
def test_group_of_one_success_by_hand():
    # [1, 0, 0, 0]: mean 0.25; Bessel std = sqrt((0.75^2 + 3 * 0.25^2) / 3) = sqrt(0.25) = 0.5
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), num_generations=4)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_no_scaling_is_plain_centering():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0]), 2, scale_rewards="none")
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0, -1.0, 1.0]))
    # False is TRL's spelling of "none", True of "group"
    torch.testing.assert_close(group_advantages(torch.tensor([2.0, 4.0]), 2, scale_rewards=False),
                               torch.tensor([-1.0, 1.0]))
    torch.testing.assert_close(group_advantages(torch.tensor([2.0, 4.0]), 2, scale_rewards=True),
                               group_advantages(torch.tensor([2.0, 4.0]), 2, scale_rewards="group"))


def test_batch_scaling_keeps_group_mean_but_uses_batch_std():
    rewards = torch.tensor([0.0, 2.0, 10.0, 14.0])
    # group means 1 and 12; batch std of [0, 2, 10, 14] (Bessel): mean 6.5,
    # squares 42.25 + 20.25 + 12.25 + 56.25 = 131, / 3 -> sqrt(43.666...)
    batch_std = math.sqrt(131.0 / 3.0)
    adv = group_advantages(rewards, 2, scale_rewards="batch")
    expected = torch.tensor([-1.0, 1.0, -2.0, 2.0]) / (batch_std + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_zero_std_group_gives_zero_and_is_flagged():
    adv, stats = group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2, return_stats=True)
    torch.testing.assert_close(adv[:2], torch.zeros(2))
    assert stats.is_std_zero.tolist() == [True, True, False, False]
    assert stats.is_std_zero.float().mean().item() == 0.5  # TRL's frac_reward_zero_std


def test_nan_rewards_are_ignored_and_get_zero_advantage():
    # group [nan, 1, 0, 1]: statistics over the three scorable values only
    adv = group_advantages(torch.tensor([NAN, 1.0, 0.0, 1.0]), 4)
    mean, std = 2.0 / 3.0, math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)
    expected = torch.tensor([0.0, (1 - mean) / (std + 1e-4), (0 - mean) / (std + 1e-4), (1 - mean) / (std + 1e-4)])
    torch.testing.assert_close(adv, expected)
    # a single scorable completion: the std is undefined, the advantage is 0
    assert group_advantages(torch.tensor([NAN, 3.0]), 2).tolist() == [0.0, 0.0]


def test_group_advantages_rejects_partial_groups_and_unknown_mode():
    with pytest.raises(ValueError, match="num_generations=4"):
        group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="scale_rewards='grop'"):
        group_advantages(torch.zeros(4), 2, scale_rewards="grop")
    with pytest.raises(ValueError, match=r"\(B,\)"):
        group_advantages(torch.zeros(2, 2), 2)


# --------------------------------------------------------------------------------------
# group_advantages and combine_rewards against TRL 1.16's code path
# --------------------------------------------------------------------------------------
def _trl_reference(rewards_per_func, weights, num_generations, scale_rewards):
    """The statements of GRPOTrainer._generate_and_score_completions ("sum_then_normalize"),
    re-typed here, using TRL's own nanstd."""
    from trl.trainer.utils import nanstd as trl_nanstd

    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    if scale_rewards in ("group", "none"):
        std = trl_nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    else:
        std = trl_nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), is_std_zero, rewards


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_matches_trl_code_path(scale_rewards):
    generator = torch.Generator().manual_seed(0)
    num_generations, num_prompts, num_funcs = 4, 6, 3
    rewards_per_func = torch.randint(0, 3, (num_generations * num_prompts, num_funcs), generator=generator).float()
    holes = torch.rand(rewards_per_func.shape, generator=generator) < 0.25
    rewards_per_func[holes] = torch.nan  # functions that returned None
    rewards_per_func[5] = torch.nan  # one unscorable completion
    rewards_per_func[8:12, 0] = 1.0
    rewards_per_func[8:12, 1:] = torch.nan  # one constant group (std 0)
    weights = torch.tensor([1.0, 0.5, 2.0])

    expected_adv, expected_zero, expected_rewards = _trl_reference(
        rewards_per_func.clone(), weights, num_generations, scale_rewards)
    rewards = combine_rewards(rewards_per_func, weights)
    torch.testing.assert_close(rewards, expected_rewards, equal_nan=True)
    adv, stats = group_advantages(rewards, num_generations, scale_rewards=scale_rewards, return_stats=True)
    torch.testing.assert_close(adv, expected_adv)
    assert torch.equal(stats.is_std_zero, expected_zero)


def test_nanstd_matches_torch_std_without_nan():
    x = torch.tensor([[1.0, 2.0, 4.0], [3.0, 3.0, 9.0]])
    torch.testing.assert_close(nanstd(x, dim=1), x.std(dim=1))
    torch.testing.assert_close(nanstd(x), x.std())
    assert math.isnan(nanstd(torch.tensor([1.0])).item())


def test_combine_rewards_by_hand():
    rewards = combine_rewards([[1.0, None], [0.5, 2.0], [None, None]], reward_weights=[2.0, 0.5])
    assert rewards[:2].tolist() == [2.0, 2.0]  # 2*1 (None skipped); 2*0.5 + 0.5*2
    assert math.isnan(rewards[2].item())  # unscorable row stays NaN, not 0
    torch.testing.assert_close(combine_rewards(torch.tensor([[1.0, 2.0]])), torch.tensor([3.0]))
    with pytest.raises(ValueError, match="reward_weights"):
        combine_rewards(torch.zeros(2, 2), [1.0, 2.0, 3.0])


# --------------------------------------------------------------------------------------
# RLOO
# --------------------------------------------------------------------------------------
def test_rloo_seed_example():
    # The vectorised example of the RLOO seed: 3 prompts x 4 completions in
    # generation-major order (index = completion * 3 + prompt), `reshape(rloo_k, local_batch_size)`.
    local_batch_size, rloo_k = 3, 4
    rlhf_reward = torch.tensor([1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9, 10]).float()
    grid = rlhf_reward.reshape(rloo_k, local_batch_size)
    seed_advantages = (grid - (grid.sum(0) - grid) / (rloo_k - 1)).flatten()
    # the seed's two spot checks
    assert abs(1 - (2 + 5 + 8) / 3 - seed_advantages[0].item()) < 1e-6
    assert abs(6 - (3 + 2 + 9) / 3 - seed_advantages[7].item()) < 1e-6

    prompt_major = generation_major_to_prompt_major(rlhf_reward, rloo_k)
    assert prompt_major.tolist() == [1, 2, 5, 8, 2, 3, 6, 9, 3, 4, 7, 10]
    ours = rloo_advantages(prompt_major, rloo_k)
    torch.testing.assert_close(prompt_major_to_generation_major(ours, rloo_k), seed_advantages)


def test_rloo_by_hand_and_nan():
    torch.testing.assert_close(rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4),
                               torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    # NaN excluded from the baseline: [nan, 1, 3] -> baselines 3 and 1 for the scorable ones
    torch.testing.assert_close(rloo_advantages(torch.tensor([NAN, 1.0, 3.0]), 3), torch.tensor([0.0, -2.0, 2.0]))
    # one scorable completion: no baseline, advantage 0
    assert rloo_advantages(torch.tensor([NAN, 5.0]), 2).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="num_generations=1"):
        rloo_advantages(torch.zeros(3), 1)


def test_layout_translation_roundtrip():
    x = torch.arange(24).reshape(12, 2)
    there = generation_major_to_prompt_major(x, 4)
    assert torch.equal(prompt_major_to_generation_major(there, 4), x)
    assert there[:4, 0].tolist() == [0, 6, 12, 18]  # prompt 0's four completions


# --------------------------------------------------------------------------------------
# GAE
# --------------------------------------------------------------------------------------
def test_gae_hand_unrolled_three_tokens():
    # gamma=1, lam=0.95; rewards [0, 0, 1]; values [0.5, 0.6, 0.7]; V after the end = 0
    # delta2 = 1 - 0.7 = 0.3                 A2 = 0.3
    # delta1 = 0 + 0.7 - 0.6 = 0.1          A1 = 0.1 + 0.95 * 0.3 = 0.385
    # delta0 = 0 + 0.6 - 0.5 = 0.1          A0 = 0.1 + 0.95 * 0.385 = 0.46575
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), torch.ones(1, 3))
    torch.testing.assert_close(adv, torch.tensor([[0.46575, 0.385, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[0.96575, 0.985, 1.0]]))


def test_gae_discounted_by_hand():
    # gamma=0.5, lam=0.5: delta1 = 2 - 1 = 1 -> A1 = 1; delta0 = 0 + 0.5*1 - 1 = -0.5 -> A0 = -0.5 + 0.25 = -0.25
    adv, _ = gae(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), gamma=0.5, lam=0.5)
    torch.testing.assert_close(adv, torch.tensor([[-0.25, 1.0]]))


def _naive_gae(rewards, values, lengths, gamma, lam):
    """Python lists, one sequence at a time, only the valid tokens."""
    out = []
    for row_r, row_v, n in zip(rewards.tolist(), values.tolist(), lengths):
        adv = [0.0] * len(row_r)
        running = 0.0
        for t in reversed(range(n)):
            next_value = row_v[t + 1] if t + 1 < n else 0.0
            running = row_r[t] + gamma * next_value - row_v[t] + gamma * lam * running
            adv[t] = running
        out.append(adv)
    return torch.tensor(out)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
       st.integers(0, 10_000))
def test_gae_matches_naive_loop_with_padding(lengths, gamma, lam, seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(len(lengths), 6, generator=generator)
    values = torch.randn(len(lengths), 6, generator=generator)
    mask = (torch.arange(6).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(adv, _naive_gae(rewards, values, lengths, gamma, lam))
    torch.testing.assert_close(ret, (adv + values) * mask)


def test_gae_rejects_left_padding():
    with pytest.raises(ValueError, match="right padding"):
        gae(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([[0.0, 1.0, 1.0]]))


# --------------------------------------------------------------------------------------
# Reinforce++ helpers and whitening
# --------------------------------------------------------------------------------------
def test_clip_and_normalize_rewards():
    assert clip_rewards(torch.tensor([-20.0, 3.0, 20.0]), 10.0).tolist() == [-10.0, 3.0, 10.0]
    assert clip_rewards(torch.tensor([-2.0, 0.5, 2.0]), (0.0, 1.0)).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="clip_range"):
        clip_rewards(torch.zeros(2), -1.0)
    # [1, 2, 3]: mean 2, Bessel std 1
    torch.testing.assert_close(normalize_rewards(torch.tensor([1.0, 2.0, 3.0])), torch.tensor([-1.0, 0.0, 1.0]))
    assert normalize_rewards(torch.tensor([4.0])).tolist() == [0.0]
    torch.testing.assert_close(normalize_advantages(torch.tensor([0.0, 4.0]), eps=0.0),
                               torch.tensor([-1.0, 1.0]) / math.sqrt(2.0))


def test_whiten_by_hand():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # valid values [1, 3]: mean 2, unbiased var 2
    torch.testing.assert_close(whiten(x, mask), torch.tensor([[-1.0, 1.0, 0.0]]) / math.sqrt(2.0), atol=1e-6,
                               rtol=1e-6)
    torch.testing.assert_close(whiten(x[:, :2], shift_mean=False), torch.tensor([[-1.0, 1.0]]) / math.sqrt(2) + 2)


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------
groups = st.integers(2, 6).flatmap(
    lambda g: st.tuples(st.just(g), st.lists(st.lists(st.integers(-5, 5), min_size=g, max_size=g),
                                             min_size=1, max_size=5)))


def _tensor(rows):
    return torch.tensor([v for row in rows for v in row], dtype=torch.float64)


@settings(max_examples=60, deadline=None)
@given(groups, st.sampled_from(["group", "none"]))
def test_advantages_sum_to_zero_per_group(case, scale):
    g, rows = case
    adv = group_advantages(_tensor(rows), g, scale_rewards=scale)
    torch.testing.assert_close(adv.view(-1, g).sum(dim=1), torch.zeros(len(rows), dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(groups, st.integers(-100, 100), st.sampled_from(["group", "none"]))
def test_shifting_a_group_changes_nothing(case, shift, scale):
    g, rows = case
    rewards = _tensor(rows)
    shifted = rewards.clone()
    shifted[:g] += shift  # the first prompt's rewards only
    torch.testing.assert_close(group_advantages(shifted, g, scale_rewards=scale),
                               group_advantages(rewards, g, scale_rewards=scale))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(-5, 5), st.sampled_from(["group", "batch", "none"]))
def test_constant_group_gives_zeros(g, value, scale):
    rewards = torch.full((g,), float(value))
    assert group_advantages(rewards, g, scale_rewards=scale).tolist() == [0.0] * g


@settings(max_examples=60, deadline=None)
@given(groups)
def test_leave_one_out_identity(case):
    g, rows = case
    rewards = _tensor(rows)
    centred = rewards - rewards.view(-1, g).mean(dim=1).repeat_interleave(g)
    torch.testing.assert_close(rloo_advantages(rewards, g), g / (g - 1) * centred)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_reward_std_is_the_batch_spread_for_every_algorithm(algo):
    """``reward_std`` means what TRL 1.16 logs (the std over the whole batch) for all three
    algorithms; GRPO and RLOO also log the spread inside groups, averaged, under its own name.
    Hand-worked: rewards [0,1,1,1 | 0,0,0,0], G = 4: batch mean 3/8, sum of squares 1.875,
    std sqrt(1.875 / 7) = 0.5175; group stds 0.5 and 0, mean 0.25."""
    from course_lib.algos import get_algorithm, make_config
    from course_lib.algos.base import ScoredBatch

    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    B, T = 8, 3
    config = make_config(algo, num_generations=4, per_device_train_batch_size=8)
    scored = ScoredBatch(rewards=rewards, mask=torch.ones(B, T), is_eos=torch.ones(B, dtype=torch.bool),
                         num_generations=4, old_logps=torch.zeros(B, T), ref_logps=torch.zeros(B, T),
                         old_values=torch.zeros(B, T))
    metrics = get_algorithm(config).advantages(scored, config).metrics
    assert metrics["reward_std"] == pytest.approx(math.sqrt(1.875 / 7), abs=1e-6)
    if algo != "ppo":
        assert metrics["reward_std_in_groups"] == pytest.approx(0.25, abs=1e-6)
