"""Multi-armed bandits: the smallest reinforcement-learning problem there is.

A bandit has one state and ``K`` actions ("arms"). Pulling an arm returns a random
reward; the agent must find the best arm while paying for every pull of a worse one.
This is exactly the situation of a language model answering one fixed prompt: the
prompt is the only state, each possible answer is an arm, and a verifier pays out.

What this module implements
- ``BernoulliBandit`` (reward 1 with probability ``p_k``) and ``GaussianBandit``
  (reward ``N(mu_k, sigma^2)``), plus ``make_testbed`` (the 10-armed testbed of
  Sutton & Barto, section 2.3, with means drawn from ``N(0, 1)``).
- Agents: ``RandomAgent`` (the bar to beat), ``EpsilonGreedy`` (sample averages,
  S&B 2.2-2.4), ``UCB1`` (Auer, Cesa-Bianchi & Fischer 2002) and ``GradientBandit``
  (S&B 2.8), which is REINFORCE on a softmax policy with or without a running-mean
  baseline.
- ``run_bandit`` (one run, fully seeded) and ``compare_agents`` (averaged over seeds).

What it simplifies
- Rewards are stationary; no constant step-size tracking of drifting arms.
- Regret is the *expected* (pseudo-)regret ``mu* - mu[a_t]``, not realised rewards,
  so curves are smooth and comparable across seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

__all__ = [
    "Bandit",
    "BernoulliBandit",
    "GaussianBandit",
    "make_testbed",
    "BanditAgent",
    "RandomAgent",
    "EpsilonGreedy",
    "UCB1",
    "GradientBandit",
    "BanditHistory",
    "AgentComparison",
    "run_bandit",
    "compare_agents",
]


# ----------------------------------------------------------------------------- bandits
class Bandit(Protocol):
    """What an agent may ask of an environment with one state and ``n_arms`` actions."""

    means: np.ndarray

    @property
    def n_arms(self) -> int: ...

    def pull(self, arm: int, rng: np.random.Generator | None = None) -> float: ...


class _BanditBase:
    means: np.ndarray

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    @property
    def n_arms(self) -> int:
        return int(self.means.shape[0])

    @property
    def best_arm(self) -> int:
        return int(np.argmax(self.means))

    def _check_arm(self, arm: int) -> None:
        if not 0 <= int(arm) < self.n_arms:
            raise ValueError(
                f"arm={arm} is out of range; this bandit has n_arms={self.n_arms}, "
                f"so use an arm in 0..{self.n_arms - 1}"
            )


class BernoulliBandit(_BanditBase):
    """Arm ``k`` pays 1 with probability ``probs[k]`` and 0 otherwise.

    Teaches: a verifier is a Bernoulli bandit. "Is the answer 4?" pays 1 or 0, and the
    probability of a 1 is what RL tries to raise.

    Args:
        probs: ``(K,)`` success probabilities, each in [0, 1].
        seed: seeds the bandit's own generator (used when ``pull`` gets no ``rng``).
    """

    def __init__(self, probs: Sequence[float], seed: int | None = None) -> None:
        super().__init__(seed)
        probs_arr = np.asarray(probs, dtype=float)
        if probs_arr.ndim != 1 or probs_arr.size == 0:
            raise ValueError(f"probs must be a non-empty 1-D sequence, got shape {probs_arr.shape}")
        if np.any((probs_arr < 0) | (probs_arr > 1)):
            raise ValueError(f"probs must lie in [0, 1], got {probs_arr.tolist()}; clip them first")
        self.means = probs_arr

    def pull(self, arm: int, rng: np.random.Generator | None = None) -> float:
        """One pull of ``arm``: returns 1.0 with probability ``probs[arm]``, else 0.0."""
        self._check_arm(arm)
        rng = self.rng if rng is None else rng
        return float(rng.random() < self.means[arm])


class GaussianBandit(_BanditBase):
    """Arm ``k`` pays a reward drawn from ``N(means[k], std^2)``.

    Teaches: rewards are noisy, so one lucky pull says little; estimates need averages.

    Args:
        means: ``(K,)`` expected reward of each arm.
        std: reward noise, the same for all arms (> 0).
        seed: seeds the bandit's own generator (used when ``pull`` gets no ``rng``).
    """

    def __init__(self, means: Sequence[float], std: float = 1.0, seed: int | None = None) -> None:
        super().__init__(seed)
        means_arr = np.asarray(means, dtype=float)
        if means_arr.ndim != 1 or means_arr.size == 0:
            raise ValueError(f"means must be a non-empty 1-D sequence, got shape {means_arr.shape}")
        if std <= 0:
            raise ValueError(f"std must be > 0, got std={std}")
        self.means = means_arr
        self.std = float(std)

    def pull(self, arm: int, rng: np.random.Generator | None = None) -> float:
        """One pull of ``arm``: a draw from ``N(means[arm], std^2)``."""
        self._check_arm(arm)
        rng = self.rng if rng is None else rng
        return float(rng.normal(self.means[arm], self.std))


def make_testbed(seed: int | None = None, n_arms: int = 10, offset: float = 0.0) -> GaussianBandit:
    """The K-armed testbed of Sutton & Barto (section 2.3): means ``~ N(offset, 1)``, unit noise.

    The seed comes first so that ``make_testbed`` itself is a bandit factory for
    ``compare_agents``. ``offset=4`` is the shifted testbed of S&B figure 2.5.

    Teaches: results on one bandit are anecdotes; average over many random bandits.
    """
    rng = np.random.default_rng(seed)
    return GaussianBandit(rng.normal(offset, 1.0, size=n_arms), std=1.0, seed=seed)


# ------------------------------------------------------------------------------ agents
class BanditAgent(Protocol):
    """An agent picks an arm, sees the reward, and updates itself."""

    def reset(self) -> None: ...

    def select_action(self, rng: np.random.Generator) -> int: ...

    def update(self, action: int, reward: float) -> None: ...


def _argmax_random_tie(values: np.ndarray, rng: np.random.Generator) -> int:
    # Plain argmax always returns the first maximum; at the start every estimate ties,
    # and always picking arm 0 would be a hidden bias.
    best = np.flatnonzero(values == values.max())
    return int(best[0]) if best.size == 1 else int(best[rng.integers(best.size)])


class _SampleAverages:
    """Shared bookkeeping: pull counts ``N[k]`` and sample-average values ``Q[k]``."""

    def __init__(self, n_arms: int, initial_value: float = 0.0) -> None:
        if n_arms < 1:
            raise ValueError(f"n_arms must be >= 1, got {n_arms}")
        self.n_arms = n_arms
        self.initial_value = float(initial_value)
        self.reset()

    def reset(self) -> None:
        self.counts = np.zeros(self.n_arms, dtype=int)
        self.values = np.full(self.n_arms, self.initial_value, dtype=float)

    def update(self, action: int, reward: float) -> None:
        # Incremental mean (S&B eq. 2.3): Q <- Q + (R - Q) / N, no reward list kept.
        self.counts[action] += 1
        self.values[action] += (reward - self.values[action]) / self.counts[action]


class RandomAgent(_SampleAverages):
    """Picks an arm uniformly at random and learns nothing: the baseline to beat."""

    def select_action(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.n_arms))


class EpsilonGreedy(_SampleAverages):
    """With probability ``epsilon`` explore a random arm, else exploit the best estimate.

    Teaches: the exploration/exploitation trade-off. ``epsilon=0`` can lock onto the
    first arm that paid; a larger ``epsilon`` keeps paying for exploration forever.
    Sutton & Barto sections 2.2-2.4 (optimistic ``initial_value`` is section 2.6).
    """

    def __init__(self, n_arms: int, epsilon: float = 0.1, initial_value: float = 0.0) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got epsilon={epsilon}")
        self.epsilon = float(epsilon)
        super().__init__(n_arms, initial_value)

    def select_action(self, rng: np.random.Generator) -> int:
        if rng.random() < self.epsilon:
            return int(rng.integers(self.n_arms))
        return _argmax_random_tie(self.values, rng)


class UCB1(_SampleAverages):
    """Optimism in the face of uncertainty: pick ``argmax Q[k] + c * sqrt(ln t / N[k])``.

    Every arm is pulled once first (in order 0, 1, ..., K-1) because the bonus is
    infinite for an arm never tried. ``c = sqrt(2)`` is UCB1 of Auer et al. (2002),
    whose bonus is ``sqrt(2 ln t / N)``; S&B eq. 2.10 writes the same rule with ``c``.

    Teaches: exploring *where it is uncertain* beats exploring at random.
    """

    def __init__(self, n_arms: int, c: float = float(np.sqrt(2.0))) -> None:
        if c < 0:
            raise ValueError(f"c must be >= 0, got c={c}")
        self.c = float(c)
        super().__init__(n_arms)

    def select_action(self, rng: np.random.Generator) -> int:
        untried = np.flatnonzero(self.counts == 0)
        if untried.size:
            return int(untried[0])
        t = self.counts.sum()  # pulls so far; the next one is pull t + 1
        bonus = self.c * np.sqrt(np.log(t) / self.counts)
        return _argmax_random_tie(self.values + bonus, rng)


class GradientBandit:
    """Softmax policy over arms trained by stochastic gradient ascent (S&B section 2.8).

    Preferences ``H`` give ``pi = softmax(H)``. After pulling ``A`` and seeing ``R``:

        H[a] <- H[a] + step_size * (R - b) * (1[a == A] - pi[a])     for every arm a

    ``1[a == A] - pi[a]`` is ``d log pi(A) / d H[a]``, so this *is* REINFORCE (Williams
    1992) for a one-step episode: the gradient-bandit algorithm and policy gradients
    are the same idea. With ``baseline=True``, ``b`` is the average of the rewards seen
    before this pull (for the first pull the book sets ``b = R_1``, so it moves
    nothing); with ``baseline=False``, ``b = 0``.

    Teaches: the baseline does not change the expected update but makes it far less
    noisy. Shift all rewards by +4 and the no-baseline agent slows down badly
    (S&B figure 2.5); the baseline agent does not notice.
    """

    def __init__(self, n_arms: int, step_size: float = 0.1, baseline: bool = True) -> None:
        if n_arms < 1:
            raise ValueError(f"n_arms must be >= 1, got {n_arms}")
        if step_size <= 0:
            raise ValueError(f"step_size must be > 0, got step_size={step_size}")
        self.n_arms = n_arms
        self.step_size = float(step_size)
        self.baseline = bool(baseline)
        self.reset()

    def reset(self) -> None:
        self.preferences = np.zeros(self.n_arms, dtype=float)
        self.mean_reward = 0.0
        self.n_updates = 0

    @property
    def probs(self) -> np.ndarray:
        """``(K,)`` the current policy ``softmax(H)``."""
        shifted = self.preferences - self.preferences.max()  # avoid overflow in exp
        weights = np.exp(shifted)
        return weights / weights.sum()

    def select_action(self, rng: np.random.Generator) -> int:
        # Inverse-CDF sampling: same distribution as rng.choice(p=...), several times faster.
        cdf = np.cumsum(self.probs)
        return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), self.n_arms - 1))

    def update(self, action: int, reward: float) -> None:
        if self.baseline:
            b = reward if self.n_updates == 0 else self.mean_reward
        else:
            b = 0.0
        score = -self.probs  # d log pi(A) / dH = one_hot(A) - pi
        score[action] += 1.0
        self.preferences += self.step_size * (reward - b) * score
        self.n_updates += 1
        self.mean_reward += (reward - self.mean_reward) / self.n_updates


# ------------------------------------------------------------------------ experiments
@dataclass
class BanditHistory:
    """What happened in one run of ``steps`` pulls (all arrays have shape ``(steps,)``).

    ``regret[t] = mu* - mu[actions[t]]`` is the expected reward lost at step ``t``.
    """

    rewards: np.ndarray
    actions: np.ndarray
    regret: np.ndarray
    best_arm: int

    @property
    def cumulative_regret(self) -> np.ndarray:
        return np.cumsum(self.regret)

    @property
    def optimal_action(self) -> np.ndarray:
        """``(steps,)`` 1.0 where the best arm was pulled."""
        return (self.actions == self.best_arm).astype(float)


def run_bandit(agent: BanditAgent, bandit: Bandit, steps: int, seed: int | None = None) -> BanditHistory:
    """Let ``agent`` play ``bandit`` for ``steps`` pulls, from scratch.

    The agent is reset first. One ``seed`` fixes everything: it is split into one
    generator for the agent's choices and one for the rewards, so changing the agent
    does not change which rewards the arms would have paid.

    Returns:
        ``BanditHistory`` with ``rewards``, ``actions``, ``regret``, each ``(steps,)``.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got steps={steps}")
    agent_rng, reward_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    agent.reset()
    means = np.asarray(bandit.means, dtype=float)
    rewards = np.empty(steps)
    actions = np.empty(steps, dtype=int)
    for t in range(steps):
        action = agent.select_action(agent_rng)
        reward = bandit.pull(action, rng=reward_rng)
        agent.update(action, reward)
        actions[t], rewards[t] = action, reward
    regret = means.max() - means[actions]
    return BanditHistory(rewards=rewards, actions=actions, regret=regret, best_arm=int(np.argmax(means)))


