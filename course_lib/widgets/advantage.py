"""Advantage explorer (lesson 05): from a batch of rewards to GRPO / RLOO advantages.

`plot_advantages` draws the rewards of each group of `num_generations` completions and
the advantages that `course_lib.algos` computes from them: the group z-score of
GRPO (Shao et al. 2024), the batch-std and unscaled variants (`scale_rewards`, Dr. GRPO,
Liu et al. 2025) and, optionally, the RLOO leave-one-out baseline (Ahmadian et al.
2024). Groups whose rewards are all equal have zero std: every advantage is 0 there,
the group teaches nothing, and the plot shades it.

Nothing is recomputed here: the numbers are those of `group_advantages` and
`rloo_advantages`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_lib.algos.grpo import group_advantages
from course_lib.algos.grpo_config import GRPOConfig
from course_lib.algos.rloo import rloo_advantages

from course_lib.config.validation import field_choices

from ..common.figures import build_explorer, category_colors, new_figure, parse_numbers

__all__ = ["advantage_explorer", "compute_advantage_panels", "plot_advantages"]

SCALINGS = field_choices(GRPOConfig, "scale_rewards")  # the config field's Literal


def compute_advantage_panels(rewards: Sequence[float] | torch.Tensor, num_generations: int,
                             scale_rewards: str = "group", compare: bool = False
                             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The advantages to draw, by panel title, and the zero-std flag of each completion.

    Args:
        rewards: `(B,)` prompt-major rewards; NaN = unscorable.
        num_generations: completions per prompt G.
        scale_rewards: the scaling drawn when `compare` is False.
        compare: draw every scaling (group, batch, none) and RLOO.

    Returns:
        `({label: (B,) advantages}, (B,) bool is_std_zero of the group std)`.
    """
    rewards_t = torch.as_tensor(rewards, dtype=torch.float32)
    scalings = SCALINGS if compare else (scale_rewards,)
    panels: dict[str, np.ndarray] = {}
    for scaling in scalings:
        panels[f"scale_rewards={scaling!r}"] = group_advantages(rewards_t, num_generations, scaling).numpy()
    if compare:
        panels["RLOO (leave-one-out)"] = rloo_advantages(rewards_t, num_generations).numpy()
    _, stats = group_advantages(rewards_t, num_generations, "group", return_stats=True)
    return panels, stats.is_std_zero.numpy()


def _shade_zero_std_groups(ax: Axes, is_std_zero: np.ndarray, num_generations: int,
                           annotate: bool = False) -> None:
    labelled = False
    for start in range(0, is_std_zero.size, num_generations):
        if is_std_zero[start]:
            ax.axvspan(start - 0.5, start + num_generations - 0.5, color="0.85", zorder=0, linewidth=0,
                       label=None if labelled else "zero std: no signal")
            labelled = True
            if annotate:
                ax.text(start + (num_generations - 1) / 2, 0.5, "no signal", transform=ax.get_xaxis_transform(),
                        ha="center", va="center", fontsize=8, color="0.35")


