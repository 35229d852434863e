"""Reward playground (lesson 09): what each reward function gives each completion.

`plot_reward_breakdown` scores completions with any reward functions of TRL's
signature `f(prompts, completions, **columns) -> list[float | None]` (those of
`course_lib.rewards` or your own) through `course_lib.rewards.compute_rewards`, and
draws a table: one row per completion, one column per function, plus the weighted
total that GRPO would turn into advantages. None ("does not apply") is shown as a
grey cell and ignored by the total, as in TRL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from course_lib.rewards import compute_rewards, reward_function_name
from course_lib.rewards.combine import RewardFunctionError
from course_lib.rewards.extract import completion_text

from ..common.figures import build_explorer, new_figure

__all__ = ["DEFAULT_REWARDS", "EXAMPLE_COMPLETIONS", "plot_reward_breakdown", "reward_breakdown", "reward_playground"]

#: Completions to compare with the one the learner types (answer "4" to "2 + 2").
EXAMPLE_COMPLETIONS: tuple[str, ...] = (
    "<think>Two plus two: add 2 to 2, which gives 4.</think><answer>4</answer>",
    "<think>2 + 2 = 5</think><answer>5</answer>",
    "The answer is 4.",
    "<answer>four</answer>",
)
DEFAULT_REWARDS = ("think_answer_format_reward", "correctness_reward", "proximity_reward",
                   "correctness_last_number_reward")


def _broadcast_columns(columns: Mapping[str, Any], count: int) -> dict[str, list[Any]]:
    """A column given as one value applies to every completion."""
    out = {}
    for name, value in columns.items():
        # Any sequence but a string is one value per completion (lists, tuples, a dataset
        # Column, arrays); anything else applies to all.
        if hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes, dict)):
            if len(value) != count:
                raise ValueError(f"column {name!r} has {len(value)} values for {count} completions. "
                                 "Fix: one value per completion, or a single value for all.")
            out[name] = list(value)
        else:
            out[name] = [value] * count
    return out


def reward_breakdown(completions: Sequence[Any], reward_funcs: Sequence[Callable], *,
                     prompts: Sequence[Any] | None = None, reward_weights: Sequence[float] | None = None,
                     **columns: Any) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Score `completions` with every function (via `compute_rewards`).

    Args:
        completions: B completions (strings or chat-message lists).
        reward_funcs: F functions `f(prompts, completions, **columns)`.
        prompts: B prompts; None = empty prompts.
        reward_weights: F weights (TRL's `reward_weights`); None = all 1.
        **columns: dataset columns, each a list of B values or one value for all
            (e.g. `answer="4"`).

    Returns:
        `(names, scores (B, F) with NaN for None, total (B,))`.
    """
    if not completions:
        raise ValueError("completions is empty. Fix: pass at least one completion.")
    if not reward_funcs:
        raise ValueError("reward_funcs is empty. Fix: pass at least one reward function.")
    count = len(completions)
    prompts = list(prompts) if prompts is not None else [""] * count
    scores, total = compute_rewards(list(reward_funcs), prompts, list(completions),
                                    _broadcast_columns(columns, count), reward_weights)
    return [reward_function_name(f) for f in reward_funcs], scores.numpy(), total.numpy()


def _normalised_colours(values: np.ndarray) -> np.ndarray:
    """Each column scaled to [-1, 1] by its largest |value|, so columns of different
    scales are all readable; NaN stays NaN."""
    scale = np.nanmax(np.abs(values), axis=0, keepdims=True) if np.isfinite(values).any() else np.ones((1,))
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    return values / scale


