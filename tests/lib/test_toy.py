"""Tests for course_lib.toy: bandits, the answer policy, the grid world, gradient variance, plots.

Expected values are worked out by hand in the comments, or come from an independent
computation (closed-form expectation, finite differences, a geometric distribution).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib.toy.answer_policy import (
    CANDIDATE_ANSWERS,
    AnswerPolicy,
    binary_reward,
    combined_reward,
    correctness_reward,
    expected_attempts,
    is_number_reward,
    reinforce_step,
    sample_until_success,
    train_answer_policy,
    verify_answer,
)
from course_lib.toy.bandits import (
    BernoulliBandit,
    EpsilonGreedy,
    GaussianBandit,
    GradientBandit,
    RandomAgent,
    UCB1,
    compare_agents,
    make_testbed,
    run_bandit,
)
from course_lib.toy.gridworld import GridWorld, policy_evaluation, render_grid, value_iteration
from course_lib.toy.gridworld_agents import greedy_score, train_gridworld
from course_lib.toy.variance import exact_policy_gradient, gradient_variance


# ----------------------------------------------------------------------------- bandits
def test_ucb1_pulls_every_arm_once_first():
    bandit = BernoulliBandit([0.9, 0.1, 0.5, 0.3, 0.7], seed=0)
    history = run_bandit(UCB1(bandit.n_arms), bandit, steps=20, seed=1)
    assert history.actions[:5].tolist() == [0, 1, 2, 3, 4]


def test_ucb1_bonus_by_hand():
    agent = UCB1(2)
    agent.counts = np.array([1, 10])
    agent.values = np.array([0.5, 0.6])
    # t = 11 pulls: arm 0 scores 0.5 + sqrt(2 ln 11 / 1) = 2.69, arm 1 scores 0.6 + sqrt(2 ln 11 / 10) = 1.29.
    assert agent.select_action(np.random.default_rng(0)) == 0
    # Raise arm 1's estimate: 2.0 + sqrt(2 ln 11 / 10) = 2.6926 now beats arm 0's 0.5 + 2.1899 = 2.6899.
    agent.values = np.array([0.5, 2.0])
    assert agent.select_action(np.random.default_rng(0)) == 1


def test_gradient_bandit_two_arm_update_by_hand():
    # No baseline: H = [0, 0], pi = [.5, .5]; pull arm 0, reward 1, step 0.1:
    # H0 += 0.1 * 1 * (1 - .5) = 0.05, H1 += 0.1 * 1 * (0 - .5) = -0.05.
    agent = GradientBandit(2, step_size=0.1, baseline=False)
    agent.update(0, 1.0)
    np.testing.assert_allclose(agent.preferences, [0.05, -0.05])
    np.testing.assert_allclose(agent.probs, [1 / (1 + math.exp(-0.1)), 1 / (1 + math.exp(0.1))])

    # With the running-mean baseline: first update has b = R_1, so nothing moves; the
    # second (arm 1, reward 0) has b = 1: H1 += 0.1 * (0 - 1) * (1 - .5) = -0.05,
    # H0 += 0.1 * (0 - 1) * (0 - .5) = +0.05.
    agent = GradientBandit(2, step_size=0.1, baseline=True)
    agent.update(0, 1.0)
    np.testing.assert_allclose(agent.preferences, [0.0, 0.0])
    agent.update(1, 0.0)
    np.testing.assert_allclose(agent.preferences, [0.05, -0.05])
    assert agent.mean_reward == pytest.approx(0.5)


def test_sample_average_is_incremental_mean():
    agent = EpsilonGreedy(3, epsilon=0.0)
    for reward in (1.0, 0.0, 1.0):
        agent.update(2, reward)
    assert agent.values[2] == pytest.approx(2 / 3)
    assert agent.counts.tolist() == [0, 0, 3]
    assert agent.select_action(np.random.default_rng(0)) == 2  # greedy picks the best estimate


def test_bernoulli_bandit_pays_at_its_rate_and_regret_is_expected_loss():
    bandit = BernoulliBandit([0.2, 0.8], seed=3)
    pulls = [bandit.pull(1) for _ in range(4000)]
    assert np.mean(pulls) == pytest.approx(0.8, abs=4 * math.sqrt(0.16 / 4000))
    history = run_bandit(RandomAgent(2), bandit, steps=50, seed=0)
    np.testing.assert_allclose(history.regret, np.where(history.actions == 1, 0.0, 0.6))
    assert set(np.unique(history.rewards)) <= {0.0, 1.0}


def test_run_bandit_is_reproducible():
    bandit = GaussianBandit([0.0, 1.0, 0.5], std=1.0)
    first = run_bandit(EpsilonGreedy(3, 0.1), bandit, steps=100, seed=7)
    second = run_bandit(EpsilonGreedy(3, 0.1), bandit, steps=100, seed=7)
    np.testing.assert_array_equal(first.actions, second.actions)
    np.testing.assert_array_equal(first.rewards, second.rewards)


def test_learning_agents_beat_random_over_seeds():
    agents = {
        "random": RandomAgent,
        "eps": lambda k: EpsilonGreedy(k, 0.1),
        "ucb": UCB1,
        "gradient": lambda k: GradientBandit(k, 0.1, baseline=True),
    }
    results = compare_agents(agents, make_testbed, steps=300, seeds=range(8))
    random_regret = results["random"].cumulative_regret[-1]
    for name in ("eps", "ucb", "gradient"):
        assert results[name].cumulative_regret[-1] < 0.5 * random_regret, name
        assert results[name].optimal_action_rate[-50:].mean() > 0.5, name


def test_gradient_bandit_baseline_ignores_a_reward_shift():
    # S&B figure 2.5: add 4 to every arm. The baseline agent sees the same advantages
    # (its baseline shifts by 4 too) and acts identically; without it learning slows.
    plain = run_bandit(GradientBandit(10, 0.1, baseline=True), make_testbed(5), steps=200, seed=5)
    shifted = run_bandit(GradientBandit(10, 0.1, baseline=True), make_testbed(5, offset=4.0), steps=200, seed=5)
    np.testing.assert_array_equal(plain.actions, shifted.actions)

    agents = {"with": lambda k: GradientBandit(k, 0.1, True), "without": lambda k: GradientBandit(k, 0.1, False)}
    results = compare_agents(agents, lambda s: make_testbed(s, offset=4.0), steps=300, seeds=range(8))
    assert results["with"].cumulative_regret[-1] < 0.75 * results["without"].cumulative_regret[-1]


def test_bandit_errors_name_the_argument():
    with pytest.raises(ValueError, match="probs"):
        BernoulliBandit([0.5, 1.5])
    with pytest.raises(ValueError, match="arm=3"):
        BernoulliBandit([0.5, 0.5]).pull(3)
    with pytest.raises(ValueError, match="epsilon"):
        EpsilonGreedy(3, epsilon=2.0)


# ---------------------------------------------------------------------- answer policy
def test_verifier_and_reward_functions():
    assert verify_answer("4") and verify_answer(" 4 ") and verify_answer("4.0")
    assert not verify_answer("3") and not verify_answer("cat") and not verify_answer("C")
    assert [is_number_reward(a) for a in ("4", "-10", "12.31", "cat", "%$", "nan")] == [1, 1, 1, -1, -1, -1]
    assert [correctness_reward(a) for a in ("4", "3")] == [3, -3]
    # The seed's example, summed: "4" -> 1 + 3, "3" -> 1 - 3, "cat" -> -1 - 3.
    assert [combined_reward(a) for a in ("4", "3", "cat")] == [4, -2, -4]
    assert [binary_reward(a) for a in ("4", "17")] == [1.0, 0.0]


def test_reinforce_step_by_hand():
    # Three answers, zero logits (pi = 1/3 each), one sample of answer 0 with reward 1,
    # lr = 1: logits += (one_hot(0) - pi) = [2/3, -1/3, -1/3], so p0 = e / (e + 2).
    new_logits = reinforce_step(torch.zeros(3), [0], [1.0], lr=1.0)
    np.testing.assert_allclose(new_logits.numpy(), [2 / 3, -1 / 3, -1 / 3], atol=1e-12)
    assert torch.softmax(new_logits, 0)[0].item() == pytest.approx(math.e / (math.e + 2))

    # Batch mean baseline, samples [0, 1] with rewards [1, 0]: advantages [.5, -.5];
    # step = mean(.5 (e0 - pi), -.5 (e1 - pi)) = .25 (e0 - e1).
    new_logits = reinforce_step(torch.zeros(3), [0, 1], [1.0, 0.0], lr=1.0, baseline="mean")
    np.testing.assert_allclose(new_logits.numpy(), [0.25, -0.25, 0.0], atol=1e-12)


def test_negative_reward_moves_mass_to_other_answers_by_hand():
    # pi = [.5, .3, .2]; "cat" sampled with reward -3, lr = .5:
    # dz = .5 * (-3) * (one_hot(cat) - pi) = [-.75, +.45, +.30]. The freed mass goes
    # mostly to the already likely "3": the logit gain is proportional to pi.
    policy = AnswerPolicy.from_probs([0.5, 0.3, 0.2], answers=("cat", "3", "4"))
    new = AnswerPolicy(policy.answers, reinforce_step(policy.logits, [0], [-3.0], lr=0.5))
    unnormalised = np.array([0.5 * math.exp(-0.75), 0.3 * math.exp(0.45), 0.2 * math.exp(0.30)])
    np.testing.assert_allclose(new.probs, unnormalised / unnormalised.sum(), atol=1e-12)
    assert new.prob_of("cat") < 0.5 and new.prob_of("4") > 0.2


def test_sample_until_success_mean_is_one_over_p():
    policy = AnswerPolicy.uniform()  # p("4") = 1/16
    attempts = [sample_until_success(policy, rng=np.random.default_rng(seed)) for seed in range(2000)]
    p = 1 / len(CANDIDATE_ANSWERS)
    stderr = math.sqrt((1 - p) / p**2 / len(attempts))  # geometric distribution
    assert np.mean(attempts) == pytest.approx(expected_attempts(p), abs=4 * stderr)
    assert min(attempts) >= 1


def test_zero_probability_answer_is_never_found_nor_learned():
    probs = np.full(len(CANDIDATE_ANSWERS), 1.0)
    probs[CANDIDATE_ANSWERS.index("4")] = 0.0
    policy = AnswerPolicy.from_probs(probs)
    assert sample_until_success(policy, rng=np.random.default_rng(0), max_attempts=2000) is None
    assert expected_attempts(0.0) == math.inf
    trace = train_answer_policy(policy, combined_reward, steps=60, seed=0)
    assert trace.first_success_step is None
    assert np.all(trace.prob_correct == 0.0)

    # Same policy with 1% on "4": patience finds it, and RL then keeps it.
    probs[:] = 0.99 / (len(probs) - 1)
    probs[CANDIDATE_ANSWERS.index("4")] = 0.01
    trace = train_answer_policy(AnswerPolicy.from_probs(probs), combined_reward, steps=100, seed=0)
    assert trace.prob_correct[0] == pytest.approx(0.01)
    assert trace.first_success_step is not None and trace.prob_correct[-1] > 0.9


def test_binary_reward_without_baseline_waits_for_the_first_success():
    trace = train_answer_policy(AnswerPolicy.uniform(), binary_reward, steps=30, batch_size=2, lr=1.0, seed=0)
    first = trace.first_success_step
    assert first is not None and first > 0  # all-zero rewards: nothing to learn from
    np.testing.assert_allclose(trace.prob_correct[: first + 1], 1 / 16)
    assert trace.prob_correct[-1] > trace.prob_correct[first]


def test_penalties_push_mass_toward_unseen_right_answer_by_hand():
    # Uniform over ("cat", "3", "4"); the batch holds only bad answers: "cat" (-4) and
    # "3" (-2). lr = 1, no baseline: dz_j = mean_i r_i (1[a_i = j] - 1/3)
    #   dz_cat = (-4 * 2/3 - 2 * -1/3) / 2 = -1,  dz_3 = (4/3 - 4/3) / 2 = 0,
    #   dz_4 = (4/3 + 2/3) / 2 = +1,  so p("4") = e / (e^-1 + 1 + e) = 0.665:
    # "4" was never sampled, yet it gained, because the bad answers were pushed down.
    answers = ("cat", "3", "4")
    rewards = [combined_reward(a) for a in ("cat", "3")]
    new_logits = reinforce_step(torch.zeros(3), [0, 1], rewards, lr=1.0)
    np.testing.assert_allclose(new_logits.numpy(), [-1.0, 0.0, 1.0], atol=1e-12)
    new = AnswerPolicy(answers, new_logits)
    assert new.prob_of("4") == pytest.approx(math.e / (math.exp(-1) + 1 + math.e))


# -------------------------------------------------------------------------- grid world
def test_value_iteration_3x3_by_hand():
    # S G B     The ghost blocks the direct route; the detour is down, right, right,
    # . . .     up: 4 steps. Return = -c - g c - g^2 c + g^3 (1 - c) with c = 0.1.
    # . . .
    world = GridWorld(["SGB", "...", "..."], step_cost=0.1)
    values, policy = value_iteration(world, gamma=0.9)
    assert values[world.start_state] == pytest.approx(-0.1 - 0.09 - 0.081 + 0.729 * 0.9)
    values_undiscounted, _ = value_iteration(world, gamma=1.0)
    assert values_undiscounted[world.start_state] == pytest.approx(1.0 - 4 * 0.1)
    assert greedy_score(world, policy) == pytest.approx(0.6)
    rows = render_grid(world, policy).splitlines()
    assert rows[0] == "↓ G B"
    assert rows[1].split()[:3] == ["→", "→", "↑"]


def test_policy_evaluation_by_hand_and_by_monte_carlo():
    # "S B": right eats the bean (1 - c, game over); the other three moves bump (-c, stay).
    # Uniform policy: V = 1/4 (1 - c) + 3/4 (-c + g V)  =>  V = (1/4 - c) / (1 - 3/4 g).
    c, g = 0.1, 0.9
    world = GridWorld(["SB"], step_cost=c)
    uniform = np.full((world.n_states, 4), 0.25)
    assert policy_evaluation(world, uniform, gamma=g)[world.start_state] == pytest.approx((0.25 - c) / (1 - 0.75 * g))
    assert policy_evaluation(world, np.full(world.n_states, 3), gamma=g)[world.start_state] == pytest.approx(1 - c)
    # The optimal policy's value is V* (the two Bellman equations agree on it).
    world = GridWorld()
    optimal_values, optimal_policy = value_iteration(world, gamma=0.95)
    np.testing.assert_allclose(policy_evaluation(world, optimal_policy, gamma=0.95), optimal_values, atol=1e-8)
    # The uniform random walker: its value against the mean discounted return of 4,000 played episodes.
    value = policy_evaluation(world, np.full((world.n_states, 4), 0.25), gamma=0.95)[world.start_state]
    rng, long_world = np.random.default_rng(0), GridWorld(max_steps=2_000)
    returns = []
    for _ in range(4000):
        long_world.reset()
        total, discount, done = 0.0, 1.0, False
        while not done:
            result = long_world.step(int(rng.integers(4)))
            total, discount, done = total + discount * result.reward, discount * 0.95, result.done
        returns.append(total)
    assert abs(np.mean(returns) - value) < 4 * np.std(returns) / np.sqrt(len(returns))
    with pytest.raises(ValueError, match="gamma"):
        policy_evaluation(world, optimal_policy, gamma=1.0)
    with pytest.raises(ValueError, match="summing to 1"):
        policy_evaluation(world, np.full((world.n_states, 4), 0.3))


def test_gridworld_rules():
    world = GridWorld(["S#B", ".G."], step_cost=0.1, max_steps=3)
    start = world.reset()
    bump = world.step(3)  # right: wall
    assert (bump.state, bump.reward, bump.done, bump.event) == (start, -0.1, False, "bump")
    assert world.step(1).event == "move"  # down to (1, 0)
    ghost = world.transition(world.state, 3)  # right into the ghost
    assert ghost.done and ghost.reward == pytest.approx(-1.1) and ghost.event == "ghost"
    assert world.step(0).done  # third step: cut off by max_steps
    one_bean = GridWorld(["SB"], step_cost=0.1)
    eat = one_bean.transition(one_bean.start_state, 3)
    assert eat.event == "cleared" and eat.done and eat.reward == pytest.approx(0.9)


def test_default_layout_optimal_score_by_hand():
    # Near bean first: down x3 (bean at bottom-left), then right x3, up x2 to the other
    # bean: 8 steps, 2 beans: 2 - 8 * 0.04 = 1.68.
    curve = train_gridworld("random", episodes=5, seed=0)
    assert curve.optimal_score == pytest.approx(1.68)


@pytest.mark.parametrize("method", ["reinforce", "reinforce_baseline", "q_learning"])
def test_learners_beat_random_on_the_grid(method):
    seeds = range(3)
    random_score = np.mean([train_gridworld("random", 150, seed=s).returns.mean() for s in seeds])
    learned = [train_gridworld(method, 250, seed=s) for s in seeds]
    late_score = np.mean([c.returns[-50:].mean() for c in learned])
    assert late_score > random_score + 1.5
    assert late_score <= learned[0].optimal_score + 1e-9


# --------------------------------------------------------------------------- variance
SEED_REWARDS = [combined_reward(a) for a in CANDIDATE_ANSWERS]


def test_exact_gradient_matches_finite_differences():
    logits = np.linspace(-1.0, 1.0, len(SEED_REWARDS))

    def expected_reward(z):
        p = np.exp(z - z.max())
        return (p / p.sum()) @ np.asarray(SEED_REWARDS)

    eps = 1e-6
    numeric = [
        (expected_reward(logits + eps * e) - expected_reward(logits - eps * e)) / (2 * eps) for e in np.eye(logits.size)
    ]
    np.testing.assert_allclose(exact_policy_gradient(logits, SEED_REWARDS), numeric, atol=1e-8)


@pytest.mark.parametrize("baseline", [None, "leave_one_out", -2.375])
def test_gradient_estimator_is_unbiased(baseline):
    logits = torch.zeros(len(SEED_REWARDS))
    result = gradient_variance(logits, SEED_REWARDS, n_samples=8, baseline=baseline, trials=4000, seed=0)
    tolerance = 4.5 * result.mean_gradient_stderr
    assert np.all(np.abs(result.mean_gradient - result.exact_gradient) < tolerance)


def test_batch_mean_baseline_shrinks_the_gradient_by_n_minus_1_over_n():
    logits = torch.zeros(len(SEED_REWARDS))
    result = gradient_variance(logits, SEED_REWARDS, n_samples=2, baseline="mean", trials=4000, seed=0)
    assert result.expected_scale == 0.5
    assert np.all(np.abs(result.mean_gradient - 0.5 * result.exact_gradient) < 4.5 * result.mean_gradient_stderr)
    # and it is measurably not the full gradient: the correct answer's component is halved
    correct = CANDIDATE_ANSWERS.index("4")
    gap = abs(result.mean_gradient[correct] - result.exact_gradient[correct])
    assert gap > 10 * result.mean_gradient_stderr[correct]


def test_baselines_lower_the_variance():
    logits = torch.zeros(len(SEED_REWARDS))
    runs = {
        b: gradient_variance(logits, SEED_REWARDS, 8, b, trials=2000, seed=0) for b in (None, "mean", "leave_one_out")
    }
    expected_reward = float(np.mean(SEED_REWARDS))  # uniform policy: E[r] = -2.375
    runs["E[r]"] = gradient_variance(logits, SEED_REWARDS, 8, expected_reward, trials=2000, seed=0)
    for name in ("mean", "leave_one_out", "E[r]"):
        assert runs[name].total_variance < 0.6 * runs[None].total_variance, name
    # RLOO's advantages are n/(n-1) times the batch-mean ones, sample by sample.
    np.testing.assert_allclose(runs["leave_one_out"].gradients, 8 / 7 * runs["mean"].gradients, atol=1e-12)
    # A baseline far from the rewards makes things worse, not better.
    far_baseline = gradient_variance(logits, SEED_REWARDS, 8, 10.0, trials=2000, seed=0)
    assert far_baseline.total_variance > runs[None].total_variance


# ------------------------------------------------------------------------------ plots
def test_plots_return_labelled_figures(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from course_lib.toy import plots

    matplotlib.use("Agg")
    open_before = plt.get_fignums()
    world = GridWorld()
    curve = train_gridworld("q_learning", 60, seed=0, world=world)
    comparison = compare_agents({"ucb": UCB1, "random": RandomAgent}, make_testbed, steps=50, seeds=range(2))
    policy = AnswerPolicy.uniform()
    trained = train_answer_policy(policy, steps=5, seed=0).policy
    variance = {
        str(b): gradient_variance(policy.logits, SEED_REWARDS, 4, b, trials=50, seed=0) for b in (None, "leave_one_out")
    }
    figures = {
        "curves": plots.plot_learning_curves(
            [curve.returns, np.stack([curve.returns] * 2)], ["one", "two"], smooth=5, optimal=curve.optimal_score
        ),
        "bandits": plots.plot_bandit_comparison(comparison),
        "variance": plots.plot_gradient_variance(variance),
        "answers": plots.plot_answer_distribution(policy.probs, trained.probs, policy.answers),
        "grid": plots.plot_gridworld(world, curve.policy),
    }
    for name, fig in figures.items():
        assert isinstance(fig, Figure), name
        axes = fig.get_axes()
        assert axes and all(ax.get_title() for ax in axes), name
        if name != "grid":  # the grid is a picture, not a chart
            assert all(ax.get_xlabel() and ax.get_ylabel() for ax in axes), name
            assert any(ax.get_legend() is not None for ax in axes), name
        fig.savefig(tmp_path / f"{name}.png", dpi=40)  # low resolution: the test checks that it renders
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert plt.get_fignums() == open_before  # nothing left open in pyplot
    with pytest.raises(ValueError, match="labels"):
        plots.plot_learning_curves([curve.returns], ["a", "b"])


def test_learning_curve_band_stays_inside_given_limits():
    """A band (mean +- std over seeds) is clipped to explicit limits when they are given."""
    import matplotlib

    from course_lib.toy import plots

    matplotlib.use("Agg")
    probabilities = np.array([[0.0, 0.5, 1.0, 1.0], [0.0, 0.1, 0.2, 1.0], [0.9, 0.95, 1.0, 0.4]])  # (seeds, T)
    fig = plots.plot_learning_curves([probabilities], ["p"], limits=(0.1, 0.9))
    (band,) = fig.get_axes()[0].collections
    vertices = np.concatenate([path.vertices for path in band.get_paths()])
    mean, std = probabilities.mean(0), probabilities.std(0)
    assert (mean - std).min() < 0.1 and (mean + std).max() > 0.9  # the limits bite
    assert (vertices[:, 1].min(), vertices[:, 1].max()) == pytest.approx((0.1, 0.9))


def test_figures_keep_bands_in_range_count_whole_steps_and_name_ideas():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.toy import plots

    # (seeds, T) probabilities whose mean + std passes 1 at step 3: the band must not.
    probs = np.array([[0.0, 0.1, 0.9, 1.0], [0.0, 0.9, 1.0, 1.0], [0.0, 0.0, 0.2, 1.0]])
    assert (probs.mean(0) + probs.std(0)).max() > 1
    fig = plots.plot_learning_curves([probs], ["P('4')"], ylabel="P('4')")
    ax = fig.axes[0]
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() >= 0.0 and band.max() <= 1.0
    fig.canvas.draw()
    ticks = [t.get_text().replace("\u2212", "-") for t in ax.get_xticklabels() if t.get_text()]
    assert ticks and all(float(t).is_integer() for t in ticks)  # steps, never "2.5"

    # Smoothed: the raw curve stays, faint, under the moving average; legends name the idea.
    fig = plots.plot_learning_curves([np.arange(30.0)], ["q_learning"], smooth=5)
    raw, smoothed = fig.axes[0].lines[:2]
    assert raw.get_alpha() < 0.5 and smoothed.get_alpha() is None
    np.testing.assert_allclose(raw.get_ydata(), np.arange(30.0))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["Q-learning"]

    # Bar charts carry their values.
    fig = plots.plot_answer_distribution([0.5, 0.5], [0.25, 0.75], ["3", "4"])
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0.25", "0.50", "0.50", "0.75"]
