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

__all__ = ["build_explorer", "category_colors", "enable_notebook_display", "fit_labels", "label_width",
           "new_figure", "one_line", "parse_numbers"]

# ipywidgets draws descriptions at 13 px (`--jp-widgets-font-size`) in a box of 80 px
# (`--jp-widgets-inline-label-width`), cut with an ellipsis. PX_PER_CHAR bounds the
# width of one character of a sans-serif font at that size (DejaVu Sans, the widest
# common one, averages about 7.6 px over identifiers like `epsilon_high`).
PX_PER_CHAR = 8.2
LABEL_PADDING_PX = 10
DEFAULT_LABEL_PX = 80
# A slider's track should be wide enough to aim at one of its values with the mouse.
SLIDER_TRACK_PX = 160
# Besides label and track, a slider row holds the readout and margins (96 px measured in
# JupyterLab 4 with ipywidgets 8).
SLIDER_EXTRA_PX = 96


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


def label_width(text: str) -> int:
    """Pixels that show `text` as a widget description without cutting it (an upper bound)."""
    return int(round(PX_PER_CHAR * len(text) + LABEL_PADDING_PX))


def fit_labels(controls: Sequence[Any]) -> None:
    """Widen descriptions that would be cut, and give sliders a usable track.

    A description longer than the default 80 px box gets a box of `label_width` pixels;
    the control's layout width, when set in pixels, grows by as much so that its input
    keeps its size. The sliders share one label width (their tracks line up) and are
    made wide enough for a track of `SLIDER_TRACK_PX` pixels. Checkboxes (description
    on the right) and controls without a description are left alone.
    """
    labelled = [c for c in controls if getattr(c, "description", "") and type(c).__name__ != "Checkbox"]
    sliders = [c for c in labelled if type(c).__name__.endswith("Slider")]
    slider_label = max((label_width(c.description) for c in sliders), default=0)
    for control in labelled:
        is_slider = control in sliders
        width = max(slider_label if is_slider else label_width(control.description), DEFAULT_LABEL_PX)
        current = _pixels(control.layout.width)
        if is_slider:
            control.style.description_width = f"{width}px"
            control.layout.width = f"{max(current or 0, width + SLIDER_TRACK_PX + SLIDER_EXTRA_PX)}px"
        elif width > DEFAULT_LABEL_PX:
            control.style.description_width = f"{width}px"
            if current is not None:
                control.layout.width = f"{current + width - DEFAULT_LABEL_PX}px"


def _pixels(width: Any) -> int | None:
    """`"520px"` -> 520; anything else (None, "50%", "auto") -> None."""
    text = str(width or "")
    return int(float(text[:-2])) if text.endswith("px") else None


def one_line(error: BaseException) -> str:
    """An error's message on one line (newlines and runs of spaces become one space)."""
    return " ".join(str(error).split())


def build_explorer(render: Callable[..., Figure], controls: Mapping[str, Any],
                   columns: int = 3, input_errors: tuple[type[BaseException], ...] = (ValueError,)) -> Any:
    """A `VBox` of the `controls` (rows that wrap) above an `Output` that shows `render(**values)`.

    The figure is redrawn whenever a control changes. An error of the `input_errors`
    types raised by `render` (a bad value typed by the learner) is printed as one line,
    "Cannot draw: ...", instead of a traceback; the next valid value draws again.
    The box keeps the last figure in `.figure` (None after an error) and the last
    message in `.message` (None after a figure), for inspection, and exposes
    `.redraw()`; while `.hold` is True, control changes do not redraw (set several
    controls at once, then call `.redraw()`). Labels are sized by `fit_labels`.
    """
    import ipywidgets as widgets
    from IPython.display import display

    output = widgets.Output()
    control_list = list(controls.values())
    fit_labels(control_list)
    # Rows wrap instead of running past the right edge of a narrow output area.
    rows = [widgets.HBox(control_list[i:i + columns], layout=widgets.Layout(flex_flow="row wrap"))
            for i in range(0, len(control_list), columns)]
    box = widgets.VBox([*rows, output])
    box.figure = None
    box.message = None
    box.hold = False

    def redraw(_change: Any = None) -> None:
        if box.hold and _change is not None:
            return
        values = {name: control.value for name, control in controls.items()}
        with output:
            output.clear_output(wait=True)
            try:
                box.figure = render(**values)
            except input_errors as error:
                box.figure = None
                box.message = f"Cannot draw: {one_line(error)}"
                print(box.message)
                return
            box.message = None
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
