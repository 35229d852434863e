"""Run a program against test cases in the sandbox: the verifier behind code rewards.

Verdicts are decided in the parent, never by the child's objects. For an assertion test
such as ``assert add(2, 3) == 5`` the parent parses the assertion, keeps the comparison
(``==``) and any literal side (``5``) for itself, and asks the child only for the values
of the other operands (``add(2, 3)``). The child sends each value back as plain data
(JSON with tags for tuples, sets, dicts and bytes) and the parent compares the decoded
values. An object whose ``__eq__`` always returns True, a ``str`` subclass that lies, or a
number type with a rigged ``__bool__`` never reaches the comparison: only exact built-in
types cross the boundary (``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
``None`` and ``list``/``tuple``/``dict``/``set``/``frozenset`` of them); anything else,
NumPy scalars included, fails the test with a message saying to convert it.

The structure of the verdict is the parent's too. The child is asked for values, and
every assertion index of the test must come back at least once, each decided in the
parent; a report that leaves one out passes nothing. So replacing the check function,
finishing the harness early (``sys._getframe(1)``), or printing a report with a stolen
marker can at most claim values for the operands, which is no more than a solution that
hard-codes those return values could do honestly (a hack no verifier of values can see;
the test's literals never even reach the child). ``assert False`` fails whatever the
child says. The name the rewritten assertions call is not a Python identifier, so a
solution's own helper called ``_check`` cannot collide with it, and the marker of the
report arrives on standard input, not in any source the solution can read.

What stays in the child: the operands (``add(2, 3)``) and any assertion whose operands
are all computed there (``assert is_sorted(out)`` can only be as honest as the values
the child reports).
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from .runner import SandboxResult, run_python

__all__ = ["VerificationReport", "run_tests"]


@dataclass(frozen=True)
class VerificationReport:
    """Per-test verdicts of ``run_tests``: ``passed[i]``, why it failed, and the run behind it."""

    passed: list[bool]
    results: list[SandboxResult]
    reasons: list[str] = field(default_factory=list)

    @property
    def fraction_passed(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


def _normalize_output(text: str) -> str:
    """Compare program output line by line, ignoring trailing spaces and blank tail lines."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip()


# --- parent side: the assertion as a small expression tree --------------------------

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
            # identity between decoded values means "same type and equal" (True is True, None is None)
            ast.Is: lambda a, b: type(a) is type(b) and a == b,
            ast.IsNot: lambda a, b: not (type(a) is type(b) and a == b)}


class _Operand:
    """One value of an assertion: a literal the parent evaluates, or slot ``k`` of the child's report."""

    def __init__(self, literal: Any = None, slot: int | None = None):
        self.literal, self.slot = literal, slot

    def value(self, values: list) -> Any:
        if self.slot is None:
            return self.literal
        ok, value = values[self.slot]
        if not ok:
            raise _ChildError(value)
        return value


class _ChildError(Exception):
    """An operand the child could not compute or could not send as plain data."""


class _AssertionRewriter(ast.NodeTransformer):
    """Replace every ``assert`` with ``check(i, lambda: operand, ...)``, keeping a spec per check.

    Only operands that are not literals become thunks: a literal such as the ``5`` of
    ``assert add(2, 3) == 5`` stays in the parent's spec and never reaches the child.
    """

    def __init__(self) -> None:
        self.specs: list[tuple] = []

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        thunks: list[ast.expr] = []
        spec = self._spec(node.test, thunks)
        self.specs.append(spec)
        call = ast.Call(func=ast.Name(_PLACEHOLDER, ast.Load()),
                        args=[ast.Constant(len(self.specs) - 1)] + thunks, keywords=[])
        return ast.copy_location(ast.Expr(call), node)

    def _operand(self, expr: ast.expr, thunks: list) -> _Operand:
        try:
            return _Operand(literal=ast.literal_eval(expr))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            thunks.append(ast.Lambda(ast.arguments([], [], None, [], [], None, []), expr))
            return _Operand(slot=len(thunks) - 1)

    def _spec(self, expr: ast.expr, thunks: list) -> tuple:
        if isinstance(expr, ast.Compare):
            operands = [self._operand(e, thunks) for e in [expr.left, *expr.comparators]]
            return ("compare", operands, [_COMPARE[type(op)] for op in expr.ops])
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return ("not", self._spec(expr.operand, thunks))
        if isinstance(expr, ast.BoolOp):
            kind = "and" if isinstance(expr.op, ast.And) else "or"
            return (kind, [self._spec(value, thunks) for value in expr.values])
        return ("truth", self._operand(expr, thunks))


