"""Beans and ghosts: a tiny Pacman-like grid world with an exact solution.

The vocabulary of RL in one picture. The *environment* is the grid; the *agent* stands
on a cell; the *state* is where it stands and which beans are still there; the
*actions* are up, down, left, right; the *reward* is +1 for eating a bean, -1 for
running into a ghost (which ends the episode) and a small cost for every step, so
dawdling is bad too. The episode also ends when the last bean is eaten.

What this module implements
- ``GridWorld``: the environment, built from a text layout (``S`` start, ``.`` floor,
  ``B`` bean, ``G`` ghost, ``#`` wall), with ``reset``/``step`` and the full transition
  model, so the optimal policy can be computed exactly.
- ``value_iteration``: Bellman optimality backups (Sutton & Barto section 4.4), the
  reference against which learning agents are measured.
- ``render_grid``: the grid as text, optionally with the policy's arrows.

The learning agents (REINFORCE, Q-learning) live in ``gridworld_agents``.

What it simplifies compared to Pacman: ghosts stand still, moves are deterministic,
and there are few beans (the state counts every subset of eaten beans, so ``k`` beans
mean ``2**k`` copies of the grid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = [
    "ACTIONS",
    "ACTION_ARROWS",
    "DEFAULT_LAYOUT",
    "GridWorld",
    "StepResult",
    "value_iteration",
    "render_grid",
]

# (row change, column change) for each action index.
ACTIONS: tuple[tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))
ACTION_NAMES: tuple[str, ...] = ("up", "down", "left", "right")
ACTION_ARROWS: tuple[str, ...] = ("↑", "↓", "←", "→")

# Two beans; the short route to the far bean passes next to two ghosts.
DEFAULT_LAYOUT: tuple[str, ...] = (
    "S..G.",
    ".#.B.",
    "..G..",
    "B...#",
)


@dataclass
class StepResult:
    """What the environment answers to one action."""

    state: int
    reward: float
    done: bool
    event: str  # "move", "bump" (into a wall or the edge), "bean", "ghost", "cleared"


@dataclass
class GridWorld:
    """A deterministic grid world with beans (+``bean_reward``) and ghosts (``ghost_reward``).

    The state index packs the agent's cell and the set of beans still on the board:
    ``state = cell * 2**n_beans + bean_mask`` (bit ``k`` set = bean ``k`` still there).

    Args:
        layout: rows of equal length using ``S . B G #``; exactly one ``S``.
        step_cost: subtracted on every step (a bump into a wall costs the same).
        bean_reward: reward for eating a bean.
        ghost_reward: reward for entering a ghost cell; the episode ends.
        max_steps: episodes are cut off after this many steps (learning only; the
            value iteration solves the untruncated problem).
    """

    layout: Sequence[str] = DEFAULT_LAYOUT
    step_cost: float = 0.04
    bean_reward: float = 1.0
    ghost_reward: float = -1.0
    max_steps: int = 50
    _rows: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rows = [str(row) for row in self.layout]
        if not self._rows or any(len(row) != len(self._rows[0]) for row in self._rows):
            raise ValueError(f"layout rows must be non-empty and of equal length, got {self._rows}")
        bad = set("".join(self._rows)) - set("S.BG#")
        if bad:
            raise ValueError(f"layout uses unknown symbols {sorted(bad)}; allowed are S . B G #")
        starts = self._cells_with("S")
        if len(starts) != 1:
            raise ValueError(f"layout needs exactly one 'S' (start), found {len(starts)}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        self.start_cell = starts[0]
        self.bean_cells = self._cells_with("B")
        self.ghost_cells = set(self._cells_with("G"))
        self.n_beans = len(self.bean_cells)
        self.full_mask = (1 << self.n_beans) - 1
        self.reset()

    # ------------------------------------------------------------------ geometry
    @property
    def shape(self) -> tuple[int, int]:
        return len(self._rows), len(self._rows[0])

    @property
    def n_cells(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def n_states(self) -> int:
        return self.n_cells << self.n_beans

    @property
    def n_actions(self) -> int:
        return len(ACTIONS)

    def symbol(self, row: int, col: int) -> str:
        return self._rows[row][col]

    def _cells_with(self, symbol: str) -> list[int]:
        n_cols = self.shape[1]
        return [r * n_cols + c for r, row in enumerate(self._rows) for c, s in enumerate(row) if s == symbol]

    def encode(self, cell: int, bean_mask: int) -> int:
        return (cell << self.n_beans) | bean_mask

    def decode(self, state: int) -> tuple[int, int]:
        """``state -> (cell, bean_mask)``."""
        return state >> self.n_beans, state & self.full_mask

    @property
    def start_state(self) -> int:
        return self.encode(self.start_cell, self.full_mask)

    def is_terminal(self, state: int) -> bool:
        cell, mask = self.decode(state)
        return cell in self.ghost_cells or (self.n_beans > 0 and mask == 0)

    # ------------------------------------------------------------------ dynamics
    def transition(self, state: int, action: int) -> StepResult:
        """The model: where ``action`` leads from ``state`` and what it pays (no side effects)."""
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action={action} is invalid; use 0..3 for {', '.join(ACTION_NAMES)}")
        cell, mask = self.decode(state)
        n_rows, n_cols = self.shape
        row, col = divmod(cell, n_cols)
        d_row, d_col = ACTIONS[action]
        new_row, new_col = row + d_row, col + d_col
        reward = -self.step_cost
        if not (0 <= new_row < n_rows and 0 <= new_col < n_cols) or self.symbol(new_row, new_col) == "#":
            return StepResult(state, reward, False, "bump")
        new_cell = new_row * n_cols + new_col
        if new_cell in self.ghost_cells:
            return StepResult(self.encode(new_cell, mask), reward + self.ghost_reward, True, "ghost")
        if new_cell in self.bean_cells and mask >> self.bean_cells.index(new_cell) & 1:
            mask &= ~(1 << self.bean_cells.index(new_cell))
            done = mask == 0
            event = "cleared" if done else "bean"
            return StepResult(self.encode(new_cell, mask), reward + self.bean_reward, done, event)
        return StepResult(self.encode(new_cell, mask), reward, False, "move")

    def reset(self) -> int:
        """Start a new episode; returns the start state."""
        self.state = self.start_state
        self.steps_taken = 0
        return self.state

    def step(self, action: int) -> StepResult:
        """Apply ``action``; after ``max_steps`` steps the episode is cut off (``done``)."""
        result = self.transition(self.state, action)
        self.state = result.state
        self.steps_taken += 1
        if self.steps_taken >= self.max_steps:
            result.done = True
        return result


def _model_arrays(world: GridWorld) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The known model as arrays: ``next_state``, ``reward``, ``ends`` ``(S, A)`` and ``terminal`` ``(S,)``."""
    n_states, n_actions = world.n_states, world.n_actions
    next_state = np.zeros((n_states, n_actions), dtype=int)
    reward = np.zeros((n_states, n_actions))
    ends = np.zeros((n_states, n_actions), dtype=bool)
    terminal = np.array([world.is_terminal(s) for s in range(n_states)])
    for s in range(n_states):
        if terminal[s]:
            continue
        for a in range(n_actions):
            result = world.transition(s, a)
            next_state[s, a], reward[s, a], ends[s, a] = result.state, result.reward, result.done
    return next_state, reward, ends, terminal


