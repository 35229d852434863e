"""The import map of ``course_lib``: files as rooms, imports as arrows, and which way they point.

Run from the repository root: ``python benchmarks/import_map.py``. It prints

- the number of modules and of distinct internal imports (module -> module; an import inside a
  function counts, as it is an arrow all the same);
- the folders (a package under ``course_lib/``, or a top-level module) and the arrows between them;
- **arrows in circles**: module imports whose two folders reach each other (so no floor plan can put
  one above the other), and the pairs of folders that import each other directly;
- **imports that run back up** the floors written in ``course_lib/__init__.py`` (``Floors``), the
  table ``tests/lib/test_import_layers.py`` holds every import to;
- the ``Trainer`` attributes read or set outside ``trainer.py`` (through a name ``trainer``), and
  in how many places.

Nothing is imported or executed: the files are parsed with :mod:`ast`.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "course_lib"


def modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (a package is its ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    return found


def _resolve(mods: dict, current: str, node: ast.ImportFrom, name: str) -> str | None:
    base = node.module or ""
    if node.level:
        parts = current.split(".") if mods[current].name == "__init__.py" else current.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    target = f"{base}.{name}" if f"{base}.{name}" in mods else base
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def imports(mods: dict[str, pathlib.Path] | None = None) -> set[tuple[str, str]]:
    """Distinct ``(importer, imported)`` module pairs inside the package, function-level ones included."""
    mods = modules() if mods is None else mods
    edges = set()
    for current, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    target = _resolve(mods, current, node, alias.name)
                    if target and target != current:
                        edges.add((current, target))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    while name and name not in mods:
                        name = name.rpartition(".")[0]
                    if name and name != current:
                        edges.add((current, name))
    return edges


def room(module: str) -> str:
    """The folder a module stands in: ``course_lib.run.batches`` -> ``run``, ``course_lib.trainer`` -> ``trainer``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "course_lib"


def room_arrows(edges) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """``(from folder, to folder)`` -> the module imports that draw that arrow (the package root left out)."""
    arrows = collections.defaultdict(set)
    for a, b in edges:
        ra, rb = room(a), room(b)
        if ra != rb and "course_lib" not in (ra, rb):
            arrows[ra, rb].add((a, b))
    return arrows


def reaches(arrows) -> dict[str, set[str]]:
    """Folder -> every folder it reaches through one or more arrows."""
    nxt = collections.defaultdict(set)
    for a, b in arrows:
        nxt[a].add(b)
    out = {}
    for start in list(nxt):
        seen, todo = set(), [start]
        while todo:
            for b in nxt[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        out[start] = seen
    return out


def circle_imports(edges) -> list[tuple[str, str]]:
    """Module imports whose folders reach each other: arrows no floor plan can point downwards."""
    arrows, reach = room_arrows(edges), None
    reach = reaches(arrows)
    return sorted(e for (a, b), es in arrows.items() if a in reach.get(b, ()) for e in es)


def mutual_pairs(edges) -> list[tuple[str, str]]:
    """Pairs of folders that import each other directly."""
    arrows = room_arrows(edges)
    return sorted((a, b) for a, b in arrows if a < b and (b, a) in arrows)


def floors(text: str | None = None) -> dict[str, int]:
    """The floor table of ``course_lib/__init__.py``: lines ``floor N: room, room, ...`` -> room -> N."""
    text = ast.get_docstring(ast.parse((ROOT / "__init__.py").read_text())) if text is None else text
    table = {}
    for number, names in re.findall(r"^floor (\d+): (.+)$", text or "", flags=re.M):
        for name in names.split(","):
            table[name.strip()] = int(number)
    return table


def backup_imports(edges, table: dict[str, int]) -> list[tuple[str, str]]:
    """Module imports from a folder to one on the same or a higher floor (a folder may import itself)."""
    return sorted((a, b) for a, b in edges if room(a) != room(b) and "course_lib" not in (room(a), room(b))
                  and table.get(room(a), -1) <= table.get(room(b), -1))


def trainer_attributes_outside(mods: dict[str, pathlib.Path] | None = None) -> collections.Counter:
    """``attribute -> places``: ``trainer.<attribute>`` or ``self.trainer.<attribute>`` outside ``trainer.py``."""
    mods = modules() if mods is None else mods
    touched = collections.Counter()
    for name, path in mods.items():
        if name == "course_lib.trainer":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                owner = node.value
                if (isinstance(owner, ast.Name) and owner.id == "trainer") or (
                        isinstance(owner, ast.Attribute) and owner.attr == "trainer"):
                    touched[node.attr] += 1
    return touched


def main() -> None:
    mods = modules()
    edges = imports(mods)
    arrows = room_arrows(edges)
    circles, pairs = circle_imports(edges), mutual_pairs(edges)
    table = floors()
    upward = backup_imports(edges, table) if table else []
    attrs = trainer_attributes_outside(mods)
    lines = {k: len(p.read_text().splitlines()) for k, p in mods.items()}
    print(f"modules: {len(mods)}  lines: {sum(lines.values())}  internal imports: {len(edges)}")
    print(f"folders: {len({room(m) for m in mods}) - 1}  folder arrows: {len(arrows)}")
    print(f"imports in circles: {len(circles)}  folder pairs importing each other: {len(pairs)}")
    for a, b in pairs:
        both = sorted(arrows[a, b] | arrows[b, a])
        print(f"  {a} <-> {b}: " + ", ".join(f"{x[11:]} -> {y[11:]}" for x, y in both))
    if table:
        print(f"imports running back up the floor table: {len(upward)}")
        for a, b in upward:
            print(f"  {a} (floor {table.get(room(a))}) -> {b} (floor {table.get(room(b))})")
    else:
        print("no floor table in course_lib/__init__.py")
    print(f"Trainer attributes touched outside trainer.py: {len(attrs)} in {sum(attrs.values())} places")
    if "-v" in sys.argv:
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(attrs.items())))
        for folder in sorted({room(m) for m in mods}):
            print(f"  {folder}: {sum(1 for m in mods if room(m) == folder)} modules, "
                  f"{sum(v for m, v in lines.items() if room(m) == folder)} lines")


if __name__ == "__main__":
    main()
