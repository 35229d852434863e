"""Run a jupytext notebook's code cells in order in one IPython shell, like a fresh kernel.

Usage: python run_notebook.py NOTEBOOK.py

The cells run in an ``InteractiveShell`` inside this process (magics, ``display`` and
top-level ``await`` work as in Jupyter), without the kernel's ZeroMQ messaging: executing
through a kernel client occasionally left client and kernel both waiting on each other
here. Exits with status 1 and the failing cell's source and traceback on the first error.
"""

import sys
import time
from pathlib import Path

import jupytext
from IPython.core.interactiveshell import InteractiveShell


class NotebookShell(InteractiveShell):
    """A headless shell: ``%matplotlib inline`` selects the backend, there is no GUI loop."""

    def enable_gui(self, gui=None):
        pass


def main(path: str) -> int:
    notebook = jupytext.read(path)
    shell = NotebookShell.instance(colors="nocolor")
    started = time.time()
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells, start=1):
        result = shell.run_cell(cell.source, store_history=True)
        if not result.success:
            print(f"\n--- {Path(path).name}: code cell {number} of {len(code_cells)} failed ---\n{cell.source}",
                  file=sys.stderr)
            return 1
    print(f"{Path(path).name}: {len(code_cells)} code cells ran in {time.time() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