def policy_evaluation(world: GridWorld, policy: np.ndarray, gamma: float = 0.95, tol: float = 1e-10,
                      max_sweeps: int = 100_000) -> np.ndarray:
    """``V^pi``: the expected discounted return of following ``policy`` from each state.

    Repeats the Bellman expectation backup (S&B eq. 4.5)
    ``V(s) <- sum_a pi(a | s) [r(s, a) + gamma * V(s')]`` until the largest change is below
    ``tol``; its fixed point is the unique solution of the Bellman expectation equation.

    Args:
        policy: ``(n_states, n_actions)`` action probabilities (rows sum to 1), or
            ``(n_states,)`` one action per state.
    Returns:
        ``(n_states,)`` values, 0 in terminal states.
    """
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1), got gamma={gamma}: a policy that never ends has no finite value "
                         "at gamma = 1")
    next_state, reward, ends, terminal = _model_arrays(world)
    probs = np.asarray(policy, dtype=float)
    if probs.ndim == 1:
        probs = np.eye(world.n_actions)[probs.astype(int)]
    if probs.shape != reward.shape or not np.allclose(probs.sum(axis=1), 1.0):
        raise ValueError(f"policy must be ({world.n_states}, {world.n_actions}) probabilities summing to 1 per "
                         f"state, or ({world.n_states},) actions; got shape {probs.shape}")
    values = np.zeros(world.n_states)
    for _ in range(max_sweeps):
        new_values = np.where(terminal, 0.0, (probs * (reward + gamma * np.where(ends, 0.0, values[next_state]))).sum(1))
        delta = np.max(np.abs(new_values - values))
        values = new_values
        if delta < tol:
            return values
    raise RuntimeError(f"policy evaluation did not converge in max_sweeps={max_sweeps}")


