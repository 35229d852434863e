"""Every notebook: paired with its .ipynb, committed without outputs, and runs top to bottom.

Execution uses fast mode (COURSE_FAST=1), a fresh kernel per notebook, and the notebook's
folder as working directory, as a learner would run it.
"""
import os
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


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
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs_in_fast_mode(source, tmp_path):
    from nbclient import NotebookClient

    notebook = jupytext.read(source)
    env_before = dict(os.environ)
    os.environ.update({"COURSE_FAST": "1", "MPLBACKEND": "Agg", "COURSE_OUTPUT": str(tmp_path)})
    try:
        client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