def _evaluate(spec: tuple, values: list) -> bool:
    """Decide one assertion from decoded plain values, with Python's semantics."""
    kind = spec[0]
    if kind == "compare":
        _, operands, ops = spec
        left = operands[0].value(values)
        for op, operand in zip(ops, operands[1:]):
            right = operand.value(values)
            if not op(left, right):
                return False
            left = right
        return True
    if kind == "not":
        return not _evaluate(spec[1], values)
    if kind == "and":
        return all(_evaluate(s, values) for s in spec[1])
    if kind == "or":
        return any(_evaluate(s, values) for s in spec[1])
    return bool(spec[1].value(values))


def _decode(value: Any) -> Any:
    """Plain data from the child's tagged JSON (see ``_HARNESS``): the parent's own objects."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        (tag, body), = value.items()
        if tag == "tuple":
            return tuple(_decode(v) for v in body)
        if tag == "set":
            return {_decode(v) for v in body}
        if tag == "frozenset":
            return frozenset(_decode(v) for v in body)
        if tag == "dict":
            return {_decode(k): _decode(v) for k, v in body}
        if tag == "bytes":
            return bytes.fromhex(body)
        if tag == "complex":
            return complex(*body)
        raise ValueError(f"unknown tag {tag!r}")
    return value


# --- child side ------------------------------------------------------------------------

# The name the rewritten assertions call. It is not a Python identifier, so no solution can
# define it by accident (a helper called ``_check`` is just a helper); the test source is
# sent with a valid stand-in (``_PLACEHOLDER``) and renamed in the child before compiling.
_CHECK_NAME = "assertion check"
_PLACEHOLDER = "__course_assertion_check__"

# Runs in the sandbox. Everything the harness uses is bound before the code under test
# runs: the test is compiled first, and ``exec``, ``json.dumps`` and ``os.write`` are held
# in the closure, so rebinding builtins or module attributes from the solution changes
# nothing here. The report's marker arrives on standard input (read before the solution
# runs), so it is in no source file and no ``linecache`` entry. ``encode`` accepts exact
# built-in types only (type(v) is int, not isinstance), so subclasses with rigged methods
# cannot pass as plain values.
_HARNESS = r"""
import ast as _ast, json as _json, linecache as _linecache, os as _os, sys as _sys

def _harness(solution, test, placeholder, check_name):
    _type, _str, _exec, _dumps, _write = type, str, exec, _json.dumps, _os.write
    _plain = (bool, int, float, str, type(None))
    marker = _sys.stdin.readline().strip()
    records = []

    def encode(value, depth):
        kind = _type(value)
        if depth > 50:
            raise TypeError("nested more than 50 levels deep")
        if kind in _plain:
            return value
        if kind is complex:
            return {"complex": [value.real, value.imag]}
        if kind is bytes:
            return {"bytes": value.hex()}
        if kind is list:
            return [encode(v, depth + 1) for v in value]
        if kind is tuple or kind is set or kind is frozenset:
            return {kind.__name__: [encode(v, depth + 1) for v in value]}
        if kind is dict:
            return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
        raise TypeError(f"a {kind.__module__}.{kind.__qualname__} is not a plain value; return int, float, "
                        "str, bool, None, or lists, tuples, dicts and sets of them")

    def check(index, *thunks):
        values = []
        for thunk in thunks:
            try:
                values.append([True, encode(thunk(), 0)])
            except Exception as error:
                values.append([False, f"{_type(error).__name__}: {_str(error)[:200]}"])
        records.append([index, values])

    for name, text in (("solution.py", solution), ("test.py", test)):
        _linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    tree = _ast.parse(test, "test.py")
    for node in _ast.walk(tree):
        if _type(node) is _ast.Name and node.id == placeholder:
            node.id = check_name
    test_code = compile(tree, "test.py", "exec")
    solution_code = compile(solution, "solution.py", "exec")
    namespace = {"__name__": "__main__", check_name: check}
    try:
        _exec(solution_code, namespace)
    except SystemExit:
        pass
    _exec(test_code, namespace)
    # A leading newline: the report starts its own line even after print(..., end="").
    _write(1, ("\n" + marker + _dumps(records) + "\n").encode("utf-8"))