@dataclass
class AgentComparison:
    """One agent averaged over seeds; every array has shape ``(steps,)``."""

    mean_reward: np.ndarray
    optimal_action_rate: np.ndarray
    cumulative_regret: np.ndarray
    cumulative_regret_stderr: np.ndarray
    n_seeds: int


def compare_agents(
    agents: Mapping[str, Callable[[int], BanditAgent]],
    bandit: Bandit | Callable[[int], Bandit],
    steps: int,
    seeds: Sequence[int] = tuple(range(20)),
) -> dict[str, AgentComparison]:
    """Run every agent on the same bandits and seeds and average the curves.

    Args:
        agents: name -> factory ``f(n_arms) -> agent``, e.g.
            ``{"UCB1": UCB1, "eps=0.1": lambda k: EpsilonGreedy(k, 0.1)}``.
        bandit: one fixed bandit, or a factory ``f(seed) -> bandit`` (e.g.
            ``make_testbed``) to draw a fresh bandit per seed.
        steps: pulls per run.
        seeds: one run per seed; all agents see the same seeds (common random numbers,
            so differences come from the agents, not from luck).

    Returns:
        name -> ``AgentComparison`` (mean reward, fraction of optimal pulls and
        cumulative regret with its standard error, each ``(steps,)``).
    """
    if len(seeds) == 0:
        raise ValueError("seeds is empty; pass at least one seed, e.g. seeds=range(20)")
    results: dict[str, AgentComparison] = {}
    for name, make_agent in agents.items():
        histories = []
        for seed in seeds:
            env = bandit(seed) if callable(bandit) and not hasattr(bandit, "pull") else bandit
            histories.append(run_bandit(make_agent(env.n_arms), env, steps, seed=seed))
        cum_regret = np.stack([h.cumulative_regret for h in histories])  # (S, steps)
        results[name] = AgentComparison(
            mean_reward=np.mean([h.rewards for h in histories], axis=0),
            optimal_action_rate=np.mean([h.optimal_action for h in histories], axis=0),
            cumulative_regret=cum_regret.mean(axis=0),
            cumulative_regret_stderr=cum_regret.std(axis=0, ddof=min(1, len(seeds) - 1)) / np.sqrt(len(seeds)),
            n_seeds=len(seeds),
        )
    return results
