"""The environment descriptions agree, and the package imports without a network."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    listed = {_name(r) for r in pip_section if not r.startswith("-")}
    assert listed == declared, f"only in pyproject: {declared - listed}; only in environment.yml: {listed - declared}"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme


def test_importing_the_package_touches_no_network():
    code = ("import socket\n"
            "def refuse(*a, **k): raise RuntimeError('network access at import')\n"
            "socket.socket.connect = refuse\n"
            "import course_lib, course_lib.models, course_lib.data, course_lib.rewards, course_lib.trainer\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]


def _module_imports() -> dict[str, set[str]]:
    """Every ``course_lib`` module and the ``course_lib`` modules it imports (anywhere in it)."""
    import ast

    package = ROOT / "course_lib"
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from package import submodule` imports the submodule
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            edges |= {target for target in targets if target in modules and target != name}
        graph[name] = edges
    return graph


def test_the_package_has_no_import_cycle():
    graph = _module_imports()
    assert "course_lib.algos.grpo" in graph and "course_lib.ops.logprobs" in graph
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(name, path):
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_the_maths_does_not_import_the_machinery():
    """algos/ and ops/ are pure tensor code: no trainer, engines, widgets or checkpoints."""
    graph = _module_imports()
    forbidden = ("course_lib.trainer", "course_lib.rollout", "course_lib.widgets", "course_lib.run.checkpoint",
                 "course_lib.run.history")
    for name, targets in graph.items():
        if name.startswith(("course_lib.algos", "course_lib.ops")):
            bad = [t for t in targets if t.startswith(forbidden)]
            assert not bad, f"{name} imports {bad}"


def test_no_library_module_is_over_about_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "course_lib").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 480}
    assert not long, f"split these modules: {long}"


_MAP_LINE = re.compile(r"^(\w+) [^\n]*-> (course_lib/[\w/]+\.py): ([\w, ]+)$", re.MULTILINE)


def _lesson_map() -> list[tuple[str, str, list[str]]]:
    import course_lib

    return [(lesson, path, [n.strip() for n in names.split(",")])
            for lesson, path, names in _MAP_LINE.findall(course_lib.__doc__)]


def test_the_package_docstring_maps_every_lesson_to_functions_that_exist():
    """course_lib/__init__.py: lesson -> file -> function; each name is defined in that file."""
    import importlib

    entries = _lesson_map()
    assert len(entries) >= 20
    for lesson, path, names in entries:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        missing = [n for n in names if not hasattr(module, n) or getattr(getattr(module, n), "__module__", None)
                   not in (module.__name__, None)]
        assert not missing, f"lesson {lesson}: {path} does not define {missing}"
    lessons = {lesson for lesson, _, _ in entries}
    taught = {p.name.split("_")[0] for p in (ROOT / "notebooks").glob("[0-9]*.py")} - {"00"}
    assert taught <= lessons, f"lessons without an entry in course_lib/__init__.py: {sorted(taught - lessons)}"


def test_the_readme_module_table_names_every_file_of_the_lesson_map():
    table = [line.split("|")[1] for line in (ROOT / "README.md").read_text().splitlines()
             if line.startswith("| `")]
    named = {token for cell in table for token in re.findall(r"`([^`]+)`", cell)}
    for _, path, _ in _lesson_map():
        relative = path.removeprefix("course_lib/")
        stem = relative.removesuffix(".py")
        top = relative.split("/")[0]
        candidates = {relative, stem, stem.split("/")[-1] + ".py", stem.split("/")[-1], top, top + "/"}
        assert candidates & named, f"README's module table does not name {path}"


# ---------------------------------------------------------------------------------------
# Unsloth beside the course: requirements/unsloth.txt (--no-deps) + requirements/unsloth-deps.txt

#: Unsloth's declared requirements that the course's install sets aside, and why (requirements/unsloth.txt).
UNSLOTH_SET_ASIDE = {"trl": "Unsloth declares trl<=1.15.0; the course pins trl==1.16.0 (its loss parity is with 1.16)"}


def _requirements(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines()
            if line.split("#")[0].strip()]


def _published():
    from packaging.requirements import Requirement

    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
             "python_version": "3.11"}
    published = {}
    for line in _requirements(ROOT / "requirements" / "unsloth-published.txt"):
        source, _, text = line.partition(": ")
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(linux):
            published.setdefault(source, []).append(requirement)
    return published


def _candidates(specifiers) -> list:
    """Every version a specifier names, and its neighbours: if the sets intersect, one of these is in all."""
    from packaging.version import Version

    found = set()
    for spec in specifiers:
        for item in spec:
            text = item.version.rstrip(".*")
            base = Version(text)
            found |= {base, Version(f"{base.base_version}.post9999"), Version(f"{base.major}.{base.minor}.9999"),
                      Version(f"{base.major}.{base.minor + 1}"), Version(f"{base.major + 1}.0")}
    return sorted(found) or [Version("1.0")]


def test_the_unsloth_pins_are_the_recorded_releases_and_install_without_their_deps():
    pins = _requirements(ROOT / "requirements" / "unsloth.txt")
    assert sorted(pins) == sorted(_published()), "requirements/unsloth.txt and unsloth-published.txt disagree"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    assert "unsloth" not in {_name(r) for r in extras}  # as an extra pip cannot resolve it beside trl==1.16.0
    from course_lib import colab

    commands = colab.pip_commands(ROOT, Path("c.txt"), python="python", gpu=True, unsloth=True)
    assert ["--no-deps", "-r", str(ROOT / "requirements" / "unsloth.txt")] == commands[2][-3:]
    assert str(ROOT / "requirements" / "unsloth-deps.txt") in commands[3] and commands[3][-2:] == ["-c", "c.txt"]


def test_unslothes_requirements_agree_with_the_courses_but_for_the_ones_set_aside():
    """For each package, the course's own requirement (pyproject), the Unsloth install's
    (unsloth-deps.txt) and what Unsloth declares must admit a common version; the ones that
    cannot are exactly :data:`UNSLOTH_SET_ASIDE`, and unsloth-deps.txt covers every other
    declared requirement, so nothing Unsloth needs is left out by --no-deps."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    course = {canonicalize_name(Requirement(r).name): Requirement(r).specifier
              for r in project["dependencies"] + project["optional-dependencies"]["gpu"]}
    course["torch"] = Requirement("torch==2.13.0").specifier  # the Makefile's and environment.yml's pin
    deps = {canonicalize_name(Requirement(r).name): Requirement(r).specifier
            for r in _requirements(ROOT / "requirements" / "unsloth-deps.txt")}
    in_conflict, uncovered = {}, []
    for source, requirements in _published().items():
        for requirement in requirements:
            name = canonicalize_name(requirement.name)
            if name in ("unsloth-zoo", "unsloth"):
                continue
            if name not in course and name not in deps:
                uncovered.append(f"{source}: {requirement}")
            sets = [requirement.specifier] + [s for s in (course.get(name), deps.get(name)) if s is not None]
            if not any(all(s.contains(v, prereleases=True) for s in sets) for v in _candidates(sets)):
                in_conflict[name] = str(requirement)
    assert not uncovered, f"declared by Unsloth, installed by neither the course nor unsloth-deps.txt: {uncovered}"
    assert set(in_conflict) == set(UNSLOTH_SET_ASIDE), in_conflict
    # The Unsloth install's own narrowing must stay inside what the course accepts.
    for name, spec in deps.items():
        if name in course:
            assert any(spec.contains(v, prereleases=True) and course[name].contains(v, prereleases=True)
                       for v in _candidates([spec, course[name]])), name
