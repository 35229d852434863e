"""Drive a notebook in JupyterLab from a real browser, as a learner would.

`run_all_cells` runs a notebook with a finite per-cell timeout; `find_controls` lists
every ipywidgets control that the outputs show; `move_control` changes one with real
mouse and keyboard events and times how long its figure takes to redraw.

A control "answers" when the explorer's output shows a new figure, or a one-line
message (a value the explorer refuses, e.g. a non-numeric answer), within the timeout.
Nothing on the page may read "Error displaying widget", show a widget's Python repr
instead of the widget, or show a traceback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the test skips (or fails under MUST_RUN) before driving a page
    PlaywrightTimeout = TimeoutError

# Chromium flags for an unattended, offline run (no sandbox: CI containers run as root).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Text that must never be on the page: a widget that failed to render, a widget shown as
# its Python repr (the front end did not load the widget manager), a traceback.
FORBIDDEN_TEXT = ("Error displaying widget", "Traceback (most recent call last)", "children=(",
                  "VBox(", "HBox(", "interactive(", "Loading widget...")

# How often the test asks the page how far a run has come. The page is polled from Python, and
# each poll costs the kernels' cores a little (the browser, Playwright's driver and this
# process all work for it), so it stays coarse: the run of a notebook takes tens of seconds.
POLL_MS = 500

# Every control kind the lessons use, by its ipywidgets CSS class.
CONTROL_SELECTOR = (".widget-slider, .widget-dropdown, .widget-text, .widget-textarea, "
                    ".widget-select-multiple, .widget-checkbox")

# The notebook panel of one file (not "the current widget": a restored workspace may
# hold other tabs).
_PANEL_JS = """(name) => [...window.jupyterapp.shell.widgets('main')]
  .find(w => w.context && w.context.path === name && w.content && w.content.widgets)"""

# Polled while the notebook runs, so it stays cheap: counts, and the source of the first cell
# that raised (or of the first one not finished) only; no output is serialised.
_NOTEBOOK_STATE_JS = """(name) => {
  const panel = (""" + _PANEL_JS + """)(name);
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const done = c => c.model.executionCount !== null && !(c.promptNode && c.promptNode.textContent.trim() === '[*]:');
  let error = null;
  for (let i = 0; i < cells.length && !error; i++) {
    const outputs = cells[i].model.outputs;
    for (let k = 0; k < outputs.length; k++) {
      const output = outputs.get(k);
      if (output.type === 'error') {
        const json = output.toJSON();
        error = {cell: i + 1, error: json.ename + ': ' + json.evalue,
                 source: cells[i].model.sharedModel.getSource().slice(0, 300)};
        break;
      }
    }
  }
  const pending = cells.findIndex(c => !done(c));
  return {
    kernel: panel.sessionContext.session?.kernel?.status ?? 'none',
    cells: cells.length,
    finished: cells.filter(done).length,
    error,
    pending: pending < 0 ? null : {cell: pending + 1, source: cells[pending].model.sharedModel.getSource().slice(0, 300)},
  };
}"""

# Tag every widget root (a cell output holding controls) and every control in it, and
# return their descriptions.
_TAG_CONTROLS_JS = """(selector) => {
  const roots = [...document.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.querySelector(selector));
  const found = [];
  roots.forEach((root, r) => {
    root.setAttribute('data-course-root', String(r));
    root.querySelectorAll(selector).forEach((el, k) => {
      const id = r + '-' + k;
      el.setAttribute('data-course-control', id);
      const kind = ['slider', 'dropdown', 'textarea', 'select-multiple', 'checkbox', 'text']
        .find(name => el.classList.contains('widget-' + name));
      // A checkbox's description is on its right; its left label holds a zero-width space.
      const description = [...el.querySelectorAll('.widget-label, .widget-label-basic')]
        .map(l => l.textContent.replace(/\u200b/g, '').trim()).find(t => t);
      found.push({id, root: r, kind, description: description || el.textContent.trim().slice(0, 40)});
    });
  });
  return found;
}"""

# The outputs shown by a root's Output widgets. `_MARK_JS` marks those there now; a
# redraw replaces them, so unmarked ones are new (even when they look the same).
_MARK_JS = """(r) => document.querySelectorAll(`[data-course-root="${r}"] .widget-output .jp-OutputArea-output`)
  .forEach(o => o.setAttribute('data-course-seen', '1'))"""

_FRESH_JS = """(r) => {
  const outputs = [...document.querySelectorAll(`[data-course-root="${r}"] .widget-output .jp-OutputArea-output`)];
  const fresh = outputs.filter(o => !o.hasAttribute('data-course-seen'));
  return {fresh: fresh.length, stale: outputs.length - fresh.length,
          images: fresh.reduce((n, o) => n + o.querySelectorAll('img').length, 0),
          text: fresh.filter(o => !o.querySelector('img')).map(o => o.textContent).join('').trim()};
}"""

# Waited for inside the page (no round trip to Python per check): a new output in the root,
# then the notebook's kernel idle again.
_ANSWERED_JS = """(r) => {
  const now = (""" + _FRESH_JS + """)(r);
  return now.images > 0 || now.text.length > 0;
}"""
_IDLE_JS = """(name) => (""" + _PANEL_JS + """)(name).sessionContext.session?.kernel?.status === 'idle'"""

# Layout problems of one root: labels whose text is cut (ellipsis), slider tracks too
# narrow to use, content wider than the output area.
_LAYOUT_JS = """(r) => {
  const root = document.querySelector(`[data-course-root="${r}"]`);
  const area = root.getBoundingClientRect();
  const cut = [...root.querySelectorAll('.widget-label')]
    .filter(l => l.textContent.trim() && l.scrollWidth > l.clientWidth)
    .map(l => `${l.textContent.trim()} (${l.scrollWidth} px of text in ${l.clientWidth} px)`);
  const tracks = [...root.querySelectorAll('.widget-slider')].map(s => {
    const track = s.querySelector('.noUi-target, .slider');
    return {label: s.querySelector('.widget-label')?.textContent.trim() ?? '',
            width: track ? track.getBoundingClientRect().width : 0};
  });
  let right = 0;
  root.querySelectorAll('*').forEach(el => {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.height > 0) right = Math.max(right, box.right);
  });
  return {cut, tracks, overflow: Math.round(right - area.right), width: Math.round(area.width)};
}"""


@dataclass
class Control:
    notebook: str
    id: str
    root: int
    kind: str
    description: str


@dataclass
class Answer:
    control: Control
    action: str
    outcome: str            # "figure" or "message: <the line>"
    seconds: float


@dataclass
class NotebookRun:
    name: str
    cells: int
    seconds: float
    answers: list[Answer] = field(default_factory=list)


# Every change made in this session, for the summary (conftest.py).
RESULTS: list[Answer] = []


def report_lines(answers: list[Answer]) -> list[str]:
    """A table of the changes: notebook, control, action, outcome, redraw seconds."""
    lines = [f"{'notebook':<20} {'control':<30} {'action':<44} {'outcome':<8} {'redraw s':>8}"]
    for answer in answers:
        outcome = "figure" if answer.outcome == "figure" else "message"
        lines.append(f"{answer.control.notebook.removesuffix('.ipynb'):<20} {answer.control.description:<30} "
                     f"{answer.action[:44]:<44} {outcome:<8} {answer.seconds:>8.2f}")
    controls = {(a.control.notebook, a.control.id) for a in answers}
    times = sorted(a.seconds for a in answers)
    lines.append(f"{len(controls)} controls, {len(answers)} changes; redraw median {times[len(times) // 2]:.2f} s, "
                 f"max {times[-1]:.2f} s")
    return lines


def open_notebook(page, lab, name: str, timeout: float = 120.0) -> None:
    """Open `name` in JupyterLab; accept the kernel dialog if one asks; wait for an idle kernel.

    A page that already shows this JupyterLab opens the notebook in the running app (as a
    double click in the file browser does), so that the app's scripts load once per page,
    not once per notebook; a blank page loads the app at the notebook's address.
    """
    if page.evaluate("() => !!window.jupyterapp") and page.url.startswith(lab.url):
        page.evaluate("(name) => window.jupyterapp.commands.execute('docmanager:open', {path: name}).then(() => true)",
                      name)
    else:
        page.goto(lab.lab_url(name))
    page.wait_for_function(f"window.jupyterapp && ({_PANEL_JS})({name!r})", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            dialog.first.click()
        status = page.evaluate(f"(name) => ({_PANEL_JS})(name).sessionContext.session?.kernel?.status", name)
        if status == "idle":
            return
        page.wait_for_timeout(250)
    raise TimeoutError(f"{name}: the kernel was not idle {timeout:.0f} s after opening the notebook")


def run_all_cells(page, name: str, cell_timeout: float) -> tuple[int, float]:
    """Run every cell; fail when one cell runs longer than `cell_timeout` or raises.

    Returns (number of code cells, seconds). The timeout is per cell: the clock restarts
    each time one more cell finishes.
    """
    started = time.monotonic()
    page.evaluate(f"(name) => {{ window.jupyterapp.shell.activateById(({_PANEL_JS})(name).id);"
                  f"  return window.jupyterapp.commands.execute('notebook:run-all-cells'); }}", name)
    done, last_progress = -1, time.monotonic()
    while True:
        state = page.evaluate(_NOTEBOOK_STATE_JS, name)
        if state["error"]:
            error = state["error"]
            raise AssertionError(f"{name}: code cell {error['cell']} raised {error['error']}\n{error['source']}")
        finished = state["finished"]
        if finished == state["cells"] and state["kernel"] == "idle":
            return state["cells"], time.monotonic() - started
        if finished != done:
            done, last_progress = finished, time.monotonic()
        elif time.monotonic() - last_progress > cell_timeout:
            stuck = state["pending"] or {"cell": "?", "source": ""}
            raise TimeoutError(f"{name}: code cell {stuck['cell']} of {state['cells']} did not finish within "
                               f"{cell_timeout:.0f} s (kernel {state['kernel']}):\n{stuck['source']}")
        page.wait_for_timeout(POLL_MS)


def close_notebook(page, name: str, keep_page: bool = False) -> None:
    """Shut the notebook's kernel down (each holds a model in memory), then close the page,
    or with `keep_page` only the notebook's tab (unsaved: the served copy stays as it was),
    leaving the app loaded for the next notebook."""
    page.evaluate(f"(name) => ({_PANEL_JS})(name)?.sessionContext.shutdown()", name)
    if not keep_page:
        page.close()
        return
    try:
        page.evaluate(f"(name) => ({_PANEL_JS})(name)?.dispose()", name)
        page.wait_for_function(f"(name) => !({_PANEL_JS})(name) && !document.querySelector('.jp-OutputArea-output')",
                               arg=name, timeout=30_000)
    except Exception:
        page.close()  # the next notebook starts on a fresh page
        raise


def page_problems(page) -> list[str]:
    """Forbidden text anywhere in the notebook's outputs."""
    text = page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                         ".map(o => o.innerText).join('\\n')")
    return [bad for bad in FORBIDDEN_TEXT if bad in text]


