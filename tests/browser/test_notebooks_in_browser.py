"""Every lesson in JupyterLab, in a real (headless) Chromium, as a learner meets it.

For each notebook: open it in a private JupyterLab on 127.0.0.1 (see lab_server.py; one
server, browser and app page per worker, each notebook with a fresh kernel and closed
after its test), run all cells in fast mode with a finite per-cell timeout, and check that no output
shows a traceback, "Error displaying widget" or a widget's Python repr. Then every
control is moved with mouse or keyboard events (lab_driver.py) and must redraw its
figure, or print a one-line message where the value is refused on purpose, within
`CONTROL_TIMEOUT` seconds. The layout at a 1400 px wide window is checked too: no label
is cut, every slider track is usable, nothing overflows the output area.

Needs Chromium (Debian: `apt-get install chromium`; another one: COURSE_CHROMIUM=path)
and Playwright for Python (its own browser downloads are not used). Run with
`make test-browser`. The table of controls and their redraw times is printed at the end
(conftest.py), and written to $COURSE_BROWSER_REPORT when set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The lessons that take longest in fast mode go first, so that with two notebooks at a time
# no long lesson starts last while the other worker idles; the rest follow in lesson order.
# xdist's load scheduling gives each worker two notebooks at the start (the first two to one
# worker, the next two to the other), then more to whichever runs low: the four longest are
# ordered so that the two opening pairs are close in CPU time (the lessons' stated fast-mode
# times: 12 + 13, 259 s, against 04 + 11, 221 s).
LONGEST_FIRST = ("12_agents", "13_debugging", "04_rlhf_ppo", "11_capstone", "00_setup", "10_inference_memory")
NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]*_*.ipynb"),
                   key=lambda p: (LONGEST_FIRST.index(p.stem) if p.stem in LONGEST_FIRST else len(LONGEST_FIRST),
                                  p.stem))
# Set by .ci/run, where the notebook test of `make test` leaves the fast-mode runs to this
# test: then nothing here may skip (a missing browser or package is a failure).
MUST_RUN = os.environ.get("COURSE_NOTEBOOKS_RUN_IN_BROWSER") == "1"
CELL_TIMEOUT = float(os.environ.get("COURSE_CELL_TIMEOUT", "300"))
CONTROL_TIMEOUT = 60.0
WINDOW = {"width": 1400, "height": 900}
MIN_TRACK_PX = 100  # ipywidgets' default slider track is 124 px at this size

# The controls each notebook shows (a control that fails to render is missing here).
EXPECTED_CONTROLS = {
    "01_rl_basics": ["P('4')", "reward", "lr"],
    "02_policy_gradients": ["reward shift", "samples"],
    "03_ppo": ["epsilon", "epsilon_high", "delta (0=off)", "IS level", "CISPO / SAPO weights", "gap", "family"],
    "04_rlhf_ppo": ["beta", "missing_eos_penalty"],
    "05_grpo": ["rewards", "G", "scale", "compare all + RLOO"],
    "06_grpo_variants": ["lengths", "loss_type", "max len (0 = longest)",
                         "epsilon", "epsilon_high", "delta (0=off)", "IS level", "CISPO / SAPO weights"],
    "07_batch_schedule": ["preset", "per_device_train_batch_size", "gradient_accumulation_steps",
                          "num_generations", "steps_per_generation", "num_processes", "num_iterations", "cycles"],
    "09_rewards": ["completion", "answer", "rewards"],
}

# Text typed into text controls (for a slider: the fraction of its track to click at),
# and what must follow: a new figure, or a one-line message (a refused value), after
# which the next valid value must draw again. Any other change (a click on a slider, a
# new option) may give either: the schedule explorer, for one, refuses a num_generations
# that does not divide the batch, with a message.
EDITS = {
    ("05_grpo", "rewards"): [("1, 0, 1", "message"), ("1, 1, 0, 0,  1, 1, 1, 1,  0, 0, 0, 0.5", "figure")],
    ("05_grpo", "G"): [("3", "figure")],
    ("06_grpo_variants", "lengths"): [("10, 20, 400", "figure"), ("ten", "message"), ("8, 16, 32", "figure")],
    ("09_rewards", "answer"): [("four", "message"), ("4 2", "message"), ("5", "figure")],
    # 6 generations (40% of 2..12) divide the batch of 18 that the clicks before leave
    ("07_batch_schedule", "num_generations"): [(0.4, "figure")],
    ("09_rewards", "completion"): [("<think>3 + 1 is 4</think><answer>4</answer>", "figure")],
}

def _skip(reason: str):
    if MUST_RUN:
        pytest.fail(f"COURSE_NOTEBOOKS_RUN_IN_BROWSER=1 and {reason}")
    pytest.skip(reason)


def _import_or_skip(module: str, reason: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        _skip(reason)


def _chromium() -> str | None:
    for candidate in (os.environ.get("COURSE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)):
            return path
    return None


@pytest.fixture(scope="module")
def lab():
    _import_or_skip("jupyterlab", reason="JupyterLab is not installed (make install)")
    from lab_server import running_lab

    with running_lab(NOTEBOOKS, env={"COURSE_FAST": "1"}) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    sync_api = _import_or_skip("playwright.sync_api", reason="Playwright is not installed (make install)")
    executable = _chromium()
    if executable is None:
        _skip("no Chromium found: apt-get install chromium, or set COURSE_CHROMIUM=/path/to/chromium")
    from lab_driver import CHROMIUM_ARGS

    profile = tempfile.mkdtemp(prefix="course-chromium-")
    try:
        with sync_api.sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=executable, args=CHROMIUM_ARGS, headless=True, viewport=WINDOW)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def lab_page(browser):
    """A page for the next notebook: the one the last notebook left open on the app, or a
    new one. Each worker loads JupyterLab's scripts once instead of once per notebook (5 to
    7 s of the browser's CPU each on a 2-core machine); a notebook whose test fails closes
    its page, and the next one starts on a fresh page."""
    pages = []

    def next_page():
        if not pages or pages[-1].is_closed():
            pages.append(browser.new_page())
        return pages[-1]

    yield next_page
    for page in pages:
        if not page.is_closed():
            page.close()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_jupyterlab(notebook, lab, lab_page):
    import lab_driver as drive

    name, stem = notebook.name, notebook.stem
    page, passed = lab_page(), False
    try:
        drive.open_notebook(page, lab, name)
        cells, seconds = drive.run_all_cells(page, name, CELL_TIMEOUT)
        print(f"{name}: {cells} code cells ran in {seconds:.1f} s")
        assert not drive.page_problems(page), f"{name} after running all cells: {drive.page_problems(page)}"
        # a lesson's runs go to its output folder, where a re-run replaces them, not to new temporary folders
        left = sorted(str(path.parent.relative_to(lab.temp)) for path in lab.temp.rglob("history.jsonl"))
        assert not left, f"{name} left training runs in the temporary folder: {left}"

        controls = drive.find_controls(page, name)
        assert [c.description for c in controls] == EXPECTED_CONTROLS.get(stem, []), (
            f"{name}: the controls shown differ from the lesson's")
        for root in sorted({c.root for c in controls}):
            shape = drive.layout(page, root)
            assert not shape["cut"], f"{name}: labels cut: {shape['cut']}"
            narrow = [t for t in shape["tracks"] if t["width"] < MIN_TRACK_PX]
            assert not narrow, f"{name}: slider tracks narrower than {MIN_TRACK_PX} px: {narrow}"
            assert shape["overflow"] <= 1, (f"{name}: a widget runs {shape['overflow']} px past the right edge "
                                            f"of its {shape['width']} px output area")

        for control in controls:
            for edit, expected in EDITS.get((stem, control.description), [(None, "figure or message")]):
                answer = drive.move_control(page, control, edit, timeout=CONTROL_TIMEOUT)
                drive.RESULTS.append(answer)
                outcome = answer.outcome.split(":")[0]
                assert outcome in expected.split(" or "), (f"{name}: {control.description!r} ({answer.action}) gave "
                                             f"{answer.outcome!r}, expected a {expected}")
                if outcome == "message":
                    assert "\n" not in answer.outcome, f"{name}: a message of several lines: {answer.outcome!r}"
                problems = drive.page_problems(page)
                assert not problems, f"{name}: after {control.description!r} ({answer.action}): {problems}"
        passed = True
    finally:
        drive.close_notebook(page, name, keep_page=passed)
