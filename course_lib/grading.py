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
import textwrap
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FunctionGrade:
    """The verdict on one exercise function.

    ``status`` is ``"done"`` (its test passes), ``"wrong"`` (its test fails; ``message`` is
    the hint, or the exception it raised), ``"not started"`` (it still raises the stub's
    ``NotImplementedError``) or ``"skipped"`` (the test could not run here).
    """

    lesson: str  # "ex02_policy_gradients"
    function: str  # "discounted_returns"
    status: str
    message: str
    test_id: str  # "tests/exercises/test_ex02_policy_gradients.py::test_discounted_returns"


def _run_junit(root: Path, impl: str, extra_args: list[str] | None) -> ElementTree.Element:
    """Run ``tests/exercises`` against ``impl`` in a child pytest; return its JUnit XML root."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        # The child imports this very course_lib (not another install of it) and grades ``root``.
        package_parent = str(Path(__file__).resolve().parent.parent)
        python_path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "COURSE_IMPL": impl, "COURSE_ROOT": str(root), "PYTHONPATH": python_path}
        subprocess.run([sys.executable, "-m", "pytest", str(root / "tests" / "exercises"), "-q",
                        "-p", "no:cacheprovider", f"--junitxml={report}", "--impl", impl, *(extra_args or [])],
                       cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not report.exists():
            raise RuntimeError("pytest produced no report; run `pytest tests/exercises` to see why.")
        return ElementTree.parse(report).getroot()


def _verdict(case: ElementTree.Element) -> tuple[str, str]:
    """(status, message) of one JUnit test case."""
    if case.find("skipped") is not None:
        return "skipped", case.find("skipped").get("message", "")
    problem = case.find("failure")
    if problem is None:
        problem = case.find("error")
    if problem is None:
        return "done", ""
    message = problem.get("message", "")
    if not message:  # no message attribute: the traceback's last line names the exception
        lines = (problem.text or "").strip().splitlines()
        message = lines[-1] if lines else ""
    kind, _, text = message.partition(": ")
    if kind.endswith("NotImplementedError"):
        return "not started", ""
    if kind.endswith(("Hint", "AssertionError")):
        return "wrong", text.strip() or "the check failed without a message; run the pytest command below."
    return "wrong", f"your function raised {kind.rsplit('.', 1)[-1]}: {text.strip()}" if text else message


def grade_functions(impl: str = "exercises", root: Path | None = None,
                    extra_args: list[str] | None = None) -> list[FunctionGrade]:
    """Grade every exercise function of ``impl`` (each one has one test, ``test_<function>``)."""
    root = root or project_root()
    grades = []
    for case in _run_junit(root, selected_impl(impl), extra_args).iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]  # "test_ex02_policy_gradients"
        name = case.get("name", "")
        status, message = _verdict(case)
        grades.append(FunctionGrade(lesson=module.removeprefix("test_"), function=name.removeprefix("test_"),
                                    status=status, message=message,
                                    test_id=f"tests/exercises/{module}.py::{name}"))
    return sorted(grades, key=lambda g: g.lesson)


def run_exercise_tests(impl: str, extra_args: list[str] | None = None) -> dict[str, dict[str, int]]:
    """Run ``tests/exercises`` against ``impl``; return ``{lesson: {passed, failed, skipped}}``."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    for grade in grade_functions(impl, extra_args=extra_args):
        key = {"done": "passed", "skipped": "skipped"}.get(grade.status, "failed")
        counts[grade.lesson][key] += 1
    return dict(sorted(counts.items()))


def format_grades(grades: list[FunctionGrade], impl: str = "exercises") -> str:
    """A learner's report: one line per function, the hint under each wrong one, what to run next."""
    if not grades:
        return "No exercise tests ran; run `python -m pytest tests/exercises -q` to see why."
    impl_flag = "" if impl == "exercises" else f" --impl {impl}"
    rows, lesson = [], None
    for grade in grades:
        if grade.lesson != lesson:
            lesson = grade.lesson
            done = sum(g.status == "done" for g in grades if g.lesson == lesson)
            total = sum(g.lesson == lesson for g in grades)
            rows.append(f"{lesson}  ({done}/{total} done)")
        rows.append(f"  {grade.status:<12} {grade.function}")
        if grade.status in ("wrong", "skipped") and grade.message:
            for line in grade.message.splitlines():
                for piece in textwrap.wrap(line, width=96, break_on_hyphens=False) or [""]:
                    rows.append(f"  {'':<12} | {piece}")
    counts = {status: sum(g.status == status for g in grades) for status in ("done", "wrong", "not started", "skipped")}
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    rows.append("")
    rows.append(f"{summary} (of {len(grades)} functions).")
    first_todo = next((g for g in grades if g.status == "not started"), None)
    if first_todo is not None and impl == "exercises":
        rows.append(f"Next to write: {first_todo.function} in exercises/{first_todo.lesson}.py "
                    f"(it still raises NotImplementedError).")
    first_wrong = next((g for g in grades if g.status == "wrong"), None)
    if first_wrong is not None:
        rows.append(f"Details of a wrong function (its full traceback): "
                    f"python -m pytest {first_wrong.test_id} -q{impl_flag}")
    lessons = {g.lesson for g in grades}
    target = f"tests/exercises/test_{lessons.pop()}.py" if len(lessons) == 1 else "tests/exercises"
    rows.append(f"Details of every function: python -m pytest {target} -q{impl_flag}")
    return "\n".join(rows)
