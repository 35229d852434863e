"""Helpers shared by the plotting functions and the explorers of `course_lib.widgets`.

Figures are built with `matplotlib.figure.Figure` directly (not `pyplot`): they work
under any backend, are never shown by a stray `plt.show()`, and are freed when the
last reference goes. ipywidgets is imported inside `build_explorer` only, so the
plotting functions work where ipywidgets is absent.

Such figures are not known to pyplot, so `plt.show()` does not show them and IPython
only shows them as images once a PNG formatter exists for `Figure` (`%matplotlib
inline` installs one). `enable_notebook_display` installs it when none is there;
importing `course_lib.widgets` calls it, so a cell ending with a figure shows it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure

__all__ = ["build_explorer", "category_colors", "enable_notebook_display", "new_figure", "parse_numbers"]


def category_colors(count: int) -> list[tuple[float, float, float, float]]:
    """`count` distinguishable colours (tab10, then tab20, then a continuous map)."""
    if count <= 10:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in range(count)]
    if count <= 20:
        cmap = colormaps["tab20"]
        return [cmap(i) for i in range(count)]
    cmap = colormaps["viridis"]
    return [cmap(i / max(count - 1, 1)) for i in range(count)]


def parse_numbers(text: str | Sequence[float], name: str = "values") -> list[float]:
    """Parse `"1, 0, 0.5 nan"` (commas and/or spaces) into floats; lists pass through.

    `nan` and `None` become NaN (a reward function that did not apply).
    """
    if not isinstance(text, str):
        return [float("nan") if v is None else float(v) for v in text]
    pieces = text.replace(",", " ").replace(";", " ").split()
    values = []
    for piece in pieces:
        if piece.lower() in ("nan", "none"):
            values.append(float("nan"))
            continue
        try:
            values.append(float(piece))
        except ValueError:
            raise ValueError(f"{name}: {piece!r} is not a number. Fix: type numbers separated by commas, "
                             "e.g. '1, 0, 0.5, nan'.") from None
    if not values:
        raise ValueError(f"{name} is empty. Fix: type at least one number, e.g. '1, 0, 1, 0'.")
    return values


def build_explorer(render: Callable[..., Figure], controls: Mapping[str, Any],
                   columns: int = 3) -> Any:
    """A `VBox` of the `controls` (a grid) above an `Output` that shows `render(**values)`.

    The figure is redrawn whenever a control changes. A `ValueError` raised by `render`
    (a bad value typed by the learner) is printed as one line instead of a traceback.
    The box keeps the last figure in `.figure` (None after an error), for inspection,
    and exposes `.redraw()`; while `.hold` is True, control changes do not redraw (set
    several controls at once, then call `.redraw()`).
    """
    import ipywidgets as widgets
    from IPython.display import display

    output = widgets.Output()
    control_list = list(controls.values())
    rows = [widgets.HBox(control_list[i:i + columns]) for i in range(0, len(control_list), columns)]
    box = widgets.VBox([*rows, output])
    box.figure = None
    box.hold = False

    def redraw(_change: Any = None) -> None:
        if box.hold and _change is not None:
            return
        values = {name: control.value for name, control in controls.items()}
        with output:
            output.clear_output(wait=True)
            try:
                box.figure = render(**values)
            except ValueError as error:
                box.figure = None
                print(f"Cannot draw: {error}")
                return
            display(box.figure)

    for control in control_list:
        control.observe(redraw, names="value")
    box.redraw = redraw
    redraw()
    return box


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure of `width` x `height` inches."""
    return Figure(figsize=(width, height), layout="constrained")


def _figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def enable_notebook_display() -> bool:
    """Make IPython display `Figure` objects as PNG images, if it does not already.

    Returns True when running under IPython (a formatter is then in place), False
    elsewhere (nothing to do). An existing formatter, e.g. from `%matplotlib inline`,
    is kept.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    png_formatter = shell.display_formatter.formatters["image/png"]
    if png_formatter.for_type(Figure) is None:
        png_formatter.for_type(Figure, _figure_png)
    return True
