"""Exercises: stubs generated from solutions, loading the learner's code, and grading.

One source of truth: ``solutions/exNN_topic.py`` holds the reference answers with the
parts the learner writes between marker lines::

    def reinforce_loss(logps, rewards):
        \"\"\"Docstring the learner reads.\"\"\"
        # BEGIN SOLUTION
        return -(logps.sum(-1) * rewards).mean()
        # END SOLUTION

``make_stub`` replaces each marked block by ``raise NotImplementedError(...)`` at the
marker's indentation (lines starting with ``# HINT:`` inside the block are kept as
comments), and ``check_stubs`` fails when ``exercises/`` differs from what the solutions
generate, so the two cannot drift.

Tests in ``tests/exercises/`` load the learner's module through :func:`load_exercise`,
which reads ``exercises/`` by default and ``solutions/`` when ``impl="solutions"`` (or the
environment variable ``COURSE_IMPL=solutions``, or pytest's ``--impl solutions``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from types import ModuleType

BEGIN, END, HINT = "# BEGIN SOLUTION", "# END SOLUTION", "# HINT:"
IMPLEMENTATIONS = ("exercises", "solutions")
GENERATED_HEADER = ("# This file is generated from solutions/{name} by `python -m course_lib make-stubs`.\n"
                    "# Fill in the parts that raise NotImplementedError; the tests in tests/exercises/ grade them.\n")


def project_root() -> Path:
    """The course checkout: ``$COURSE_ROOT``, else the folder above the package, else cwd."""
    if "COURSE_ROOT" in os.environ:
        return Path(os.environ["COURSE_ROOT"])
    for candidate in (Path(__file__).resolve().parent.parent, Path.cwd(), *Path.cwd().parents):
        if (candidate / "solutions").is_dir() and (candidate / "exercises").is_dir():
            return candidate
    raise FileNotFoundError("Could not find the course folder (with exercises/ and solutions/); "
                            "run from inside the repository or set COURSE_ROOT.")


def make_stub(solution_source: str, name: str = "solution") -> str:
    """The exercise file for a solution file: marked blocks become NotImplementedError."""
    out, inside, indent = [], False, ""
    for number, line in enumerate(solution_source.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"{name}:{number}: '{BEGIN}' inside another solution block.")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            continue
        if stripped == END:
            if not inside:
                raise ValueError(f"{name}:{number}: '{END}' without a matching '{BEGIN}'.")
            out.append(f'{indent}raise NotImplementedError("Exercise: replace this line with your code.")\n')
            inside = False
            continue
        if not inside:
            out.append(line)
        elif stripped.startswith(HINT):
            out.append(line)
    if inside:
        raise ValueError(f"{name}: '{BEGIN}' is never closed by '{END}'.")
    return GENERATED_HEADER.format(name=name) + "".join(out)


def _solution_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "solutions").glob("ex*.py"))


def write_stubs(root: Path | None = None) -> list[Path]:
    """Regenerate every ``exercises/exNN_*.py`` from ``solutions/``; return the files written."""
    root = root or project_root()
    written = []
    for solution in _solution_files(root):
        target = root / "exercises" / solution.name
        target.write_text(make_stub(solution.read_text(), solution.name))
        written.append(target)
    return written


def check_stubs(root: Path | None = None) -> list[str]:
    """Problems that make ``exercises/`` differ from what ``solutions/`` generate (empty: in sync)."""
    root = root or project_root()
    problems = []
    solutions = _solution_files(root)
    if not solutions:
        problems.append("solutions/ has no exNN_*.py files")
    for solution in solutions:
        target = root / "exercises" / solution.name
        if not target.exists():
            problems.append(f"exercises/{solution.name} is missing")
        elif target.read_text() != make_stub(solution.read_text(), solution.name):
            problems.append(f"exercises/{solution.name} differs from its generated stub")
        if BEGIN not in solution.read_text():
            problems.append(f"solutions/{solution.name} has no '{BEGIN}' block: nothing to exercise")
    extra = {p.name for p in (root / "exercises").glob("ex*.py")} - {p.name for p in solutions}
    problems += [f"exercises/{name} has no solution" for name in sorted(extra)]
    return problems


def selected_impl(impl: str | None = None) -> str:
    impl = impl or os.environ.get("COURSE_IMPL", "exercises")
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl={impl!r}: use 'exercises' (your code) or 'solutions' (the reference).")
    return impl


def load_exercise(name: str, impl: str | None = None) -> ModuleType:
    """Import ``exercises/<name>.py`` (or ``solutions/<name>.py``) fresh from disk.

    Loaded anew on every call, so a notebook sees the learner's latest edits without a
    kernel restart.
    """
    impl = selected_impl(impl)
    path = project_root() / impl / f"{name.removesuffix('.py')}.py"
    if not path.exists():
        raise FileNotFoundError(f"No exercise file {path}.")
    spec = importlib.util.spec_from_file_location(f"course_{impl}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_exercise_tests(impl: str, extra_args: list[str] | None = None) -> dict[str, dict[str, int]]:
    """Run ``tests/exercises`` against ``impl``; return ``{lesson: {passed, failed, skipped}}``."""
    root = project_root()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        env = {**os.environ, "COURSE_IMPL": impl}
        subprocess.run([sys.executable, "-m", "pytest", str(root / "tests" / "exercises"), "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", "--impl", impl, *(extra_args or [])],
                       cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not report.exists():
            raise RuntimeError("pytest produced no report; run `pytest tests/exercises` to see why.")
        counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            match = re.search(r"test_(ex\d+\w*)", case.get("classname", "") + "." + case.get("file", ""))
            lesson = match.group(1) if match else case.get("classname", "?")
            if case.find("skipped") is not None:
                counts[lesson]["skipped"] += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                counts[lesson]["failed"] += 1
            else:
                counts[lesson]["passed"] += 1
    return dict(sorted(counts.items()))


def format_scores(counts: dict[str, dict[str, int]]) -> str:
    rows = [f"{'lesson':<28} {'score':>9}  progress"]
    total_pass = total = 0
    for lesson, c in counts.items():
        n = c["passed"] + c["failed"]
        total_pass, total = total_pass + c["passed"], total + n
        bar = "#" * c["passed"] + "." * c["failed"]
        rows.append(f"{lesson:<28} {c['passed']:>4}/{n:<4}  {bar}")
    rows.append(f"{'total':<28} {total_pass:>4}/{total:<4}")
    return "\n".join(rows)
