"""Learning to play beans and ghosts: tabular REINFORCE and Q-learning.

What this module implements
- ``reinforce``: Monte-Carlo policy gradient (Williams 1992; Sutton & Barto section
  13.3) with a softmax policy per state, ``pi(.|s) = softmax(theta[s])``. With
  ``baseline=True`` a learned state value ``V(s)`` is subtracted from the return
  (S&B section 13.4, "REINFORCE with baseline").
- ``q_learning``: off-policy TD control (Watkins 1989; S&B section 6.5), epsilon-greedy.
- ``random_agent``: uniform random moves, the floor any learner must beat.
- ``train_gridworld``: one call that runs any of them and returns the learning curve
  next to the optimal score from value iteration.

What it simplifies
- REINFORCE updates once per episode with the policy that generated it and drops the
  ``gamma**t`` factor of S&B's pseudo-code (as nearly all implementations do).
- No function approximation: one number per state (and action).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .gridworld import GridWorld, value_iteration

__all__ = [
    "GridLearningCurve",
    "softmax_rows",
    "run_episode",
    "greedy_score",
    "reinforce",
    "q_learning",
    "random_agent",
    "train_gridworld",
    "GRID_METHODS",
]

GRID_METHODS = ("reinforce", "reinforce_baseline", "q_learning", "random")


@dataclass
class GridLearningCurve:
    """Result of ``train_gridworld``.

    Attributes:
        returns: ``(episodes,)`` score of each training episode (sum of rewards).
        discounted_returns: ``(episodes,)`` ``sum_t gamma**t r_t`` of each episode.
        policy: ``(n_states, 4)`` action probabilities of the final policy (for
            Q-learning: one-hot greedy actions).
        optimal_score: score of the optimal policy from value iteration (the ceiling).
        optimal_value: ``V*(start)``, the optimal discounted return.
        method: which learner produced it.
    """

    returns: np.ndarray
    discounted_returns: np.ndarray
    policy: np.ndarray
    optimal_score: float
    optimal_value: float
    method: str


def softmax_rows(preferences: np.ndarray) -> np.ndarray:
    """``(S, A) -> (S, A)`` softmax over the last axis (numerically stable)."""
    shifted = preferences - preferences.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def run_episode(
    world: GridWorld, choose_action: Callable[[int], int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Play one episode; returns ``(states, actions, rewards)``, each ``(T,)``."""
    states, actions, rewards = [], [], []
    state, done = world.reset(), False
    while not done:
        action = choose_action(state)
        result = world.step(action)
        states.append(state)
        actions.append(action)
        rewards.append(result.reward)
        state, done = result.state, result.done
    return np.array(states), np.array(actions), np.array(rewards, dtype=float)


def _discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``(T,) -> (T,)`` ``G_t = r_t + gamma * G_{t+1}``, computed backwards."""
    returns = np.zeros_like(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def greedy_score(world: GridWorld, policy: np.ndarray) -> float:
    """Score of one episode following ``argmax`` of ``policy`` (``(S,)`` actions or ``(S, A)``)."""
    actions = np.asarray(policy) if np.ndim(policy) == 1 else np.argmax(policy, axis=1)
    _, _, rewards = run_episode(world, lambda s: int(actions[s]))
    return float(rewards.sum())


def reinforce(
    world: GridWorld,
    episodes: int,
    rng: np.random.Generator,
    lr: float = 0.2,
    gamma: float = 0.95,
    baseline: bool = False,
    baseline_lr: float = 0.2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tabular REINFORCE: after each episode, for every step ``t``

        theta[s_t] += lr * (G_t - b(s_t)) * (one_hot(a_t) - pi(.|s_t))

    where ``one_hot(a) - pi`` is ``d log pi(a|s) / d theta[s]`` for a softmax and
    ``b(s) = V(s)`` (learned by ``V(s) += baseline_lr * (G_t - V(s))``) or 0.

    Teaches: the return is a noisy score for every action of the episode; subtracting
    what the state usually earns turns it into "better or worse than usual".

    Returns:
        ``(returns, discounted_returns, policy)``: scores ``(episodes,)``, discounted
        returns ``(episodes,)`` and the final ``(n_states, 4)`` action probabilities.
    """
    theta = np.zeros((world.n_states, world.n_actions))  # (S, A) preferences
    values = np.zeros(world.n_states)  # (S,) baseline V(s)
    scores, discounted = np.zeros(episodes), np.zeros(episodes)
    for episode in range(episodes):
        probs = softmax_rows(theta)  # the policy that generates this episode
        states, actions, rewards = run_episode(world, lambda s: int(rng.choice(world.n_actions, p=probs[s])))
        returns = _discounted_returns(rewards, gamma)  # (T,)
        advantages = returns - values[states] if baseline else returns
        score_fn = -probs[states]  # (T, A): one_hot(a_t) - pi(.|s_t)
        score_fn[np.arange(len(actions)), actions] += 1.0
        # np.add.at accumulates correctly when a state is visited more than once.
        np.add.at(theta, states, lr * advantages[:, None] * score_fn)
        if baseline:
            # One visit at a time: a state visited 30 times in an episode must not take
            # 30 simultaneous steps toward the same target (that overshoots and diverges).
            for state, ret in zip(states, returns):
                values[state] += baseline_lr * (ret - values[state])
        scores[episode], discounted[episode] = rewards.sum(), returns[0]
    return scores, discounted, softmax_rows(theta)


