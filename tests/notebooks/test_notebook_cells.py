"""Every notebook's prose sits in markdown cells: no code cell holds a markdown heading.

A missing `# %% [markdown]` marker leaves the section after it inside the code cell
above, where Jupyter shows it as Python comments. Its headings (`# ## 5. ...`) are the
visible sign: a code cell has no reason to hold a line that reads as one.
"""
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.py"))
HEADING = re.compile(r"^# #+ ")


def code_cell_headings(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each markdown-heading comment inside a code cell.

    A cell starts at a line beginning with `# %%`; `# %% [markdown]` (or `[md]`) starts a
    markdown cell, any other marker a code cell. Lines before the first marker belong to
    no cell and are not checked.
    """
    found, in_code = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("# %%"):
            in_code = not re.match(r"# %%.*\[(markdown|md)\]", line)
        elif in_code and HEADING.match(line):
            found.append((number, line))
    return found


def test_the_scanner_finds_a_heading_in_a_code_cell_and_only_there():
    text = ("# %% [markdown]\n# ## 1. Prose\n#\n# text\n\n"
            "# %%\nx = 1\n# a comment\n#\n# ## 2. Trapped\n\n"
            "# %% [markdown]\n# ## 3. Fine\n\n# %% tags=[\"x\"]\n# ### Also trapped\n")
    assert code_cell_headings(text) == [(10, "# ## 2. Trapped"), (16, "# ### Also trapped")]
    assert code_cell_headings("# %%\n#comment\n# #not a heading\nprint('# ## no')\n") == []


def test_there_are_notebooks():
    assert SOURCES


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_markdown_heading_inside_a_code_cell(source):
    found = code_cell_headings(source.read_text(encoding="utf-8"))
    assert not found, (f"{source.name}: a code cell holds markdown headings (a `# %% [markdown]` "
                       "marker is missing above them): "
                       + "; ".join(f"line {number}: {line!r}" for number, line in found))