def value_iteration(
    world: GridWorld, gamma: float = 0.95, tol: float = 1e-10, max_sweeps: int = 10_000
) -> tuple[np.ndarray, np.ndarray]:
    """Optimal state values and a greedy optimal policy by value iteration.

    Repeats the Bellman optimality backup (S&B eq. 4.10)
    ``V(s) <- max_a [r(s, a) + gamma * V(s')]`` (``V = 0`` after a terminal step) until
    the largest change is below ``tol``. Exact for this deterministic, fully known model.

    Teaches: when the model is known, planning finds the best return directly; RL has to
    discover it by trial and error. The learning curves are compared to
    ``V[world.start_state]``.

    Returns:
        ``(V, policy)``: ``V`` ``(n_states,)`` optimal values, ``policy`` ``(n_states,)``
        greedy action per state (0 in terminal states).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got gamma={gamma}")
    next_state, reward, ends, terminal = _model_arrays(world)  # arrays, so each sweep is vectorised
    values = np.zeros(world.n_states)
    for _ in range(max_sweeps):
        q_values = reward + gamma * np.where(ends, 0.0, values[next_state])  # (S, A)
        new_values = np.where(terminal, 0.0, q_values.max(axis=1))
        delta = np.max(np.abs(new_values - values))
        values = new_values
        if delta < tol:
            break
    else:
        raise RuntimeError(f"value iteration did not converge in max_sweeps={max_sweeps}; with gamma=1 "
                           "a policy that never ends may have unbounded cost: use gamma < 1")
    q_values = reward + gamma * np.where(ends, 0.0, values[next_state])
    return values, np.where(terminal, 0, q_values.argmax(axis=1))


def render_grid(world: GridWorld, policy: np.ndarray | None = None, bean_mask: int | None = None) -> str:
    """The grid as text; with a policy, floor cells show the arrow of the chosen action.

    Args:
        world: the grid world.
        policy: ``(n_states,)`` action per state, or ``(n_states, 4)`` action
            probabilities / values (the argmax is drawn), or ``None``.
        bean_mask: which beans are still there when reading the policy (default: all);
            eaten beans are drawn as floor.

    Teaches: a policy is a map from states to actions; drawing it shows what was learned.
    """
    mask = world.full_mask if bean_mask is None else bean_mask
    actions = None if policy is None else (np.asarray(policy) if np.ndim(policy) == 1 else np.argmax(policy, axis=1))
    n_rows, n_cols = world.shape
    lines = []
    for r in range(n_rows):
        symbols = []
        for c in range(n_cols):
            cell, symbol = r * n_cols + c, world.symbol(r, c)
            if symbol == "B" and not mask >> world.bean_cells.index(cell) & 1:
                symbol = "."
            if actions is not None and symbol in ".S":
                symbol = ACTION_ARROWS[int(actions[world.encode(cell, mask)])]
            symbols.append(symbol)
        lines.append(" ".join(symbols))
    return "\n".join(lines)