def _label(completion: Any, width: int = 48) -> str:
    text = " ".join(completion_text(completion).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def plot_reward_breakdown(completions: Sequence[Any], reward_funcs: Sequence[Callable], *,
                          prompts: Sequence[Any] | None = None, reward_weights: Sequence[float] | None = None,
                          **columns: Any) -> Figure:
    """A table-like heatmap: each function's score per completion and the weighted total.

    Args: as `reward_breakdown`.

    Returns:
        A Figure with 2 axes: the `(B, F)` scores and the `(B, 1)` weighted totals. Each
        cell is written out (`None` for NaN); colours are scaled per column (green =
        high, red = low).
    """
    names, scores, total = reward_breakdown(completions, reward_funcs, prompts=prompts,
                                            reward_weights=reward_weights, **columns)
    count, num_funcs = scores.shape
    weights = list(reward_weights) if reward_weights is not None else [1.0] * num_funcs
    fig = new_figure(4.2 + 1.45 * (num_funcs + 1), 1.5 + 0.45 * count)
    score_ax, total_ax = fig.subplots(1, 2, width_ratios=[num_funcs, 1.15])
    for ax, values in ((score_ax, scores), (total_ax, total[:, None])):
        colours = np.ma.masked_invalid(_normalised_colours(values))
        cmap = colormaps["RdYlGn"].with_extremes(bad="0.85")
        ax.imshow(colours, cmap=cmap, vmin=-1.6, vmax=1.6, aspect="auto")  # pale ends: text stays legible
        for (row, col), value in np.ndenumerate(values):
            ax.text(col, row, "None" if np.isnan(value) else f"{value:.3g}", ha="center", va="center", fontsize=9)
        ax.set_yticks(range(count))
        ax.tick_params(length=0)
        ax.xaxis.tick_top()
    score_ax.set_yticklabels([_label(c) for c in completions], fontsize=8)
    score_ax.set_xticks(range(num_funcs))
    score_ax.set_xticklabels([f"{name.removesuffix('_reward')}\nx{w:g}" for name, w in zip(names, weights)],
                             fontsize=8, rotation=0)
    total_ax.set_yticklabels([])
    total_ax.set_xticks([0])
    total_ax.set_xticklabels(["weighted\ntotal"], fontsize=8)
    fig.suptitle("Reward functions per completion (colour scaled per column; grey = None, ignored)", fontsize=10)
    return fig


def reward_playground(completion: str = "<think>2 + 2 makes 4, adding two and two.</think><answer>4</answer>",
                      answer: str = "4", reward_names: Sequence[str] = DEFAULT_REWARDS) -> object:
    """Widget: type a completion and the expected answer, pick reward functions.

    Your completion (first row) is scored next to `EXAMPLE_COMPLETIONS`. A reward
    function that cannot score the input (e.g. a numeric reward given the answer "four")
    shows a one-line message in place of the table until the input is valid again.
    """
    import ipywidgets as widgets

    from course_lib.rewards import REWARD_FUNCTIONS

    def render(completion: str, answer: str, rewards: tuple[str, ...]) -> Figure:
        if not rewards:
            raise ValueError("no reward function selected. Fix: select at least one in the list.")
        try:
            return plot_reward_breakdown([completion, *EXAMPLE_COMPLETIONS],
                                         [REWARD_FUNCTIONS[n] for n in rewards], answer=answer)
        except RewardFunctionError as error:
            # The first line names the function and its complaint; the rest (sample
            # index, columns) repeats what the learner just typed.
            reason = str(error).splitlines()[0]
            raise ValueError(f"{reason}. Fix: type the answer as one number (e.g. 4), or deselect that "
                             "reward.") from error

    options = [name for name in REWARD_FUNCTIONS if name != "code_execution_reward"]
    controls = {
        "completion": widgets.Textarea(value=completion, description="completion", continuous_update=False,
                                       layout=widgets.Layout(width="520px", height="90px")),
        "answer": widgets.Text(value=answer, description="answer", continuous_update=False,
                               layout=widgets.Layout(width="240px")),
        "rewards": widgets.SelectMultiple(options=options, value=tuple(n for n in reward_names if n in options),
                                          description="rewards", rows=8, layout=widgets.Layout(width="380px")),
    }
    # Two per row: 520 + 240 px fit an output area of 800 px; the list goes below.
    return build_explorer(render, controls, columns=2)
