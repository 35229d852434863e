"""Schedule explorer (lesson 07): which completions each micro-step trains on, and when
the optimizer steps.

`plot_schedule` draws the rows of `course_lib.schedule.schedule_table` as a grid:
one column per micro-step (forward + backward on one micro-batch), one row per slot of
the micro-batch, the cell coloured and labelled by the prompt its completion answers.
Thick red lines mark optimizer steps (every `gradient_accumulation_steps` micro-steps),
black lines the start of a new generation cycle. A side panel gives the batch
arithmetic from the same module's formula helpers.

`SCHEDULE_PRESETS` holds the parameters of the four example tables of the batch-schedule notes
documentation (GRPO batch examples); `schedule_table` reproduces them, except the
third table's typo (its step 2 reads `[1,1,3]` where prompt 2 belongs, as the 12
completions of 3 prompts with 4 generations each show).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from course_lib.schedule import (
    ScheduleRow,
    effective_batch_size,
    generation_batch_size,
    optimizer_steps_per_generation,
    schedule_table,
    unique_prompts_per_generation,
)

from ..common.figures import build_explorer, category_colors, new_figure

__all__ = ["SCHEDULE_PRESETS", "plot_schedule", "schedule_explorer", "schedule_formulas", "schedule_grid"]

#: The batch-schedule notes' four example tables, as `schedule_table` keyword arguments.
SCHEDULE_PRESETS: dict[str, dict[str, int]] = {
    "Example 1": dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3,
                      steps_per_generation=4),
    "Example 2": dict(per_device_train_batch_size=3, gradient_accumulation_steps=4, num_generations=3,
                      steps_per_generation=4),
    "Example 3": dict(per_device_train_batch_size=3, gradient_accumulation_steps=4, num_generations=4,
                      steps_per_generation=4),
    "Example 4": dict(per_device_train_batch_size=6, gradient_accumulation_steps=2, num_generations=3,
                      steps_per_generation=2),
}


def schedule_grid(rows: Sequence[ScheduleRow]) -> np.ndarray:
    """`(slots, micro_steps)` prompt indices: column k is `rows[k].prompts`."""
    if not rows:
        raise ValueError("rows is empty. Fix: pass course_lib.schedule.schedule_table(...) with cycles >= 1.")
    return np.array([row.prompts for row in rows], dtype=int).T


def schedule_formulas(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_generations: int,
                      steps_per_generation: int | None = None, num_processes: int = 1,
                      num_iterations: int = 1, **_ignored: Any) -> dict[str, float]:
    """The batch arithmetic of one configuration, from `course_lib.schedule`'s helpers.

    Returns:
        `effective_batch_size` (completions per optimizer step), `generation_batch_size`
        (completions generated at once), `unique_prompts_per_generation` and
        `optimizer_steps_per_generation`.
    """
    steps = steps_per_generation or gradient_accumulation_steps
    generation = generation_batch_size(per_device_train_batch_size, steps, num_processes)
    return {
        "effective_batch_size": effective_batch_size(per_device_train_batch_size, gradient_accumulation_steps,
                                                     num_processes),
        "generation_batch_size": generation,
        "unique_prompts_per_generation": unique_prompts_per_generation(generation, num_generations),
        "optimizer_steps_per_generation": optimizer_steps_per_generation(steps, gradient_accumulation_steps,
                                                                         num_iterations),
    }


def _formula_text(parameters: Mapping[str, Any]) -> str:
    per_device = parameters["per_device_train_batch_size"]
    accumulation = parameters["gradient_accumulation_steps"]
    steps = parameters.get("steps_per_generation") or accumulation
    processes = parameters.get("num_processes", 1)
    iterations = parameters.get("num_iterations", 1)
    generations = parameters["num_generations"]
    values = schedule_formulas(**parameters)
    return "\n".join([
        f"effective batch     = per_device x accumulation x processes   = {per_device} x {accumulation} x "
        f"{processes} = {values['effective_batch_size']} completions per optimizer step",
        f"generation batch    = per_device x processes x steps_per_gen  = {per_device} x {processes} x "
        f"{steps} = {values['generation_batch_size']} completions generated at once",
        f"unique prompts      = generation batch / num_generations      = "
        f"{values['generation_batch_size']} / {generations} = {values['unique_prompts_per_generation']} per generation",
        f"optimizer steps     = steps_per_gen x iterations / accumulation = {steps} x {iterations} / "
        f"{accumulation} = {values['optimizer_steps_per_generation']:.3g} per generation",
    ])


def _cycle_name(cycle: int) -> str:
    return string.ascii_uppercase[cycle] if cycle < 26 else str(cycle)


def plot_schedule(rows: Sequence[ScheduleRow], parameters: Mapping[str, Any] | None = None,
                  title: str | None = None) -> Figure:
    """Draw a schedule: x = micro-step, y = slot, colour and number = prompt index.

    Args:
        rows: `schedule_table(...)` output.
        parameters: the `schedule_table` keyword arguments; when given, a side panel
            prints the batch formulas with these numbers.
        title: figure title.

    Returns:
        A Figure with 1 axes (2 with `parameters`). The grid's image data is
        `schedule_grid(rows)`; a red vertical line after micro-step k means the
        optimizer stepped there; black vertical lines separate generation cycles;
        dashed horizontal lines separate the processes' slices.
    """
    grid = schedule_grid(rows)  # (slots, steps)
    slots, steps = grid.shape
    num_prompts = int(grid.max()) + 1
    cmap = ListedColormap(category_colors(min(num_prompts, 20)))
    grid_height = max(1.6, 0.9 + 0.36 * slots)
    text_height = 0.9 if parameters is not None else 0.0
    width = max(min(2 + 0.6 * steps, 16), 9.5 if parameters is not None else 6.5)
    fig = new_figure(width, grid_height + text_height + 0.3)
    if parameters is not None:
        ax, text_ax = fig.subplots(2, 1, height_ratios=[grid_height, text_height])
    else:
        ax, text_ax = fig.add_subplot(), None

    ax.imshow(grid % 20, cmap=cmap, vmin=-0.5, vmax=cmap.N - 0.5, aspect="auto", interpolation="nearest")
    fontsize = 9 if max(slots, steps) <= 16 else 7 if max(slots, steps) <= 32 else 5
    for (slot, step), prompt in np.ndenumerate(grid):
        ax.text(step, slot, str(prompt), ha="center", va="center", fontsize=fontsize, color="black")

    processes = len(rows[0].per_process)
    per_device = len(rows[0].per_process[0])
    for p in range(1, processes):
        ax.axhline(p * per_device - 0.5, color="white", linestyle="--", linewidth=1.5)
    for k, row in enumerate(rows):
        if row.step == 0:
            if k > 0:  # a new generation cycle starts
                ax.axvline(k - 0.5, color="black", linewidth=2, zorder=4)
            ax.annotate(f"cycle {_cycle_name(row.cycle)}", (k - 0.45, -0.5), xytext=(0, 3),
                        textcoords="offset points", ha="left", va="bottom", fontsize=9, fontweight="bold",
                        annotation_clip=False)
        if row.optimizer_step:  # drawn over the cycle line where both fall together
            ax.axvline(k + 0.5, color="crimson", linewidth=3, zorder=5)
            ax.plot([k + 0.5], [-0.5], marker="v", color="crimson", markersize=9, clip_on=False, zorder=6)
    ax.set_xlim(-0.5, steps - 0.5 + 0.06)
    show_iteration = any(row.iteration > 0 for row in rows)
    ax.set_xticks(range(steps))
    ax.set_xticklabels([f"{row.step}" + (f"\nit{row.iteration}" if show_iteration else "") for row in rows],
                       fontsize=8)
    ax.set_yticks(range(slots))
    ax.set_yticklabels([f"p{s // per_device}:{s % per_device}" if processes > 1 else str(s) for s in range(slots)],
                       fontsize=8)
    ax.set_xlabel("micro-step in the generation cycle" + (" (it = pass over the batch)" if show_iteration else ""))
    ax.set_ylabel("slot" + (" (process:slot)" if processes > 1 else ""))
    ax.set_title((title + "\n" if title else "") + "cell = prompt of the completion; red \u25bc = optimizer "
                 "step; black line = new generation", fontsize=9, pad=16)

    if text_ax is not None:
        text_ax.axis("off")
        text_ax.text(0.0, 1.0, _formula_text(parameters), ha="left", va="top", family="monospace", fontsize=8,
                     transform=text_ax.transAxes)
    return fig


def schedule_explorer(preset: str = "Example 1") -> object:
    """Widget: the four example presets and sliders for every batch parameter (`plot_schedule`)."""
    import ipywidgets as widgets

    def render(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_generations: int,
               steps_per_generation: int, num_processes: int, num_iterations: int, cycles: int) -> Figure:
        parameters = dict(per_device_train_batch_size=per_device_train_batch_size,
                          gradient_accumulation_steps=gradient_accumulation_steps, num_generations=num_generations,
                          steps_per_generation=steps_per_generation, num_processes=num_processes,
                          num_iterations=num_iterations)
        return plot_schedule(schedule_table(**parameters, cycles=cycles), parameters)

    start = {**dict(num_processes=1, num_iterations=1), **SCHEDULE_PRESETS[preset]}
    slider = dict(continuous_update=False)  # build_explorer sizes the labels and tracks
    controls = {
        "per_device_train_batch_size": widgets.IntSlider(start["per_device_train_batch_size"], 1, 12,
                                                         description="per_device_train_batch_size", **slider),
        "gradient_accumulation_steps": widgets.IntSlider(start["gradient_accumulation_steps"], 1, 8,
                                                         description="gradient_accumulation_steps", **slider),
        "num_generations": widgets.IntSlider(start["num_generations"], 2, 12, description="num_generations",
                                             **slider),
        "steps_per_generation": widgets.IntSlider(start["steps_per_generation"], 1, 8,
                                                  description="steps_per_generation", **slider),
        "num_processes": widgets.IntSlider(start["num_processes"], 1, 4, description="num_processes", **slider),
        "num_iterations": widgets.IntSlider(start["num_iterations"], 1, 3, description="num_iterations", **slider),
        "cycles": widgets.IntSlider(2, 1, 3, description="cycles", **slider),
    }
    box = build_explorer(render, controls, columns=2)
    presets = widgets.Dropdown(options=list(SCHEDULE_PRESETS), value=preset, description="preset")

    def apply_preset(change: Any) -> None:
        box.hold = True  # set every slider, then draw once
        for name, value in {**dict(num_processes=1, num_iterations=1), **SCHEDULE_PRESETS[change["new"]]}.items():
            controls[name].value = value
        box.hold = False
        box.redraw()

    presets.observe(apply_preset, names="value")
    box.children = (presets, *box.children)
    return box
