"""Every import in ``course_lib`` points down the floors written in ``course_lib/__init__.py``.

The floor table is the one place the layers are written; the map is read from the sources with
``ast`` (``benchmarks/import_map.py``), so an import inside a function counts like any other.
"""

import ast
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("import_map", ROOT / "benchmarks" / "import_map.py")
import_map = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_map)


def test_every_folder_stands_on_exactly_one_floor():
    text = ast.get_docstring(ast.parse((ROOT / "course_lib" / "__init__.py").read_text()))
    listed = [name.strip() for names in re.findall(r"^floor \d+: (.+)$", text, flags=re.M) for name in names.split(",")]
    rooms = {import_map.room(m) for m in import_map.modules()} - {"course_lib"}
    assert len(listed) == len(set(listed)), f"a folder is on two floors: {sorted(n for n in listed if listed.count(n) > 1)}"
    assert set(listed) == rooms, (f"not on a floor (add it to course_lib/__init__.py): {sorted(rooms - set(listed))}; "
                                  f"on a floor but not in the package: {sorted(set(listed) - rooms)}")


def test_no_import_runs_back_up_the_floors():
    table = import_map.floors()
    upward = import_map.backup_imports(import_map.imports(), table)
    assert not upward, "imports from a floor to the same or a higher one (move the code down, or the importer up):\n" + \
        "\n".join(f"{a} (floor {table[import_map.room(a)]}) -> {b} (floor {table[import_map.room(b)]})"
                  for a, b in upward)


def test_the_floor_check_sees_an_upward_import_a_function_level_one_included(tmp_path):
    """The checker itself, on a made-up package: a lesson file importing the loop, inside a function."""
    package = tmp_path / "course_lib"
    (package / "run").mkdir(parents=True)
    (package / "__init__.py").write_text('"""floor 0: algos\nfloor 1: run\n"""\n')
    (package / "algos.py").write_text("def f():\n    from .run.loop import step\n")
    (package / "run" / "__init__.py").write_text("")
    (package / "run" / "loop.py").write_text("from ..algos import f\n\ndef step():\n    pass\n")
    mods = import_map.modules(package)
    edges = import_map.imports(mods)
    table = import_map.floors((package / "__init__.py").read_text())
    assert edges == {("course_lib.algos", "course_lib.run.loop"), ("course_lib.run.loop", "course_lib.algos")}
    assert import_map.backup_imports(edges, table) == [("course_lib.algos", "course_lib.run.loop")]
    assert import_map.mutual_pairs(edges) == [("algos", "run")]


def test_every_package_docstring_names_each_of_its_modules():
    missing = {}
    for init in sorted((ROOT / "course_lib").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        names = sorted(p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py")
        absent = [n for n in names if not re.search(rf"(?<!\w){re.escape(n)}(\.py)?(?!\w)", doc)]
        if absent:
            missing[init.parent.name] = absent
    assert not missing, f"modules a package's docstring does not name: {missing}"