def q_learning(
    world: GridWorld,
    episodes: int,
    rng: np.random.Generator,
    lr: float = 0.5,
    gamma: float = 0.95,
    epsilon: float = 0.1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tabular Q-learning: ``Q(s,a) += lr * (r + gamma * max_a' Q(s',a') - Q(s,a))``.

    Teaches: a value-based learner bootstraps from its own estimates after every step
    instead of waiting for the end of the episode. Scores are those of the epsilon-greedy
    behaviour, so they stay a little below optimal.

    Returns:
        ``(returns, discounted_returns, policy)`` with a one-hot greedy ``policy``.
    """
    q = np.zeros((world.n_states, world.n_actions))  # (S, A)
    scores, discounted = np.zeros(episodes), np.zeros(episodes)
    for episode in range(episodes):
        state, done, t = world.reset(), False, 0
        while not done:
            if rng.random() < epsilon:
                action = int(rng.integers(world.n_actions))
            else:
                best = np.flatnonzero(q[state] == q[state].max())
                action = int(rng.choice(best))
            result = world.step(action)
            ended = world.is_terminal(result.state)  # a time-limit cut is not a true end
            target = result.reward + (0.0 if ended else gamma * q[result.state].max())
            q[state, action] += lr * (target - q[state, action])
            scores[episode] += result.reward
            discounted[episode] += gamma**t * result.reward
            state, done, t = result.state, result.done, t + 1
    return scores, discounted, np.eye(world.n_actions)[q.argmax(axis=1)]


def random_agent(
    world: GridWorld, episodes: int, rng: np.random.Generator, gamma: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniformly random moves, nothing learned: the floor for every learning curve."""
    scores, discounted = np.zeros(episodes), np.zeros(episodes)
    for episode in range(episodes):
        _, _, rewards = run_episode(world, lambda s: int(rng.integers(world.n_actions)))
        scores[episode] = rewards.sum()
        discounted[episode] = _discounted_returns(rewards, gamma)[0]
    return scores, discounted, np.full((world.n_states, world.n_actions), 1.0 / world.n_actions)


def train_gridworld(
    method: str = "reinforce_baseline",
    episodes: int = 500,
    seed: int | None = 0,
    world: GridWorld | None = None,
    gamma: float = 0.95,
    **kwargs: float,
) -> GridLearningCurve:
    """Train one learner on the grid world and return its learning curve.

    Args:
        method: ``"reinforce"``, ``"reinforce_baseline"``, ``"q_learning"`` or ``"random"``.
        episodes: training episodes.
        seed: seeds all randomness of the run.
        world: the environment (default: ``GridWorld()`` with ``DEFAULT_LAYOUT``).
        gamma: discount factor, also used for the value-iteration reference.
        **kwargs: passed to the learner (``lr``, ``baseline_lr``, ``epsilon``).

    Returns:
        ``GridLearningCurve`` with per-episode scores and the optimal score.
    """
    if method not in GRID_METHODS:
        raise ValueError(f"method={method!r} is unknown; choose one of {GRID_METHODS}")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got episodes={episodes}")
    world = GridWorld() if world is None else world
    rng = np.random.default_rng(seed)
    if method == "reinforce":
        scores, discounted, policy = reinforce(world, episodes, rng, gamma=gamma, baseline=False, **kwargs)
    elif method == "reinforce_baseline":
        scores, discounted, policy = reinforce(world, episodes, rng, gamma=gamma, baseline=True, **kwargs)
    elif method == "q_learning":
        scores, discounted, policy = q_learning(world, episodes, rng, gamma=gamma, **kwargs)
    else:
        scores, discounted, policy = random_agent(world, episodes, rng, gamma=gamma)
    optimal_values, optimal_policy = value_iteration(world, gamma=gamma)
    return GridLearningCurve(
        returns=scores,
        discounted_returns=discounted,
        policy=policy,
        optimal_score=greedy_score(world, optimal_policy),
        optimal_value=float(optimal_values[world.start_state]),
        method=method,
    )
