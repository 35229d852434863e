"""Figures for the RL-basics lessons. Every function returns a matplotlib ``Figure``.

Nothing here calls ``plt.show()``: a notebook displays the returned figure, a test
inspects it, a script saves it. Figures are created with ``matplotlib.figure.Figure``
directly (not ``pyplot``), so they work under any backend and are not kept alive by
pyplot's global figure list.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Rectangle
from matplotlib.ticker import MaxNLocator

from .bandits import AgentComparison
from .gridworld import ACTIONS, GridWorld
from .variance import GradientVarianceResult

__all__ = [
    "moving_average",
    "plot_learning_curves",
    "plot_bandit_comparison",
    "plot_gradient_variance",
    "plot_answer_distribution",
    "plot_gridworld",
]


#: Legend names for the learners' identifiers used by ``course_lib.toy`` (a legend names the
#: idea, not the code); any other label is shown as given.
READABLE_LABELS = {
    "random": "random policy",
    "reinforce": "REINFORCE",
    "reinforce_baseline": "REINFORCE with baseline V(s)",
    "q_learning": "Q-learning",
}


def readable_label(label: str) -> str:
    """The legend name of a learner: ``"q_learning"`` -> ``"Q-learning"``; others unchanged."""
    return READABLE_LABELS.get(label, label)


def _integer_steps(*axes) -> None:
    """Step and episode axes count whole steps: no 2.5 tick labels."""
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """``(T,) -> (T,)`` trailing mean over up to ``window`` points (shorter at the start)."""
    values = np.asarray(values, dtype=float)
    if window <= 1 or values.size == 0:
        return values
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, values.size + 1), window)
    return (cumulative[1:] - cumulative[np.arange(1, values.size + 1) - counts]) / counts


def plot_learning_curves(
    histories: Sequence[Sequence[float] | np.ndarray],
    labels: Sequence[str],
    title: str = "Learning curves",
    xlabel: str = "episode",
    ylabel: str = "return",
    smooth: int = 1,
    optimal: float | None = None,
    optimal_label: str = "optimal",
    limits: tuple[float, float] | None = None,
) -> Figure:
    """One line per learner; a 2-D history ``(seeds, T)`` is drawn as mean +- 1 std band.

    Args:
        histories: per learner, ``(T,)`` values or ``(seeds, T)`` values.
        labels: legend entry per learner.
        smooth: trailing moving-average window applied to each curve.
        optimal: draws a dashed horizontal line at this value (e.g. value iteration).
        limits: ``(low, high)`` range the plotted quantity cannot leave, e.g. ``(0, 1)`` for
            a probability; the band is clipped to it, so that mean +- std never shows
            impossible values.
    """
    if len(histories) != len(labels):
        raise ValueError(f"histories and labels must have the same length, got {len(histories)} and {len(labels)}")
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for history, label in zip(histories, labels):
        label = readable_label(label)
        data = np.atleast_2d(np.asarray(history, dtype=float))  # (seeds, T)
        curves = np.stack([moving_average(row, smooth) for row in data])
        mean = curves.mean(axis=0)
        steps = np.arange(1, mean.size + 1)
        if smooth > 1:  # the raw curve stays visible, faint, under its moving average
            raw = ax.plot(steps, data.mean(axis=0), linewidth=0.8, alpha=0.25)[0]
        (line,) = ax.plot(steps, mean, label=label if data.shape[0] == 1 else f"{label} (mean of {data.shape[0]})",
                          **({"color": raw.get_color()} if smooth > 1 else {}))
        if data.shape[0] > 1:
            std = curves.std(axis=0)
            # mean +- std, kept inside `limits` when given, else inside the values the runs
            # reached: a band of probabilities (or of any bounded quantity) never crosses the
            # bounds the data respect.
            low, high = limits if limits is not None else (np.nanmin(curves), np.nanmax(curves))
            ax.fill_between(steps, np.clip(mean - std, low, high), np.clip(mean + std, low, high),
                            color=line.get_color(), alpha=0.2, linewidth=0)
    if optimal is not None:
        ax.axhline(optimal, color="black", linestyle="--", linewidth=1, label=optimal_label)
    title_suffix = f" (moving average of {smooth}; raw curve faint)" if smooth > 1 else ""
    ax.set(title=title + title_suffix, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    _integer_steps(ax)
    ax.legend(loc="best")
    return fig


def plot_bandit_comparison(comparison: Mapping[str, AgentComparison], title: str = "Bandit agents compared") -> Figure:
    """Three panels from ``compare_agents``: average reward, % optimal arm, cumulative regret.

    Teaches: reward curves are noisy, "% optimal action" shows who found the best arm,
    and regret (reward lost versus always pulling the best arm) is what a learner pays
    for exploring; logarithmic regret (UCB1) flattens, linear regret never does.
    """
    fig = Figure(figsize=(13, 4), layout="constrained")
    ax_reward, ax_optimal, ax_regret = fig.subplots(1, 3)
    n_seeds = 0
    for name, result in comparison.items():
        steps = np.arange(1, result.mean_reward.size + 1)
        (line,) = ax_reward.plot(steps, moving_average(result.mean_reward, 10), label=name)
        ax_reward.plot(steps, result.mean_reward, color=line.get_color(), linewidth=0.6, alpha=0.2)  # raw, faint
        ax_optimal.plot(steps, 100 * moving_average(result.optimal_action_rate, 10), label=name)
        ax_optimal.plot(steps, 100 * result.optimal_action_rate, color=line.get_color(), linewidth=0.6, alpha=0.2)
        (line,) = ax_regret.plot(steps, result.cumulative_regret, label=name)
        ax_regret.fill_between(
            steps,
            result.cumulative_regret - result.cumulative_regret_stderr,
            result.cumulative_regret + result.cumulative_regret_stderr,
            color=line.get_color(), alpha=0.2, linewidth=0,
        )
        n_seeds = result.n_seeds
    ax_reward.set(title="Average reward (moving average of 10; raw faint)", xlabel="step", ylabel="reward")
    ax_optimal.set(title="Best arm chosen (moving average of 10; raw faint)", xlabel="step", ylabel="% of runs",
                   ylim=(0, 100))
    ax_regret.set(title="Cumulative regret (± 1 s.e.)", xlabel="step", ylabel="expected reward lost")
    for ax in (ax_reward, ax_optimal, ax_regret):
        ax.grid(alpha=0.3)
    _integer_steps(ax_reward, ax_optimal, ax_regret)
    ax_regret.legend(loc="upper left")
    fig.suptitle(f"{title} (average over {n_seeds} runs)")
    return fig


def plot_gradient_variance(
    results: Mapping[str, GradientVarianceResult],
    action_labels: Sequence[str] | None = None,
    title: str = "REINFORCE gradient: with and without a baseline",
) -> Figure:
    """Left: total variance per baseline. Right: mean estimated gradient vs the exact one.

    Args:
        results: label -> ``gradient_variance(...)`` result (same policy and rewards).
        action_labels: names for the x axis of the right panel (e.g. the answers).

    Teaches: the baseline shrinks the spread of the estimate a lot while the average
    still lands on the exact gradient (scaled by ``(n-1)/n`` for the batch-mean baseline).
    """
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    ax_var, ax_mean = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
    names = list(results)
    variances = [results[name].total_variance for name in names]
    bars = ax_var.bar(names, variances, color=[f"C{i}" for i in range(len(names))])
    ax_var.bar_label(bars, fmt="%.3f")
    ax_var.set_ylim(0, 1.15 * max(variances, default=1.0))  # room for the value labels
    n_samples = next(iter(results.values())).n_samples if results else 0
    ax_var.set(title=f"Total variance of the estimate (n = {n_samples})", xlabel="baseline",
               ylabel="sum of per-logit variances")
    ax_var.tick_params(axis="x", rotation=20)

    if results:
        exact = next(iter(results.values())).exact_gradient
        index = np.arange(exact.size)
        width = 0.8 / (len(names) + 1)
        ax_mean.bar(index - 0.4 + width / 2, exact, width, color="black", label="exact gradient")
        for i, name in enumerate(names):
            res = results[name]
            ax_mean.bar(index - 0.4 + width * (i + 1.5), res.mean_gradient, width, yerr=res.mean_gradient_stderr,
                        color=f"C{i}", label=f"{name} (mean estimate)")
        ax_mean.set_xticks(index, labels=list(action_labels) if action_labels is not None else None)
    ax_mean.axhline(0, color="gray", linewidth=0.8)
    ax_mean.set(
        title="Average gradient per logit (± 1 s.e.)",
        xlabel="action" if action_labels is not None else "action (logit index)",
        ylabel="d E[r] / d logit",
    )
    ax_mean.legend(fontsize="small", loc="best")
    fig.suptitle(title)
    return fig


def plot_answer_distribution(
    probs_before: Sequence[float],
    probs_after: Sequence[float],
    labels: Sequence[str],
    correct_label: str | None = "4",
    title: str = 'Policy over answers to "What is 2 + 2?"',
) -> Figure:
    """Side-by-side bars of each answer's probability before and after training.

    Teaches: RL does not add new answers; it moves probability that was already there,
    away from answers that scored badly and toward those that scored well.
    """
    before, after = np.asarray(probs_before, dtype=float), np.asarray(probs_after, dtype=float)
    if not before.shape == after.shape == (len(labels),):
        raise ValueError(f"probs_before, probs_after and labels must all have length {len(labels)}, "
                         f"got {before.shape} and {after.shape}")
    fig = Figure(figsize=(max(7, 0.55 * len(labels)), 4), layout="constrained")
    ax = fig.add_subplot()
    index = np.arange(len(labels))
    before_bars = ax.bar(index - 0.2, before, 0.4, label="before", color="C7")
    after_bars = ax.bar(index + 0.2, after, 0.4, label="after", color="C0")
    for bars in (before_bars, after_bars):  # each bar's probability, written above it
        ax.bar_label(bars, labels=[f"{v:.2f}" if v >= 0.005 else "" for v in bars.datavalues], fontsize=6,
                     rotation=90, padding=2)
    ax.set_xticks(index, labels=list(labels))
    if correct_label in labels:
        tick = ax.get_xticklabels()[list(labels).index(correct_label)]
        tick.set_color("C2")
        tick.set_fontweight("bold")
    ax.set(title=title, xlabel="answer" + (f" (correct: {correct_label})" if correct_label in labels else ""),
           ylabel="probability", ylim=(0, max(1e-3, before.max(), after.max()) * 1.25))
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return fig


def plot_gridworld(
    grid: GridWorld,
    policy: np.ndarray | None = None,
    bean_mask: int | None = None,
    title: str = "Beans and ghosts",
) -> Figure:
    """Draw the grid (walls, beans, ghosts, start) with the policy's greedy arrows.

    Args:
        grid: the grid world.
        policy: ``(n_states,)`` actions or ``(n_states, 4)`` probabilities / values;
            arrows show the argmax, and with probabilities their length shows
            how sure the policy is.
        bean_mask: which beans are present when reading the policy (default: all).
    """
    mask = grid.full_mask if bean_mask is None else bean_mask
    n_rows, n_cols = grid.shape
    fig = Figure(figsize=(1.1 * n_cols + 1, 1.1 * n_rows + 0.8), layout="constrained")
    ax = fig.add_subplot()
    probs = None
    if policy is not None:
        policy = np.asarray(policy)
        probs = np.eye(grid.n_actions)[policy.astype(int)] if policy.ndim == 1 else policy
    for r in range(n_rows):
        for c in range(n_cols):
            cell, symbol = r * n_cols + c, grid.symbol(r, c)
            eaten = symbol == "B" and not mask >> grid.bean_cells.index(cell) & 1
            face = {"#": "dimgray", "G": "mistyrose", "S": "honeydew"}.get(symbol, "white")
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=face, edgecolor="lightgray"))
            center = (c + 0.5, r + 0.5)
            if symbol == "B" and not eaten:
                ax.add_patch(Circle(center, 0.17, color="goldenrod"))
            elif symbol == "G":
                ax.text(*center, "ghost", ha="center", va="center", fontsize=9, color="firebrick", weight="bold")
            elif symbol != "#" and probs is not None:
                row_probs = probs[grid.encode(cell, mask)]
                action = int(np.argmax(row_probs))
                # Arrow length grows with the probability of the chosen action (0.15 .. 0.4).
                confidence = float(row_probs[action]) / max(float(np.sum(row_probs)), 1e-12)
                d_row, d_col = ACTIONS[action]
                length = 0.15 + 0.25 * confidence
                ax.arrow(center[0] - d_col * length / 2, center[1] - d_row * length / 2, d_col * length, d_row * length,
                         head_width=0.14, head_length=0.1, length_includes_head=True, color="navy",
                         alpha=0.3 + 0.7 * confidence)  # faint arrow = the policy is unsure here
            if symbol == "S":
                ax.text(c + 0.08, r + 0.2, "start", fontsize=7, color="darkgreen")
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)  # row 0 at the top, like the text layout
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    subtitle = f"bean +{grid.bean_reward:g}, ghost {grid.ghost_reward:g}, step -{grid.step_cost:g}"
    legend = "; arrow: most likely action (longer, darker = more certain)" if probs is not None else ""
    ax.set_title(f"{title}\n{subtitle}{legend}", fontsize=10)
    return fig