def _draw_group_bars(ax: Axes, values: np.ndarray, num_generations: int) -> None:
    colors = category_colors(values.size // num_generations)
    bar_colors = [colors[i // num_generations] for i in range(values.size)]
    heights = np.nan_to_num(values, nan=0.0)
    bars = ax.bar(np.arange(values.size), heights, color=bar_colors, edgecolor="black", linewidth=0.5)
    if values.size <= 24:  # each bar's value, written at its end (NaN is annotated below)
        ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.2f}" for v in values], fontsize=7, padding=1)
        ax.margins(y=0.15)
    for i in np.flatnonzero(np.isnan(values)):
        ax.annotate("NaN", (i, 0), ha="center", va="bottom", fontsize=8, color="crimson")
    for start in range(num_generations, values.size, num_generations):
        ax.axvline(start - 0.5, color="0.4", linewidth=0.8, linestyle=":")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(values.size))
    # "P1:2" = prompt 1, its completion 2 (a label like "1.2" would read as a decimal number)
    ax.set_xticklabels([f"P{i // num_generations}:{i % num_generations}" for i in range(values.size)],
                       fontsize=8, rotation=90 if values.size > 16 else 0)


def plot_advantages(rewards: Sequence[float] | torch.Tensor | str, num_generations: int,
                    scale_rewards: str = "group", compare: bool = False) -> Figure:
    """Bar charts: rewards per completion (coloured by prompt group), then advantages.

    Args:
        rewards: `(B,)` prompt-major rewards: a tensor, a list (None allowed) or a
            string such as `"1, 0, 0, 1"`; NaN / None / `"nan"` = unscorable.
        num_generations: completions per prompt G; B must be a multiple of G.
        scale_rewards: `"group"`, `"batch"` or `"none"`, the scaling drawn when
            `compare` is False.
        compare: one advantage panel per scaling plus RLOO (4 panels) instead of one.

    Returns:
        A Figure with 2 axes (rewards, advantages), or 5 with `compare=True`. Each axes
        holds one `BarContainer` whose heights are the plotted values (NaN drawn as 0);
        groups with zero reward std are shaded grey.

    Tick labels are `P<group>:<member>` and each bar carries its value; dotted lines
    separate the groups; the black segments on the reward panel are the group means
    (the GRPO baseline).
    """
    if isinstance(rewards, torch.Tensor):
        values = rewards.detach().float().cpu().numpy().astype(float)
    else:  # a string, or numbers with None for "not applicable"
        values = np.asarray(parse_numbers(rewards, "rewards"), dtype=float)
    panels, is_std_zero = compute_advantage_panels(values, num_generations, scale_rewards, compare)
    num_panels = 1 + len(panels)
    columns = 1 if num_panels == 2 else 2
    rows = int(np.ceil(num_panels / columns)) if columns == 2 else 2
    width = max(6.0, 0.35 * values.size + 2) * (1 if columns == 1 else 1.6)
    fig = new_figure(width, 2.6 * rows)
    grid = fig.add_gridspec(rows, columns)

    ax = fig.add_subplot(grid[0, :])
    _shade_zero_std_groups(ax, is_std_zero, num_generations)
    _draw_group_bars(ax, values, num_generations)
    for group, start in enumerate(range(0, values.size, num_generations)):
        chunk = values[start:start + num_generations]
        if np.isfinite(chunk).any():
            ax.hlines(np.nanmean(chunk), start - 0.4, start + num_generations - 0.6, color="black",
                      linewidth=2, label="group mean" if group == 0 else None)
    num_prompts = values.size // num_generations
    ax.set(title=f"Rewards of {num_prompts} prompt{'s' if num_prompts > 1 else ''} x {num_generations} completions",
           ylabel="reward")
    ax.legend(loc="best", fontsize=8, framealpha=0.8)

    positions = [grid[1 + i // columns, i % columns] for i in range(len(panels))] if columns == 2 \
        else [grid[1, 0]]
    for position, (label, advantages) in zip(positions, panels.items()):
        ax = fig.add_subplot(position)
        _shade_zero_std_groups(ax, is_std_zero, num_generations, annotate=True)
        _draw_group_bars(ax, advantages, num_generations)
        ax.set(title=f"Advantages, {label}", ylabel="advantage")
    fig.supxlabel("completion (P<prompt>:<completion of that prompt>)", fontsize=9)
    return fig


def advantage_explorer(rewards: str = "1, 0, 0, 1,  1, 1, 1, 1,  0.5, 0, 0, 0",
                       num_generations: int = 4) -> object:
    """Widget: type rewards, pick G and the scaling, see the advantages (`plot_advantages`)."""
    import ipywidgets as widgets

    controls = {
        "rewards": widgets.Text(value=rewards, description="rewards",
                                layout=widgets.Layout(width="420px"), continuous_update=False),
        "num_generations": widgets.BoundedIntText(value=num_generations, min=1, max=64,
                                                  description="G"),
        "scale_rewards": widgets.Dropdown(options=list(SCALINGS), value="group", description="scale"),
        "compare": widgets.Checkbox(value=False, description="compare all + RLOO"),
    }
    return build_explorer(plot_advantages, controls, columns=2)
