"""Run a jupytext notebook's code cells in order in one IPython shell, like a fresh kernel.

Usage: python run_notebook.py NOTEBOOK.py|NOTEBOOK.ipynb

The cells run in an ``InteractiveShell`` inside this process (magics, ``display`` and
top-level ``await`` work as in Jupyter), without the kernel's ZeroMQ messaging: executing
through a kernel client occasionally left client and kernel both waiting on each other
here. Exits with status 1 and the failing cell's source and traceback on the first error.
With ``RUN_NOTEBOOK_TIMES=1`` it prints how long each code cell took, in wall and CPU
seconds (this process and the child processes it waited for), and the total CPU time: the
figure each lesson states at its top.
"""

import json
import os
import resource
import sys
import time
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell


class NotebookShell(InteractiveShell):
    """A headless shell: ``%matplotlib inline`` selects the backend, there is no GUI loop."""

    def enable_gui(self, gui=None):
        pass


def code_cells(path: str) -> list[str]:
    """The sources of the notebook's code cells, in order."""
    if path.endswith(".ipynb"):
        # Read with the standard library: the Colab test runs a notebook whose first cell
        # installs the course, jupytext included, so jupytext cannot be imported before it.
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
        return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    import jupytext

    return [cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code"]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(path: str) -> int:
    sources = code_cells(path)
    times = os.environ.get("RUN_NOTEBOOK_TIMES") == "1"
    shell = NotebookShell.instance(colors="nocolor")
    started = time.time()
    for number, source in enumerate(sources, start=1):
        cell_started, cell_cpu = time.time(), cpu_seconds()
        result = shell.run_cell(source, store_history=True)
        if times:
            print(f"code cell {number}: {time.time() - cell_started:.1f} s, {cpu_seconds() - cell_cpu:.1f} s CPU")
        if not result.success:
            print(f"\n--- {Path(path).name}: code cell {number} of {len(sources)} failed ---\n{source}",
                  file=sys.stderr)
            return 1
    print(f"{Path(path).name}: {len(sources)} code cells ran in {time.time() - started:.1f} s"
          + (f" ({cpu_seconds():.0f} s of CPU time, interpreter start and imports included)" if times else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
