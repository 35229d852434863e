"""Clip explorer (lessons 03 and 06): the clipped surrogate and its gradient vs the ratio.

For one token with probability ratio `r = pi / pi_old` and advantage `A`, PPO's clipped
objective (Schulman et al. 2017, eq. 7) is `min(r A, clip(r, 1 - eps, 1 + eps_high) A)`;
with two-sided clipping (INTELLECT-2) the unclipped branch is `min(r, delta) A`. Where
the clip is active the objective is flat in `r`, so the token gets no gradient: the
update cannot push the ratio further out of the trust region.

Every number comes from the trainer's own loss, `course_lib.algos.grpo.policy_loss`, or,
with `loss="ppo"` (lesson 03), `course_lib.algos.ppo.ppo_policy_loss`: a batch of one-token
completions with `logps = log r`, `old_logps = 0`, `advantages = A`; the objective is
minus the per-token loss and its derivative with respect to `r` is
`d(objective)/d(log r) / r`, taken by autograd through the loss.

GSPO (`importance_sampling_level="sequence"`, Zheng et al. 2025) uses one ratio per
completion, the geometric mean of its token ratios; `plot_sequence_ratio` shows it for
a two-token completion, where clipping now depends on both tokens together.

`loss_weight_curve` / `plot_loss_weights` compare the loss types by the weight `w(r)` each
puts on a token's `grad log pi` (the loss's gradient is `-w(r) A grad log pi`): PPO's clip
(DAPO) gives `r` inside the range and 0 outside; CISPO (MiniMax-M1) gives `min(r, eps_max)`,
never 0; SAPO gives `4 sigma(tau (r - 1)) (1 - sigma) r`: 1 at r = 1, fading below it but
rising above it (about 1.57 near r = 2 with tau = 1) before it decays past r ~ 3.4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_lib.algos.grpo import policy_loss
from course_lib.algos.ppo import ppo_policy_loss

from ..common.figures import build_explorer, new_figure

__all__ = ["ClipCurve", "clip_curve", "clip_explorer", "loss_weight_curve", "plot_clip_objective",
           "plot_loss_weights", "plot_sequence_ratio", "sequence_clip_maps"]

# Token log-ratios of the two-token completion used for the sequence level: they average
# to log r (so the sequence ratio is r) while the token ratios themselves differ.
_SEQUENCE_SPREAD = math.log(1.5)


@dataclass(frozen=True)
class ClipCurve:
    """The clipped objective and its gradient on a grid of ratios, for one advantage."""

    ratio: np.ndarray
    """`(N,)` the ratios r (sequence ratios for the sequence level)."""
    objective: np.ndarray
    """`(N,)` `-per_token_loss`: `min(min(r, delta) A, clip(r) A)`."""
    gradient: np.ndarray
    """`(N,)` d objective / d r; 0 where the clip is active."""


def clip_curve(ratios: Sequence[float] | np.ndarray, advantage: float, epsilon: float = 0.2,
               epsilon_high: float | None = None, delta: float | None = None,
               level: str = "token", loss: str = "grpo") -> ClipCurve:
    """Objective and gradient of the trainer's policy loss at each ratio, for one advantage.

    Args:
        ratios: `(N,)` positive ratios.
        advantage: A, the same for every point.
        epsilon, epsilon_high, delta: as in `policy_loss`.
        level: `"token"`: N one-token completions with `log r` as log-ratio;
            `"sequence"` (GSPO): N two-token completions whose token log-ratios are
            `log r +- log 1.5`, so their geometric mean, the sequence ratio, is r.
        loss: `"grpo"`: GRPO's `policy_loss` (`loss_type="grpo"`); `"ppo"`: PPO's
            `ppo_policy_loss`, whose clip is symmetric (no `epsilon_high`, `delta`, or
            sequence level).

    Returns:
        A `ClipCurve`. Both losses average the N completions, so the gradient of the loss
        is multiplied by N to get each completion's own derivative.
    """
    if loss not in ("grpo", "ppo"):
        raise ValueError(f"loss={loss!r} is unknown. Fix: use 'grpo' or 'ppo'.")
    if loss == "ppo" and (epsilon_high is not None or delta is not None or level != "token"):
        raise ValueError("PPO's loss clips the token ratio to [1 - epsilon, 1 + epsilon]. Fix: leave "
                         "epsilon_high and delta unset and level='token' with loss='ppo', or use loss='grpo'.")
    ratio = torch.as_tensor(np.asarray(ratios, dtype=float), dtype=torch.float64)
    if ratio.dim() != 1 or (ratio <= 0).any():
        raise ValueError(f"ratios must be a 1-D list of positive numbers, got {ratios!r}. "
                         "Fix: e.g. numpy.linspace(0.01, 3, 300).")
    if level == "token":
        log_ratio = ratio.log().unsqueeze(1)  # (N, 1)
    elif level == "sequence":
        spread = torch.tensor([_SEQUENCE_SPREAD, -_SEQUENCE_SPREAD], dtype=torch.float64)
        log_ratio = ratio.log().unsqueeze(1) + spread  # (N, 2)
    else:
        raise ValueError(f"level={level!r} is unknown. Fix: use 'token' or 'sequence'.")
    logps = log_ratio.clone().requires_grad_(True)
    num_points = ratio.numel()
    advantages = torch.full((num_points,), float(advantage), dtype=torch.float64)
    if loss == "ppo":
        out = ppo_policy_loss(logps, torch.zeros_like(logps), advantages, torch.ones_like(logps), cliprange=epsilon)
    else:
        out = policy_loss(logps, torch.zeros_like(logps), advantages, torch.ones_like(logps), loss_type="grpo",
                          epsilon=epsilon, epsilon_high=epsilon_high, delta=delta, importance_sampling_level=level)
    (grad_logps,) = torch.autograd.grad(out.loss, logps)
    # d objective / d log r: minus the loss, undo grpo's mean over the N completions, and
    # sum the tokens (each token's log-ratio moves one-for-one with log r).
    grad_log_ratio = -grad_logps.sum(dim=1) * num_points
    objective = -out.per_token_loss[:, 0].detach()
    return ClipCurve(ratio=ratio.numpy(), objective=objective.numpy(),
                     gradient=(grad_log_ratio / ratio + 0.0).numpy())


def _zero_runs(values: np.ndarray, x: np.ndarray) -> list[tuple[float, float]]:
    """Contiguous x-intervals where `values` is (numerically) zero."""
    zero = np.abs(values) < 1e-9
    runs, start = [], None
    for i, flag in enumerate(zero):
        if flag and start is None:
            start = i
        if start is not None and (not flag or i == zero.size - 1):
            end = i if flag else i - 1
            runs.append((x[start], x[end]))
            start = None
    return runs


def _bounds(ax: Axes, epsilon: float, epsilon_high: float, delta: float | None) -> None:
    ax.axvline(1 - epsilon, color="0.3", linestyle=":", linewidth=1)
    ax.axvline(1 + epsilon_high, color="0.3", linestyle=":", linewidth=1)
    if delta is not None:
        ax.axvline(delta, color="purple", linestyle="--", linewidth=1)


def plot_clip_objective(epsilon: float = 0.2, epsilon_high: float | None = None, delta: float | None = None,
                        level: str = "token", max_ratio: float = 3.0, num_points: int = 600,
                        loss: str = "grpo") -> Figure:
    """Clipped surrogate objective (top row) and its gradient w.r.t. r (bottom row).

    Args:
        epsilon: lower clip range, `1 - epsilon`.
        epsilon_high: upper clip range, `1 + epsilon_high`; None = epsilon (DAPO: 0.28).
        delta: two-sided clipping bound on the unclipped ratio (INTELLECT-2; > 1 + eps).
        level: `"token"` or `"sequence"` (GSPO: the x axis is then the sequence ratio).
        max_ratio: right end of the ratio axis; the grid is `(0, max_ratio]`.
        num_points: grid size.
        loss: `"grpo"` (GRPO's `policy_loss`) or `"ppo"` (`ppo_policy_loss`, lesson 03).

    Returns:
        A Figure with 4 axes: `[objective A=+1, objective A=-1, gradient A=+1,
        gradient A=-1]`. In each, the first line is the library's curve (x = ratios,
        y = values); grey spans mark where the gradient is 0 (the clip is active).
    """
    epsilon_high_value = epsilon if epsilon_high is None else epsilon_high
    ratios = np.linspace(0.0, max_ratio, num_points + 1)[1:]
    fig = new_figure(10, 6.2)
    axes = fig.subplots(2, 2, sharex=True)
    for column, advantage in enumerate((1.0, -1.0)):
        curve = clip_curve(ratios, advantage, epsilon, epsilon_high, delta, level, loss)
        runs = _zero_runs(curve.gradient, curve.ratio)
        for row, (values, name) in enumerate(((curve.objective, "objective"), (curve.gradient, "d objective / d r"))):
            ax = axes[row, column]
            ax.plot(curve.ratio, values, color="tab:blue" if advantage > 0 else "tab:red", linewidth=2,
                    label="clipped objective (PPO)")
            if row == 0:
                ax.plot(curve.ratio, curve.ratio * advantage, color="0.5", linestyle="--", linewidth=1,
                        label="unclipped r*A")
            for i, (start, end) in enumerate(runs):
                ax.axvspan(start, end, color="0.88", zorder=0, label="no gradient" if i == 0 else None)
            _bounds(ax, epsilon, epsilon_high_value, delta)
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
        sign = "A > 0 (good completion)" if advantage > 0 else "A < 0 (bad completion)"
        axes[0, column].set_title(f"{sign}, A = {advantage:+g}")
        axes[1, column].set_xlabel("sequence ratio s (geometric mean)" if level == "sequence"
                                   else "ratio r = pi / pi_old")
        axes[1, column].set_ylim(-1.4, 1.4)
    axes[0, 0].legend(loc="upper left", fontsize=8)
    bounds = f"clip to [{1 - epsilon:g}, {1 + epsilon_high_value:g}]" + (f", delta = {delta:g}" if delta else "")
    fig.suptitle(f"Clipped surrogate per {'sequence' if level == 'sequence' else 'token'}: {bounds} "
                 "(dotted: clip bounds" + (", dashed purple: delta)" if delta else ")"), fontsize=11)
    return fig


def sequence_clip_maps(token_ratios: Sequence[float] | np.ndarray, epsilon: float = 0.2,
                       epsilon_high: float | None = None, advantage: float = 1.0
                       ) -> dict[str, np.ndarray]:
    """Two-token completions on a grid `(r1, r2)`: sequence ratio and token-1 gradients.

    Args:
        token_ratios: `(M,)` values for each token's ratio; the grid is `M x M`.
        epsilon, epsilon_high: clip ranges.
        advantage: A of the completion.

    Returns:
        `"sequence_ratio"`: `(M, M)` GSPO's ratio of the completion, read from
        `policy_loss` with clipping disabled (infinite epsilon); `"token_gradient"` and
        `"sequence_gradient"`: `(M, M)` d(completion objective)/d(log pi of token 1) at
        the token and sequence levels. Row i is `r2 = token_ratios[i]`, column j is
        `r1 = token_ratios[j]`.
    """
    values = torch.as_tensor(np.asarray(token_ratios, dtype=float), dtype=torch.float64)
    r2, r1 = torch.meshgrid(values, values, indexing="ij")
    log_ratio = torch.stack([r1.reshape(-1).log(), r2.reshape(-1).log()], dim=1)  # (M*M, 2)
    num = log_ratio.shape[0]
    mask = torch.ones_like(log_ratio)
    advantages = torch.full((num,), float(advantage), dtype=torch.float64)
    unclipped = policy_loss(log_ratio, torch.zeros_like(log_ratio), torch.ones(num, dtype=torch.float64), mask,
                            loss_type="grpo", epsilon=math.inf, importance_sampling_level="sequence")
    maps = {"sequence_ratio": (-unclipped.per_token_loss[:, 0]).reshape(r1.shape).numpy()}
    for level in ("token", "sequence"):
        logps = log_ratio.clone().requires_grad_(True)
        out = policy_loss(logps, torch.zeros_like(logps), advantages, mask, loss_type="grpo", epsilon=epsilon,
                          epsilon_high=epsilon_high, importance_sampling_level=level)
        (grad,) = torch.autograd.grad(out.loss, logps)
        maps[f"{level}_gradient"] = (-grad[:, 0] * num + 0.0).reshape(r1.shape).numpy()
    return maps


def plot_sequence_ratio(epsilon: float = 3e-4, epsilon_high: float | None = 4e-4, advantage: float = 1.0,
                        max_ratio: float | None = None, num_points: int = 121, min_ratio: float | None = None
                        ) -> Figure:
    """GSPO on a two-token completion: the sequence ratio and who still gets a gradient.

    The defaults are GSPO's clip range, `[1 - 3e-4, 1 + 4e-4]` (Zheng et al. 2025, v2,
    section 5.1; TRL's GSPO recipe uses `epsilon=3e-4, epsilon_high=4e-4`): the sequence
    ratio is a geometric mean of token ratios, so it moves far less than they do and its
    range is three orders of magnitude narrower than PPO's 0.2.

    Args:
        epsilon, epsilon_high: the clip range (epsilon_high None = epsilon).
        advantage: A of the completion.
        min_ratio, max_ratio: the window of token ratios drawn on both axes; None centres it
            on 1 with a half-width of 3 x the larger epsilon (at most down to ~0).
        num_points: grid points per axis.

    Returns:
        A Figure with 3 image axes (plus colour bars): the sequence ratio
        `sqrt(r1 r2)`, and the gradient reaching token 1 at the token level and at the
        sequence level. At the token level token 1 is clipped on its own ratio alone
        (a vertical band); at the sequence level the clip follows the curve
        `r1 r2 = (1 + eps)^2`: a token far outside the range keeps its gradient if the
        other token compensates, and loses it with its whole completion otherwise.
    """
    epsilon_high_value = epsilon if epsilon_high is None else epsilon_high
    half_width = 3 * max(epsilon, epsilon_high_value)
    low = max(1 - half_width, 1 / num_points) if min_ratio is None else min_ratio
    high = 1 + half_width if max_ratio is None else max_ratio
    if not 0 < low < 1 < high:
        raise ValueError(f"the window [{low:g}, {high:g}] must contain 1 and stay above 0. "
                         "Fix: pass min_ratio in (0, 1) and max_ratio > 1, or leave them None.")
    ratios = np.linspace(low, high, num_points)
    maps = sequence_clip_maps(ratios, epsilon, epsilon_high, advantage)
    fig = new_figure(13, 4.3)
    axes = fig.subplots(1, 3)
    extent = (ratios[0], ratios[-1], ratios[0], ratios[-1])
    panels = [("sequence_ratio", "sequence ratio s = sqrt(r1 * r2)", "viridis"),
              ("token_gradient", f"token level: gradient to token 1 (A={advantage:+g})", "magma"),
              ("sequence_gradient", f"sequence level (GSPO): gradient to token 1 (A={advantage:+g})", "magma")]
    for ax, (key, title, cmap) in zip(axes, panels):
        image = ax.imshow(maps[key], origin="lower", extent=extent, aspect="equal", cmap=cmap)
        fig.colorbar(image, ax=ax, shrink=0.8)
        contours = ax.contour(ratios, ratios, maps["sequence_ratio"],
                              levels=[1 - epsilon, 1.0, 1 + epsilon_high_value],
                              colors=["white", "white", "white"], linestyles=[":", "-", "--"], linewidths=1)
        ax.clabel(contours, fmt=lambda s: f"s={s:g}", fontsize=7)
        ax.set(title=title, xlabel="token 1 ratio r1", ylabel="token 2 ratio r2")
        ax.title.set_fontsize(9)
    fig.suptitle(f"Sequence-level ratio (GSPO) is the geometric mean of the token ratios; "
                 f"clip range [{1 - epsilon:g}, {1 + epsilon_high_value:g}]", fontsize=11)
    for ax in axes:  # ratios like 0.9997 need their digits, not an offset
        ax.ticklabel_format(useOffset=False)
    return fig


def loss_weight_curve(ratios: Sequence[float] | np.ndarray, advantage: float, loss_type: str,
                      epsilon: float = 0.2, epsilon_high: float | None = None, **shape: float) -> np.ndarray:
    """`(N,)` the weight `w(r)` of `grad log pi` in `policy_loss`'s gradient, per ratio.

    One-token completions with `logps = log r` and `old_logps = 0`; `w = -(d loss / d logps)
    * N / A` (the N completions are averaged by every loss type used here). `shape` passes
    `sapo_temperature_pos/neg` through.
    """
    ratio = torch.as_tensor(np.asarray(ratios, dtype=float), dtype=torch.float64)
    if ratio.dim() != 1 or (ratio <= 0).any() or advantage == 0:
        raise ValueError(f"ratios must be a 1-D list of positive numbers and advantage non-zero, got {ratios!r}, "
                         f"{advantage!r}. Fix: e.g. numpy.linspace(0.01, 3, 300) and advantage=1.0.")
    logps = ratio.log().unsqueeze(1).requires_grad_(True)
    out = policy_loss(logps, torch.zeros_like(logps), torch.full((ratio.numel(),), float(advantage),
                      dtype=torch.float64), torch.ones_like(logps), loss_type=loss_type, epsilon=epsilon,
                      epsilon_high=epsilon_high, **shape)
    (grad,) = torch.autograd.grad(out.loss, logps)
    return (-grad[:, 0] * ratio.numel() / advantage + 0.0).numpy()


def plot_loss_weights(epsilon: float = 0.2, epsilon_high: float = 0.28, cispo_max: float = 5.0,
                      sapo_temperature_pos: float = 1.0, sapo_temperature_neg: float = 1.05,
                      max_ratio: float = 3.0, num_points: int = 600) -> Figure:
    """Weight of `grad log pi` vs the ratio for DAPO's clip, CISPO and SAPO (A = +1 and A = -1).

    Returns:
        A Figure with 2 axes `[A > 0, A < 0]`; in each, the lines are dapo, cispo, sapo
        (x = ratios, y = `loss_weight_curve`), then the dashed unclipped weight `r`.
    """
    ratios = np.linspace(0.0, max_ratio, num_points + 1)[1:]
    fig = new_figure(10, 3.6)
    axes = fig.subplots(1, 2, sharey=True)
    settings = {"dapo": dict(epsilon_high=epsilon_high), "cispo": dict(epsilon_high=cispo_max),
                "sapo": dict(sapo_temperature_pos=sapo_temperature_pos, sapo_temperature_neg=sapo_temperature_neg)}
    # the legend names the idea after the loss_type that selects it
    ideas = {"dapo": f"dapo: hard clip to [{1 - epsilon:g}, {1 + epsilon_high:g}]",
             "cispo": f"cispo: weight min(r, {cispo_max:g}), never zero",
             "sapo": "sapo: soft gate times r, rises then fades"}
    for ax, advantage in zip(axes, (1.0, -1.0)):
        for loss_type, options in settings.items():
            ax.plot(ratios, loss_weight_curve(ratios, advantage, loss_type, epsilon, **options), linewidth=2,
                    label=ideas[loss_type])
        ax.plot(ratios, ratios, color="0.5", linestyle="--", linewidth=1, label="unclipped: r")
        ax.axvline(1 - epsilon, color="0.3", linestyle=":", linewidth=1)
        ax.axvline(1 + epsilon_high, color="0.3", linestyle=":", linewidth=1)
        ax.set(title=f"A = {advantage:+g}", xlabel="ratio r = pi / pi_old", ylim=(-0.1, 2.5))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("weight of grad log pi")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"How much gradient a token keeps: clip [{1 - epsilon:g}, {1 + epsilon_high:g}] (DAPO), "
                 f"cap {cispo_max:g} (CISPO), soft gate (SAPO)", fontsize=11)
    return fig


def clip_explorer() -> object:
    """Widget: sliders for epsilon, epsilon_high, delta and the IS level (`plot_clip_objective`);
    the checkbox adds the CISPO / SAPO weight curves (`plot_loss_weights`).

    delta = 0 on the slider means "no two-sided clipping" (None); with the sequence
    level, the two-token GSPO picture (`plot_sequence_ratio`) is drawn as well.
    """
    import ipywidgets as widgets
    from IPython.display import display

    def render(epsilon: float, epsilon_high: float, delta: float, level: str, compare: bool) -> Figure:
        delta_value = delta if delta > 0 else None
        if delta_value is not None and delta_value <= 1 + epsilon_high:
            print(f"note: delta={delta_value:g} <= 1 + epsilon_high; INTELLECT-2 recommends delta > 1 + epsilon.")
        figure = plot_clip_objective(epsilon, epsilon_high, delta_value, level)
        if level == "sequence":
            print("GSPO itself clips the sequence ratio to [1 - 3e-4, 1 + 4e-4] (epsilon=3e-4, epsilon_high=4e-4): "
                  "a geometric mean of token ratios stays far closer to 1 than they do. Type such values into "
                  "the sliders' boxes to see its range; 0.2 is PPO's token-level range.")
            display(plot_sequence_ratio(epsilon, epsilon_high))
        if compare:
            display(plot_loss_weights(epsilon, epsilon_high))
        return figure

    slider = dict(continuous_update=False, readout_format=".2f")
    controls = {
        # A step of 1e-4 so that GSPO's sequence-level range (3e-4, 4e-4) can be typed in.
        "epsilon": widgets.FloatSlider(value=0.2, min=1e-4, max=0.9, step=1e-4, description="epsilon",
                                       continuous_update=False, readout_format=".4f"),
        "epsilon_high": widgets.FloatSlider(value=0.2, min=1e-4, max=1.0, step=1e-4, description="epsilon_high",
                                            continuous_update=False, readout_format=".4f"),
        "delta": widgets.FloatSlider(value=0.0, min=0.0, max=3.0, step=0.05, description="delta (0=off)", **slider),
        "level": widgets.Dropdown(options=["token", "sequence"], value="token", description="IS level"),
        "compare": widgets.Checkbox(value=False, description="CISPO / SAPO weights"),
    }
    return build_explorer(render, controls, columns=2)