def find_controls(page, notebook: str) -> list[Control]:
    page.wait_for_timeout(500)  # let the last widget views attach
    return [Control(notebook=notebook, **found) for found in page.evaluate(_TAG_CONTROLS_JS, CONTROL_SELECTOR)]


def layout(page, root: int) -> dict:
    return page.evaluate(_LAYOUT_JS, root)


def _locator(page, control: Control):
    return page.locator(f'[data-course-control="{control.id}"]')


def _type_into(page, element, text: str, submit: str) -> None:
    element.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(text)
    page.keyboard.press(submit)


def _activate_cell(page, element) -> None:
    """Select the control's cell first, by clicking its input prompt, as a learner's first
    click does: selecting a cell can scroll the notebook, and a slider that moves between
    mouse-down and mouse-up takes no click."""
    active = element.evaluate("""el => {
      const cell = el.closest('.jp-Cell');
      cell.querySelector('.jp-InputPrompt').setAttribute('data-course-prompt', '1');
      return cell.classList.contains('jp-mod-active');
    }""")
    prompt = page.locator('[data-course-prompt="1"]')
    if not active:
        prompt.click()
        page.wait_for_timeout(300)
        element.scroll_into_view_if_needed()
    prompt.evaluate("p => p.removeAttribute('data-course-prompt')")