_harness(SOLUTION, TEST, PLACEHOLDER, CHECK_NAME)
"""


def _assertion_program(code: str, test_source: str) -> str:
    # One pass over the template, so text inserted for one name is never rescanned.
    values = {"SOLUTION": repr(code), "TEST": repr(test_source), "PLACEHOLDER": repr(_PLACEHOLDER),
              "CHECK_NAME": repr(_CHECK_NAME)}
    return re.sub(r"\b(SOLUTION|TEST|PLACEHOLDER|CHECK_NAME)\b", lambda match: values[match.group()], _HARNESS)


def _judge_assertions(result: SandboxResult, specs: list[tuple], marker: str) -> tuple[bool, str]:
    """The parent's verdict on one assertion test, from the child's report of plain values."""
    if result.killed_reason is not None:
        return False, f"stopped: {result.killed_reason}"
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit status {result.returncode}"
        return False, last[:200]
    lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
    if len(lines) != 1:
        return False, "the test harness did not finish (the code exited early or printed over its report)"
    try:
        records = json.loads(lines[0][len(marker):])
        seen = set()
        for index, values in records:
            if type(index) is not int or not 0 <= index < len(specs):
                return False, f"the child reported an unknown assertion {index!r}"
            decoded = [(bool(ok), _decode(v) if ok else v) for ok, v in values]
            if not _evaluate(specs[index], decoded):
                return False, f"assertion {index + 1} failed on values {[v for _, v in decoded]!r}"[:300]
            seen.add(index)
        # Every assertion must have been decided here at least once: a report that leaves
        # one out (the check replaced, the harness finished early) passes nothing.
        missing = [i + 1 for i in range(len(specs)) if i not in seen]
        if missing:
            return False, f"assertion(s) {missing[:10]} never reported a value: the test did not run to its end"
    except _ChildError as error:
        return False, f"the child could not compute a value: {error}"
    except (ValueError, TypeError, IndexError, KeyError, RecursionError, ArithmeticError) as error:
        # The report is written by the process that ran model code: whatever it holds (a
        # nesting deep enough to exhaust the parser, values no comparison accepts) fails this
        # test and never reaches the caller as an exception that would stop a training run.
        return False, f"unreadable or unexpected report from the child: {type(error).__name__}: {error}"[:300]
    return True, ""


def run_tests(
    code: str,
    tests: Sequence[tuple[str, str] | str],
    **run_kwargs,
) -> VerificationReport:
    """Run ``code`` against each test in a separate sandboxed process.

    Two kinds of tests, mixed freely:
    - ``(stdin_text, expected_stdout)``: the program reads stdin and must print the
      expected output (compared in the parent line by line, trailing whitespace ignored);
    - ``"assert f(2) == 4"``: the code is executed, then the test's statements in the same
      namespace; every ``assert`` in the test is decided in the parent from the plain
      values the child reports (see the module docstring), and the report must arrive
      after the last statement, so ``sys.exit(0)`` or ``os._exit(0)`` cannot fake a pass.

    ``run_kwargs`` go to ``run_python`` (``timeout_s``, ``memory_mb``, ...), per test.

    Raises:
        TypeError: ``tests`` that is not a list (a single string would become one test per
        character), or a test that is neither kind. SyntaxError: an assertion test that does
        not parse (the test is broken, not the code).
    """
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Sequence):
        raise TypeError(f"tests must be a list of tests (assertion strings or (stdin, expected) pairs), got "
                        f"{type(tests).__name__}: {str(tests)[:60]!r}; wrap a single test as [test]")
    if not isinstance(code, str):
        raise TypeError(f"code must be the program's source as a str, got {type(code).__name__}")
    passed, results, reasons = [], [], []
    for index, test in enumerate(tests):
        if isinstance(test, str):
            try:
                tree = ast.parse(test, filename=f"tests[{index}]")
            except SyntaxError as error:
                raise SyntaxError(f"tests[{index}] is not valid Python ({error.msg}): {test!r}") from None
            rewriter = _AssertionRewriter()
            tree = ast.fix_missing_locations(rewriter.visit(tree))
            marker = "__verdict_" + os.urandom(12).hex() + ":"
            result = run_python(_assertion_program(code, ast.unparse(tree)), stdin=marker + "\n", **run_kwargs)
            ok, reason = _judge_assertions(result, rewriter.specs, marker)
        elif isinstance(test, (tuple, list)) and len(test) == 2:
            stdin_text, expected = test
            result = run_python(code, stdin=str(stdin_text), **run_kwargs)
            ok = result.ok and _normalize_output(result.stdout) == _normalize_output(str(expected))
            reason = "" if ok else (f"stopped: {result.killed_reason}" if result.killed_reason else
                                    f"output {result.stdout[:100]!r} != expected {str(expected)[:100]!r}")
        else:
            raise TypeError(
                f"tests[{index}] must be an assertion string or a (stdin, expected_stdout) pair, "
                f"got {test!r}"
            )
        passed.append(bool(ok))
        results.append(result)
        reasons.append(reason)
    return VerificationReport(passed=passed, results=results, reasons=reasons)
