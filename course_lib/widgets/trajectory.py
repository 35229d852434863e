"""One multi-turn trajectory drawn token by token: who wrote each token, and which are trained.

A cell per token, coloured by its role in the loss (lesson 12): the prompt is context, a
token the model sampled (``tool_mask`` 1) is trained, a token the rollout loop appended (a
tool result and the header of the model's next turn, ``tool_mask`` 0) is read but masked.
With an ``advantage`` the title states it: in GRPO every trained token of the trajectory
is weighted by that one number.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

ROLE_COLORS = {"prompt": "#d9d9d9", "trained": "#7fc97f", "masked": "#fdae61"}
ROLE_LABELS = {"prompt": "prompt (context)", "trained": "model token: trained", "masked": "tool result: masked"}


def token_cells(tokenizer, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                tool_mask: Sequence[int]) -> list[tuple[str, str]]:
    """``(text, role)`` per token, prompt first; role is ``"prompt"``, ``"trained"`` or ``"masked"``.

    ``completion_ids`` and ``tool_mask`` have one entry per trajectory token (padding removed).
    """
    if len(completion_ids) != len(tool_mask):
        raise ValueError(f"completion_ids has {len(completion_ids)} tokens but tool_mask {len(tool_mask)}; "
                         "pass one mask entry per trajectory token (padding removed).")
    def text(token):
        return tokenizer.decode([int(token)]).replace("\n", "\\n")
    return ([(text(t), "prompt") for t in prompt_ids]
            + [(text(t), "trained" if m else "masked") for t, m in zip(completion_ids, tool_mask)])


def plot_trajectory_tokens(tokenizer, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                           tool_mask: Sequence[int], *, advantage: float | None = None, per_line: int = 48,
                           title: str = ""):
    """A figure with one coloured cell per token (see the module doc); returns the ``Figure``."""
    cells = token_cells(tokenizer, prompt_ids, completion_ids, tool_mask)
    rows = max(1, (len(cells) + per_line - 1) // per_line)
    fig = Figure(figsize=(max(per_line * 0.28, 6.0), rows * 0.36 + 0.9))  # fixed cells: no constrained layout
    ax = fig.add_subplot()
    for k, (text, role) in enumerate(cells):
        r, c = divmod(k, per_line)
        ax.add_patch(Rectangle((c, -r), 0.95, 0.9, color=ROLE_COLORS[role], label=role))
        ax.text(c + 0.47, -r + 0.42, text[:4], ha="center", va="center", fontsize=6, family="monospace")
    ax.set_xlim(0, per_line)
    ax.set_ylim(-rows + 0.9, 1)
    ax.axis("off")
    ax.legend(handles=[Patch(color=ROLE_COLORS[r], label=ROLE_LABELS[r]) for r in ROLE_COLORS],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    trained = sum(1 for _, role in cells if role == "trained")
    masked = sum(1 for _, role in cells if role == "masked")
    heading = f"{title}  " if title else ""
    heading += f"{trained} trained, {masked} masked tokens"
    if advantage is not None:
        heading += f"; advantage {advantage:+.3f} on every trained token"
    ax.set_title(heading, fontsize=9, pad=18)
    return fig
