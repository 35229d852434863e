"""Loss-normalization explorer (lesson 06): how much each token counts, by `loss_type`.

A batch of completions of different lengths, all with advantage 1 and ratio 1; the
weight of a token is the gradient of the final loss with respect to its log-prob
(minus it, so that "pushed up" is positive), taken by autograd through
`course_lib.algos.grpo.policy_loss`:

- `grpo`: `1 / (L_i * B)`: each sequence gets the same total weight, so a token of a
  short completion weighs more than a token of a long one (Dr. GRPO's length bias,
  Liu et al. 2025: with A < 0, long wrong answers are penalised less per token);
- `bnpo` and `dapo`: `1 / (total tokens)`: every token counts the same (DAPO, Yu et al.
  2025); they differ only in which tokens are counted (local micro-batch vs the
  whole accumulated generation batch), which a single batch does not show;
- `dr_grpo`: `1 / (B * max_completion_length)`: a constant.

Simplification: one micro-batch, no gradient accumulation, one process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from course_lib.algos.grpo import CLIPPED_LOSSES, LOSSES, policy_loss

# The token aggregations of the classic clipped loss (the newer loss types change the
# objective itself; lesson 06's clip explorer draws those, and LUSPO is a sequence-level loss).
LOSS_TYPES = tuple(name for name in CLIPPED_LOSSES if LOSSES[name].level != "sequence")

from ..common.figures import build_explorer, new_figure, parse_numbers

__all__ = ["normalization_explorer", "per_token_weights", "plot_loss_normalization"]

_STYLES = {"grpo": dict(color="tab:red", marker="o", linestyle="-"),
           "bnpo": dict(color="tab:blue", marker="s", linestyle="-"),
           "dr_grpo": dict(color="tab:green", marker="^", linestyle="-"),
           "dapo": dict(color="tab:orange", marker="x", linestyle="--")}


def _check_lengths(lengths: Sequence[int]) -> list[int]:
    values = [int(round(v)) for v in lengths]
    if not values or min(values) < 1:
        raise ValueError(f"lengths={list(lengths)} must be positive token counts. Fix: e.g. [5, 20, 80].")
    return values


def per_token_weights(lengths: Sequence[int], loss_type: str, max_completion_length: int | None = None,
                      advantage: float = 1.0) -> np.ndarray:
    """Gradient weight of one token of each completion in the aggregated loss.

    Args:
        lengths: `B` completion lengths in tokens (>= 1).
        loss_type: "grpo", "bnpo", "dr_grpo" or "dapo".
        max_completion_length: the `dr_grpo` normaliser; None = max(lengths).
        advantage: A of every completion.

    Returns:
        `(B,)`: `-d loss / d logp_t` for a valid token t of completion i at ratio 1
        (the same for every token of a completion), e.g. `A / (L_i * B)` for grpo.
    """
    values = _check_lengths(lengths)
    max_len = max(values)
    mask = (torch.arange(max_len).unsqueeze(0) < torch.tensor(values).unsqueeze(1)).to(torch.float64)  # (B, T)
    logps = torch.zeros_like(mask, requires_grad=True)
    out = policy_loss(logps, None, torch.full((len(values),), float(advantage), dtype=torch.float64), mask,
                      loss_type=loss_type, max_completion_length=max_completion_length or max_len)
    (grad,) = torch.autograd.grad(out.loss, logps)  # (B, T)
    return (-grad[:, 0] + 0.0).numpy()


_IDEAS = {
    "grpo": "mean per completion, then over completions",
    "bnpo": "mean over the batch's tokens",
    "dr_grpo": "sum / (B x max_completion_length)",
    "dapo": "mean over the accumulated batch's tokens",
}


def plot_loss_normalization(lengths: Sequence[int] | str = (4, 8, 16, 32, 64, 128),
                            loss_type: str | Sequence[str] = LOSS_TYPES,
                            max_completion_length: int | None = None) -> Figure:
    """Per-token weight (left) and whole-completion weight (right) vs completion length.

    Args:
        lengths: the batch's completion lengths (or a string `"4, 8, 16"`).
        loss_type: one loss type or several; default all four.
        max_completion_length: `dr_grpo`'s normaliser; None = max(lengths).

    Returns:
        A Figure with 2 axes. In each, one line per loss type (in the given order),
        x = lengths sorted ascending, y = `per_token_weights` (left, log scale) or
        `per_token_weights * length` (right: the total weight of the completion's
        tokens, its pull on the update).
    """
    values = _check_lengths(parse_numbers(lengths, "lengths") if isinstance(lengths, str) else lengths)
    loss_types = [loss_type] if isinstance(loss_type, str) else list(loss_type)
    if not loss_types:
        raise ValueError(f"loss_type is empty. Fix: choose among {LOSS_TYPES}.")
    order = np.argsort(values, kind="stable")
    sorted_lengths = np.asarray(values)[order]
    max_len = max_completion_length or max(values)
    fig = new_figure(11, 4.2)
    token_ax, sequence_ax = fig.subplots(1, 2)
    for name in loss_types:
        weights = per_token_weights(values, name, max_len)[order]
        style = _STYLES.get(name, {})
        label = f"{name}: {_IDEAS[name]}" if name in _IDEAS else name  # the idea beside the loss_type
        token_ax.plot(sorted_lengths, weights, label=label, **style)
        sequence_ax.plot(sorted_lengths, weights * sorted_lengths, label=label, **style)
    batch = len(values)
    token_ax.set(title=f"Weight of one token (B = {batch}, A = 1, ratio = 1)", xlabel="completion length L (tokens)",
                 ylabel="-d loss / d log p(token)", yscale="log")
    sequence_ax.set(title="Weight of the whole completion (token weight x L)", xlabel="completion length L (tokens)",
                    ylabel="total weight of its tokens")
    for ax in (token_ax, sequence_ax):
        ax.grid(alpha=0.3, which="both")
    # one legend for both panels, under them, where it hides no line
    fig.legend(*token_ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8,
               title="loss_type", title_fontsize=8)
    fig.suptitle(f"grpo: 1/(L*B), short completions' tokens weigh more; bnpo/dapo: 1/(total tokens "
                 f"= {sum(values)}); dr_grpo: 1/(B*max_completion_length = {batch}*{max_len})", fontsize=10)
    return fig


def normalization_explorer(lengths: str = "4, 8, 16, 32, 64, 128") -> object:
    """Widget: type completion lengths, pick loss types (`plot_loss_normalization`)."""
    import ipywidgets as widgets

    def render(lengths: str, loss_types: tuple[str, ...], max_completion_length: int) -> Figure:
        return plot_loss_normalization(lengths, loss_types, max_completion_length or None)

    controls = {
        "lengths": widgets.Text(value=lengths, description="lengths", continuous_update=False,
                                layout=widgets.Layout(width="360px")),
        "loss_types": widgets.SelectMultiple(options=list(LOSS_TYPES), value=tuple(LOSS_TYPES),
                                             description="loss_type", rows=4),
        "max_completion_length": widgets.IntSlider(value=0, min=0, max=512, step=8, continuous_update=False,
                                                   description="max len (0 = longest)"),
    }
    return build_explorer(render, controls, columns=3)
