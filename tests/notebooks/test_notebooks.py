"""Every notebook: paired with its .ipynb, committed without outputs, and runs top to bottom.

Execution uses fast mode (COURSE_FAST=1), a fresh interpreter per notebook running the
cells in an IPython shell (see run_notebook.py), and the notebook's folder as working
directory, as a learner would run it.

`.ci/run` sets COURSE_NOTEBOOKS_RUN_IN_BROWSER=1 when Chromium is there: the browser test
(`make test-browser`, later in the same CI run) then runs every notebook top to bottom in
fast mode in a real kernel, failing on the first cell that raises, so the fast-mode run
here skips, saying so, instead of running each lesson twice. Without it (`make test`, a
machine without Chromium) it runs as always.
"""
import os
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.py"))
RUNNER = Path(__file__).with_name("run_notebook.py")
RUN_IN_BROWSER = os.environ.get("COURSE_NOTEBOOKS_RUN_IN_BROWSER") == "1"


def _cells(notebook):
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_there_are_notebooks():
    assert SOURCES, "notebooks/ has no NN_topic.py sources"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_pair_in_sync_and_without_outputs(source):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} is missing: run `make sync-notebooks`"
    from_py, from_ipynb = jupytext.read(source), nbformat.read(paired, as_version=4)
    assert _cells(from_py) == _cells(from_ipynb), (
        f"{paired.name} is out of sync with {source.name}: run `make sync-notebooks`")
    for cell in from_ipynb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{paired.name} is committed with outputs: clear them (jupytext --sync does)")


@pytest.mark.slow
@pytest.mark.parametrize("source", [pytest.param(source, id=source.stem, marks=pytest.mark.xdist_group(source.stem))
                                    for source in SOURCES])  # each lesson a unit of its own for pytest-xdist
def test_notebook_runs_in_fast_mode(source, tmp_path):
    """A fresh interpreter runs every code cell in order, from the notebook's folder."""
    if RUN_IN_BROWSER:
        pytest.skip("COURSE_NOTEBOOKS_RUN_IN_BROWSER=1: the browser test runs this notebook top to bottom "
                    "in fast mode (make test-browser), and must not skip")
    temp = tmp_path / "tmp"  # the lesson's temporary folder: its runs must not end up there
    temp.mkdir()
    env = {**os.environ, "COURSE_FAST": "1", "MPLBACKEND": "Agg", "COURSE_OUTPUT": str(tmp_path / "outputs"),
           "TMPDIR": str(temp)}
    try:
        result = subprocess.run([sys.executable, str(RUNNER), str(source)], cwd=NOTEBOOKS, env=env,
                                capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{source.name} did not finish within 600 s in fast mode")
    assert result.returncode == 0, f"{source.name} failed:\n{result.stderr[-4000:]}"
    # A training run's folder (a SmolLM2 run's holds a 540 MB model) goes to COURSE_OUTPUT, where a
    # re-run replaces it, never to a fresh temporary folder that every re-run would add to.
    left = sorted(str(path.parent.relative_to(temp)) for path in temp.rglob("history.jsonl"))
    assert not left, f"{source.name} left training runs in the temporary folder: {left}"
    print(result.stdout.strip().splitlines()[-1])