def perform(page, control: Control, edit: str | float | None = None) -> str:
    """Change `control` with mouse or keyboard events; returns what was done.

    `edit` is the text to type (text controls), the fraction of a slider's track to click
    at, or None for the default change: a slider is clicked at a quarter or three quarters of its track, a dropdown takes the
    next option (the previous one from the last), a multi-select toggles one option, a checkbox flips,
    a text box gets its comma-separated values reversed.
    """
    element = _locator(page, control)
    element.scroll_into_view_if_needed()
    if control.kind == "slider":
        track = element.locator(".noUi-target, .slider").first
        handle = element.locator(".noUi-handle").first
        box, knob = track.bounding_box(), handle.bounding_box()
        fraction = 0.25 if knob["x"] + knob["width"] / 2 > box["x"] + box["width"] / 2 else 0.75
        fraction = float(edit) if edit is not None else fraction
        page.mouse.click(box["x"] + fraction * box["width"], box["y"] + box["height"] / 2)
        return f"click at {fraction:.0%} of the track"
    if control.kind == "dropdown":
        # A native <select> opens a popup the page cannot see into: choose the option the
        # way the popup would (input and change events on the element).
        select = element.locator("select")
        index = select.evaluate("s => s.selectedIndex")
        target = index + 1 if index + 1 < select.locator("option").count() else index - 1
        select.select_option(index=target)
        return f"choose {select.evaluate('s => s.value')!r}"
    if control.kind == "select-multiple":
        options = element.locator("option")
        selected = element.locator("select").evaluate("s => [...s.options].map(o => o.selected)")
        # drop the last selected option when several are, else add the first unselected
        index = max(i for i, s in enumerate(selected) if s) if sum(selected) > 1 else selected.index(False)
        options.nth(index).click(modifiers=["Control"])
        return f"ctrl-click {options.nth(index).inner_text()}"
    if control.kind == "checkbox":
        element.locator("input").click()
        return "click"
    if control.kind == "textarea":
        box = element.locator("textarea")
        _type_into(page, box, edit if edit is not None else box.input_value()[::-1], "Tab")
        return f"type {edit!r}" if edit is not None else "type the text reversed"
    field_ = element.locator("input")
    if edit is None:
        edit = ", ".join(reversed(field_.input_value().replace(",", " ").split()))
    _type_into(page, field_, edit, "Enter")
    return f"type {edit!r}"


