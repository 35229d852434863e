"""Policy, KL, importance-sampling, RLOO, PPO and value losses on hand-worked cases.

Parity with TRL on random grids is in `test_losses_trl_parity.py`; here every expected
number is worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from course_lib.ops.importance import importance_sampling_ratio, truncated_is_ratio
from course_lib.ops.kl import kl_k1, kl_k2, kl_k3
from course_lib.algos.grpo import LOSSES, LOSS_TYPES, LossType, clipped_surrogate, policy_loss
from course_lib.algos.grpo_losses import no_metrics, sequence_mean
from course_lib.algos.ppo import ppo_policy_loss, value_loss
from course_lib.algos.rloo import rloo_policy_loss

LN = math.log


def _one_by_three():
    """Three tokens whose ratios new/old are 1.5, 1.0 and 0.5."""
    logps = torch.tensor([[LN(0.6), LN(0.3), LN(0.1)]], requires_grad=True)
    old = torch.tensor([[LN(0.4), LN(0.3), LN(0.2)]])
    return logps, old, torch.ones(1, 3)


# ---------------------------------------------------------------- policy_loss, by hand


def test_clipped_surrogate_by_hand():
    ratio = torch.tensor([[0.5, 1.0, 1.5]])
    # A = +1: -min(r, clip(r, 0.8, 1.2)) = -(0.5, 1.0, 1.2): a high ratio stops earning.
    torch.testing.assert_close(clipped_surrogate(ratio, torch.tensor([[1.0]]), 0.2), -torch.tensor([[0.5, 1.0, 1.2]]))
    # A = -1: max(r, clip(r)) = (0.8, 1.0, 1.5): a low ratio stops being pushed further down.
    torch.testing.assert_close(clipped_surrogate(ratio, torch.tensor([[-1.0]]), 0.2), torch.tensor([[0.8, 1.0, 1.5]]))
    # clip-higher 0.4: the upper bound moves to 1.4; delta=1.3 caps the unclipped r at 1.3 for A < 0.
    torch.testing.assert_close(clipped_surrogate(ratio, torch.tensor([[1.0]]), 0.2, 0.4),
                               -torch.tensor([[0.5, 1.0, 1.4]]))
    torch.testing.assert_close(clipped_surrogate(ratio, torch.tensor([[-1.0]]), 0.2, delta=1.3),
                               torch.tensor([[0.8, 1.0, 1.3]]))


def test_policy_loss_runs_a_new_loss_type_from_its_table_entry_alone(monkeypatch):
    """A plain policy gradient `-r A`, averaged per sequence: `policy_loss` needs nothing but the
    entry. A run needs one more edit, the name in `GRPOConfig.loss_type`'s `Literal`
    (`test_config.py` keeps the two lists equal)."""
    monkeypatch.setitem(LOSSES, "plain_pg", LossType(lambda ratio, adv, c: (-ratio * adv, ratio), sequence_mean,
                                                     no_metrics))
    logps = torch.tensor([[LN(0.5), LN(0.5), 0.0], [LN(0.25), 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    out = policy_loss(logps, None, torch.tensor([2.0, -1.0]), mask, loss_type="plain_pg")
    # On-policy r = 1: per-sequence means -2 and +1, their mean -0.5; d/dlogp = -A / (B * len).
    assert out.loss.item() == pytest.approx(-0.5)
    out.loss.backward()
    torch.testing.assert_close(logps.grad, torch.tensor([[-0.5, -0.5, 0.0], [0.5, 0.0, 0.0]]))
    assert set(out.metrics) == {"policy_loss"}


def test_an_unknown_shape_parameter_is_refused_by_name():
    logps, advantages, mask = _two_rows()
    with pytest.raises(ValueError, match="sapo_temperature.*sapo_temperature_neg, sapo_temperature_pos"):
        policy_loss(logps, None, advantages, mask, loss_type="sapo", sapo_temperature=1.0)



def test_clipped_objective_positive_advantage_by_hand():
    # A = +1, eps = 0.2: min(r A, clip(r) A) = [min(1.5, 1.2), 1.0, min(0.5, 0.8)] = [1.2, 1, 0.5]
    logps, old, mask = _one_by_three()
    out = policy_loss(logps, old, torch.tensor([1.0]), mask, loss_type="bnpo")
    assert out.loss.item() == pytest.approx(-(1.2 + 1.0 + 0.5) / 3, rel=1e-6)
    out.loss.backward()
    # token 0 is clipped (no gradient); elsewhere d(-r A / 3)/d logp = -r / 3
    torch.testing.assert_close(logps.grad, torch.tensor([[0.0, -1.0 / 3, -0.5 / 3]]))
    assert out.metrics["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert out.metrics["clip_ratio/low_mean"] == 0.0  # r = 0.5 < 0.8 but A > 0: not clipped
    assert out.metrics["clip_ratio/region_mean"] == pytest.approx(1 / 3)


def test_clipped_objective_negative_advantage_by_hand():
    # A = -1: min(-r, -clip(r)) = [min(-1.5, -1.2), -1, min(-0.5, -0.8)] = [-1.5, -1, -0.8]
    logps, old, mask = _one_by_three()
    out = policy_loss(logps, old, torch.tensor([-1.0]), mask, loss_type="dapo")
    assert out.loss.item() == pytest.approx((1.5 + 1.0 + 0.8) / 3, rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logps.grad, torch.tensor([[1.5 / 3, 1.0 / 3, 0.0]]))
    assert out.metrics["clip_ratio/low_mean"] == pytest.approx(1 / 3)
    assert out.metrics["clip_ratio/high_mean"] == 0.0


def test_epsilon_high_widens_the_upper_side_only():
    # eps_high = 0.6: token 0 (r = 1.5) is no longer clipped -> [1.5, 1, 0.5]
    logps, old, mask = _one_by_three()
    out = policy_loss(logps, old, torch.tensor([1.0]), mask, loss_type="bnpo", epsilon_high=0.6)
    assert out.loss.item() == pytest.approx(-(1.5 + 1.0 + 0.5) / 3, rel=1e-6)
    assert out.metrics["clip_ratio/high_mean"] == 0.0


def test_delta_bounds_the_ratio_for_negative_advantages():
    # A = -1, delta = 1.3: token 0 becomes min(-min(1.5, 1.3), -1.2) = -1.3 with no gradient
    logps, old, mask = _one_by_three()
    out = policy_loss(logps, old, torch.tensor([-1.0]), mask, loss_type="bnpo", delta=1.3)
    assert out.loss.item() == pytest.approx((1.3 + 1.0 + 0.8) / 3, rel=1e-6)
    out.loss.backward()
    assert logps.grad[0, 0].item() == 0.0


def test_sequence_level_ratio_is_the_geometric_mean():
    # GSPO: r_seq = (1.5 * 1.0 * 0.5) ** (1/3) = 0.75 ** (1/3) ~ 0.9086, inside [0.8, 1.2]
    logps, old, mask = _one_by_three()
    out = policy_loss(logps, old, torch.tensor([1.0]), mask, loss_type="dapo",
                      importance_sampling_level="sequence")
    r_seq = 0.75 ** (1 / 3)
    assert out.loss.item() == pytest.approx(-r_seq, rel=1e-6)
    out.loss.backward()
    # loss = -r_seq and d r_seq / d logp_t = r_seq / 3 for each of the 3 tokens
    torch.testing.assert_close(logps.grad, torch.full((1, 3), -r_seq / 3))


def _two_rows():
    """Rows of 1 and 3 valid tokens, on-policy, advantages 1 and 2: token losses -1 / -2."""
    logps = torch.full((2, 4), -1.0, requires_grad=True)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    return logps, torch.tensor([1.0, 2.0]), mask


@pytest.mark.parametrize(
    "loss_type,kwargs,expected",
    [
        ("grpo", {}, (-1 + -2) / 2),                                 # mean of row means
        ("grpo", {"gradient_accumulation_steps": 2}, (-1 + -2) / 4),
        ("bnpo", {}, (-1 - 6) / 4),                                  # all tokens / 4 tokens
        ("dr_grpo", {"max_completion_length": 5}, -7 / (2 * 5)),     # B * max length
        ("dapo", {}, -7 / 4),                                        # tokens of this batch
        ("dapo", {"num_items_in_batch": 8, "gradient_accumulation_steps": 2,
                  "steps_per_generation": 2}, -7 / 8),
        ("dapo", {"num_items_in_batch": 8, "gradient_accumulation_steps": 2,
                  "steps_per_generation": 4}, -7 / 4),               # 8 * 2 / 4 = 4
        ("dapo", {"num_items_in_batch": 16, "num_processes": 2}, -7 / 8),
    ],
)
def test_loss_type_normalisation_by_hand(loss_type, kwargs, expected):
    logps, advantages, mask = _two_rows()
    out = policy_loss(logps, None, advantages, mask, loss_type=loss_type, **kwargs)
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)


def test_grpo_gradient_favours_short_sequences():
    # grpo: each row's tokens share 1/len; row 0: -1/1/2, row 1: -2/3/2 per token
    logps, advantages, mask = _two_rows()
    policy_loss(logps, None, advantages, mask, loss_type="grpo").loss.backward()
    expected = torch.tensor([[-0.5, 0, 0, 0], [-1 / 3, -1 / 3, -1 / 3, 0]])
    torch.testing.assert_close(logps.grad, expected)


def test_sampling_ratio_weights_each_token():
    logps, advantages, mask = _two_rows()
    weights = torch.tensor([[2.0, 9.0, 9.0, 9.0], [0.5, 1.0, 1.5, 9.0]])
    out = policy_loss(logps, None, advantages, mask, loss_type="bnpo", sampling_ratio=weights)
    # (-1 * 2 + -2 * (0.5 + 1 + 1.5)) / 4 tokens = -8 / 4
    assert out.loss.item() == pytest.approx(-2.0)


def test_kl_term_value_and_gradient_with_and_without_bias_correction():
    logps = torch.tensor([[LN(0.5), LN(0.2)]], requires_grad=True)
    ref = torch.tensor([[LN(0.25), LN(0.4)]])
    mask = torch.ones(1, 2)
    beta = 0.1
    log_r = ref - logps.detach()
    k3 = torch.exp(log_r) - log_r - 1  # [0.5 + ln 2 - 1, 2 - ln 2 - 1]
    for correction in (True, False):
        logps.grad = None
        out = policy_loss(logps, None, torch.zeros(1), mask, loss_type="bnpo", beta=beta,
                          ref_logps=ref, use_bias_correction_kl=correction)
        assert out.loss.item() == pytest.approx(beta * k3.mean().item(), rel=1e-6)
        assert out.metrics["kl"] == pytest.approx(k3.mean().item(), rel=1e-6)
        out.loss.backward()
        # d k3 / d logp = 1 - exp(log_r); the on-policy ratio (value 1) adds k3 itself
        grad = 1 - torch.exp(log_r) + (k3 if correction else 0)
        torch.testing.assert_close(logps.grad, beta * grad / 2)


# ------------------------------------------------------- empty masks and bad inputs


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_all_truncated_batch_is_finite_everywhere(loss_type, level, beta):
    # mask_truncated_completions with every completion truncated: the mask is all zeros.
    logps = torch.randn(4, 5).requires_grad_(True)
    old = logps.detach() + 0.3 * torch.randn(4, 5)
    out = policy_loss(logps, old, torch.randn(4), torch.zeros(4, 5), loss_type=loss_type,
                      importance_sampling_level=level, beta=beta, ref_logps=torch.randn(4, 5),
                      sampling_ratio=torch.rand(4, 5) + 0.5, max_completion_length=5,
                      entropies=torch.rand(4, 5), num_items_in_batch=0)
    out.loss.backward()
    assert out.loss.item() == 0.0
    assert torch.isfinite(logps.grad).all() and (logps.grad == 0).all()
    assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics
    assert ("kl" in out.metrics) == (beta != 0)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_garbage_at_padded_positions_does_not_leak(loss_type):
    logps, advantages, mask = _two_rows()
    clean = policy_loss(logps, logps.detach() - 0.1, advantages, mask, loss_type=loss_type,
                        beta=0.04, ref_logps=torch.full((2, 4), -1.2), max_completion_length=5)
    clean.loss.backward()
    clean_grad = logps.grad.clone()
    logps.grad = None
    padded = ~mask.bool()
    old = (logps.detach() - 0.1).masked_fill(padded, float("-inf"))
    ref = torch.full((2, 4), -1.2).masked_fill(padded, float("nan"))
    dirty_logps = logps.masked_fill(padded, float("-inf"))
    dirty = policy_loss(dirty_logps, old, advantages, mask, loss_type=loss_type, beta=0.04,
                        ref_logps=ref, max_completion_length=5)
    dirty.loss.backward()
    assert dirty.loss.item() == pytest.approx(clean.loss.item(), rel=1e-6)
    torch.testing.assert_close(logps.grad, clean_grad)
    assert dirty.metrics == pytest.approx(clean.metrics)


def test_errors_name_the_argument_and_the_fix():
    logps, advantages, mask = _two_rows()
    with pytest.raises(ValueError, match="loss_type='sft'"):
        policy_loss(logps, None, advantages, mask, loss_type="sft")
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, None, advantages, mask, beta=0.1)
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logps, None, advantages, mask, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logps, None, torch.ones(3), mask)
    with pytest.raises(ValueError, match="old_logps"):
        policy_loss(logps, torch.zeros(2, 3), advantages, mask)


# ----------------------------------------------------------------- property tests


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 5), length=st.integers(1, 6), seed=st.integers(0, 10_000),
       loss_type=st.sampled_from(["bnpo", "dapo"]))
def test_on_policy_loss_is_minus_the_token_mean_advantage(batch, length, seed, loss_type):
    gen = torch.Generator().manual_seed(seed)
    logps = -torch.rand(batch, length, generator=gen, dtype=torch.float64)
    logps.requires_grad_(True)
    advantages = torch.randn(batch, generator=gen, dtype=torch.float64)
    mask = (torch.rand(batch, length, generator=gen) < 0.7).double()
    out = policy_loss(logps, None, advantages, mask, loss_type=loss_type)
    count = max(mask.sum().item(), 1.0)
    expected = -(advantages[:, None] * mask).sum().item() / count
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    out.loss.backward()
    # ratio = 1 is never clipped, so the gradient is the REINFORCE one: -A / count
    torch.testing.assert_close(logps.grad, -advantages[:, None] * mask / count)
    assert out.metrics["clip_ratio/region_mean"] == 0.0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), level=st.sampled_from(["token", "sequence"]),
       drift=st.floats(0.0, 3.0))
def test_clip_metrics_are_fractions(seed, level, drift):
    gen = torch.Generator().manual_seed(seed)
    logps = -3 * torch.rand(4, 6, generator=gen)
    old = logps + drift * torch.randn(4, 6, generator=gen)
    mask = (torch.rand(4, 6, generator=gen) < 0.7).float()
    out = policy_loss(logps, old, torch.randn(4, generator=gen), mask, importance_sampling_level=level)
    for key, value in out.metrics.items():
        if key.startswith("clip_ratio/"):
            assert 0.0 <= value <= 1.0, (key, value)
    assert out.metrics["clip_ratio/region_mean"] == pytest.approx(
        out.metrics["clip_ratio/low_mean"] + out.metrics["clip_ratio/high_mean"], abs=1e-6
    )  # a token cannot be low- and high-clipped at once


# ------------------------------------------------------------------- KL estimators


def test_kl_estimators_by_hand():
    logps, ref = torch.tensor([LN(0.5)]), torch.tensor([LN(0.25)])
    assert kl_k1(logps, ref).item() == pytest.approx(LN(2))
    assert kl_k2(logps, ref).item() == pytest.approx(LN(2) ** 2 / 2)
    assert kl_k3(logps, ref).item() == pytest.approx(0.5 + LN(2) - 1)


def test_k1_and_k3_are_unbiased_for_kl_pi_ref():
    # Exact expectation over a categorical policy p: sum_x p(x) k(x) must equal KL(p || q).
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    true_kl = (p * (p.log() - q.log())).sum()
    for estimator in (kl_k1, kl_k3):
        assert (p * estimator(p.log(), q.log())).sum().item() == pytest.approx(true_kl.item())
    # k2 is biased: its expectation is not KL(p || q) here
    assert (p * kl_k2(p.log(), q.log())).sum().item() != pytest.approx(true_kl.item(), rel=1e-2)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=20))
@example([(-9.052728298274474e-10, 0.0)])  # exp(u) - u - 1 gives -1.1e-16 here in float64
def test_k3_and_k2_are_never_negative(pairs):
    logps = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    ref = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    assert (kl_k3(logps, ref) >= 0).all()
    assert (kl_k2(logps, ref) >= 0).all()
    assert (kl_k3(logps, logps) == 0).all()


# ------------------------------------------------------- importance sampling weights


def test_truncated_is_ratio_by_hand():
    old = torch.tensor([[LN(0.5), LN(0.9), LN(0.1)]])
    sampling = torch.tensor([[LN(0.2), LN(0.9), LN(0.5)]])
    mask = torch.tensor([[1, 1, 0]])
    # ratios 2.5, 1.0, (masked) -> capped at 2.0; masked positions are 1
    torch.testing.assert_close(truncated_is_ratio(old, sampling, mask, cap=2.0), torch.tensor([[2.0, 1.0, 1.0]]))
    sampling_nan = sampling.clone()
    sampling_nan[0, 1] = float("nan")
    assert truncated_is_ratio(old, sampling_nan, mask)[0, 1].item() == 1.0


def test_importance_sampling_modes_by_hand():
    old = torch.tensor([[LN(0.5), LN(0.5)], [LN(0.1), LN(0.2)]])
    sampling = torch.tensor([[LN(0.25), LN(0.5)], [LN(0.4), LN(0.2)]])
    mask = torch.ones(2, 2)
    # token ratios [[2, 1], [0.25, 1]]; sequence ratios [2, 0.25]
    token_mask = importance_sampling_ratio(old, sampling, mask, mode="token_mask", clip_max=1.5, clip_min=0.5)
    torch.testing.assert_close(token_mask, torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
    seq = importance_sampling_ratio(old, sampling, mask, mode="sequence_truncate", clip_max=1.5, clip_min=0.5)
    torch.testing.assert_close(seq, torch.tensor([[1.5], [0.5]]))
    seq_mask = importance_sampling_ratio(old, sampling, mask, mode="sequence_mask", clip_max=3.0)
    torch.testing.assert_close(seq_mask, torch.tensor([[2.0], [0.25]]))
    with pytest.raises(ValueError, match="mode="):
        importance_sampling_ratio(old, sampling, mask, mode="tokens")


# ------------------------------------------------------------- RLOO, PPO, value loss


def test_rloo_sequence_loss_by_hand():
    # Sequence log-prob = sum of token log-probs; ratios 1.5 and 0.5, A = +1 and -1.
    logps = torch.tensor([[LN(0.6), LN(0.5)], [LN(0.1), -7.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    old = torch.tensor([LN(0.6 * 0.5 / 1.5), LN(0.1 / 0.5)])
    out = rloo_policy_loss(logps, old, torch.tensor([1.0, -1.0]), mask, cliprange=0.2)
    # row 0: max(-1.5, -1.2) = -1.2; row 1: max(0.5, 0.8) = 0.8; both clipped
    assert out.loss.item() == pytest.approx((-1.2 + 0.8) / 2, rel=1e-6)
    assert out.metrics["policy/clipfrac_avg"] == 1.0
    assert out.metrics["val/ratio"] == pytest.approx(1.0)
    assert out.metrics["val/ratio_var"] == pytest.approx(0.5)  # var([1.5, 0.5]), unbiased
    assert out.metrics["policy/approxkl_avg"] == pytest.approx(0.5 * (LN(1.5) ** 2 + LN(0.5) ** 2) / 2)
    assert out.metrics["loss/policy_avg"] == pytest.approx(-0.2, rel=1e-6)
    out.loss.backward()
    assert (logps.grad == 0).all()  # both completions clipped


def test_rloo_unclipped_gradient_is_shared_by_the_tokens_of_a_completion():
    logps = torch.tensor([[LN(0.5), LN(0.5), -3.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    old = torch.tensor([[LN(0.5), LN(0.5 / 1.1), 5.0]])  # token old log-probs; ratio 1.1
    out = rloo_policy_loss(logps, old, torch.tensor([2.0]), mask)
    assert out.loss.item() == pytest.approx(-2.0 * 1.1, rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logps.grad, torch.tensor([[-2.2, -2.2, 0.0]]))


def test_ppo_token_loss_by_hand():
    logps, old, mask = _one_by_three()
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantages = torch.tensor([[1.0, -1.0, 5.0]])
    out = ppo_policy_loss(logps, old, advantages, mask, cliprange=0.2)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: r = 1 -> 1.0; token 2 masked
    assert out.loss.item() == pytest.approx((-1.2 + 1.0) / 2, rel=1e-6)
    assert out.metrics["policy/clipfrac_avg"] == pytest.approx(0.5)
    assert out.metrics["val/ratio"] == pytest.approx(1.25)
    assert out.metrics["policy/approxkl_avg"] == pytest.approx(0.5 * LN(1.5) ** 2 / 2)
    # The same clip fraction under GRPO/RLOO's names: token 0 is above 1 + c with A > 0.
    assert out.metrics["clip_ratio/high_mean"] == pytest.approx(0.5)
    assert out.metrics["clip_ratio/low_mean"] == 0.0
    assert out.metrics["clip_ratio/region_mean"] == pytest.approx(0.5)
    # Ratio 0.5 with A < 0 is clipped from below; ratio 0.5 with A > 0 is not clipped.
    low = ppo_policy_loss(torch.tensor([[LN(0.25), LN(0.25)]]), torch.tensor([[LN(0.5), LN(0.5)]]),
                          torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2), cliprange=0.2)
    assert (low.metrics["clip_ratio/low_mean"], low.metrics["clip_ratio/high_mean"]) == (0.5, 0.0)
    assert low.metrics["clip_ratio/region_mean"] == low.metrics["policy/clipfrac_avg"] == 0.5


def test_value_loss_by_hand():
    values = torch.tensor([[1.0, 2.0, 0.0]], requires_grad=True)
    old_values = torch.tensor([[1.0, 1.0, 0.0]])
    returns = torch.tensor([[2.0, 2.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    out = value_loss(values, old_values, returns, mask, cliprange_value=0.2)
    # clipped values [1.0, 1.2]; errors [1, 0] vs clipped [1, 0.64]; max [1, 0.64]
    assert out.loss.item() == pytest.approx(0.5 * (1 + 0.64) / 2, rel=1e-6)
    assert out.metrics["val/clipfrac_avg"] == pytest.approx(0.5)
    out.loss.backward()
    # token 0: 0.5 * 2 (v - R) / 2 = -0.5; token 1 sits on the clipped branch: no gradient
    torch.testing.assert_close(values.grad, torch.tensor([[-0.5, 0.0, 0.0]]))


def test_rloo_ppo_value_losses_are_finite_on_empty_masks():
    logps = torch.randn(3, 4, requires_grad=True)
    empty = torch.zeros(3, 4)
    for out in (
        rloo_policy_loss(logps, logps.detach() + 0.1, torch.randn(3), empty),
        ppo_policy_loss(logps, logps.detach() + 0.1, torch.randn(3, 4), empty),
        value_loss(logps, logps.detach() + 0.1, torch.randn(3, 4), empty),
    ):
        out.loss.backward()
        assert math.isfinite(out.loss.item()) and torch.isfinite(logps.grad).all()
        assert all(math.isfinite(v) for v in out.metrics.values())


def test_rloo_and_ppo_losses_apply_the_sampling_weight():
    """The sampler/trainer correction multiplies each completion's (RLOO) or token's (PPO) loss."""
    gen = torch.Generator().manual_seed(5)
    logps = torch.randn(4, 3, generator=gen).requires_grad_()
    old = logps.detach() + 0.1 * torch.randn(4, 3, generator=gen)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0])
    weights = torch.tensor([[0.5], [2.0], [1.0], [0.0]])
    plain = rloo_policy_loss(logps, old, advantages, mask)
    weighted = rloo_policy_loss(logps, old, advantages, mask, sampling_ratio=weights)
    assert torch.allclose(weighted.loss, (plain.per_token_loss * weights.squeeze(1)).mean())
    token_weights = torch.rand(4, 3, generator=gen) * 2
    per_token = ppo_policy_loss(logps, old, advantages, mask)
    weighted = ppo_policy_loss(logps, old, advantages, mask, sampling_ratio=token_weights)
    expected = (per_token.per_token_loss * token_weights * mask).sum() / mask.sum()
    assert torch.allclose(weighted.loss, expected)