def move_control(page, control: Control, edit: str | float | None = None, timeout: float = 30.0) -> Answer:
    """`perform` one change and wait until the output shows a new figure or message.

    The time is taken from the change to the first new output. The outcome is read once
    the kernel is idle again (a redraw may print a note before its figure): "figure"
    when a new image is shown, else "message: <the text>".
    """
    element = _locator(page, control)
    element.scroll_into_view_if_needed()
    _activate_cell(page, element)
    page.evaluate(_MARK_JS, control.root)
    started = time.monotonic()
    action = perform(page, control, edit)
    try:
        # Checked in the page every 25 ms (a redraw's time is read to that precision), then
        # the outcome once the kernel is idle again.
        page.wait_for_function(_ANSWERED_JS, arg=control.root, polling=25,
                               timeout=timeout * 1000)
        seconds = time.monotonic() - started
        page.wait_for_function(_IDLE_JS, arg=control.notebook, polling=25,
                               timeout=max(1.0, started + timeout - time.monotonic()) * 1000)
    except PlaywrightTimeout:
        raise TimeoutError(f"{control.notebook}: control {control.description!r} ({action}) did not redraw "
                           f"within {timeout:.0f} s; new output: {page.evaluate(_FRESH_JS, control.root)}") from None
    now = page.evaluate(_FRESH_JS, control.root)
    outcome = "figure" if now["images"] else f"message: {now['text']}"
    return Answer(control, action, outcome, seconds)
