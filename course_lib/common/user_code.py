"""Your own functions by name: ``module:function``, ``module.function`` or ``file.py:function``.

The command line and the TRL export name a reward function, a task or a correctness check
the library does not ship by where it lives, as TRL's ``reward_funcs`` does:

- ``my_rewards:digit_sum_reward`` or ``my_rewards.digit_sum_reward``: a module importable
  from the working folder or the Python path;
- ``path/to/my_rewards.py:digit_sum_reward``: a file, imported under a private module name
  (a file named ``json.py`` never replaces the standard ``json``); its folder goes at the end
  of ``sys.path`` so its own sibling imports work.

Only dotted identifiers are accepted: a name is never evaluated as code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable


class UserCodeError(ValueError):
    """A ``module:function`` name that does not resolve to a callable."""


def looks_like_reference(name: str) -> bool:
    """True for ``a.b``, ``a:b`` or ``x.py:b`` (a reference to user code, not a built-in name)."""
    return ":" in name or "." in name


def _is_dotted_identifier(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _import_file(path: Path, what: str):
    if not path.is_file():
        raise UserCodeError(f"{what}: no file {path}. Fix: give an existing .py file, e.g. my_rewards.py:my_reward.")
    stem = path.stem
    if not stem.isidentifier():
        raise UserCodeError(f"{what}: {path.name} is not importable as a module name. Fix: rename the file to a "
                            "Python identifier (letters, digits, underscores).")
    # A private name: a file called json.py (any module's name) must not replace that module for the
    # whole process. The name has no dot, so the TRL export still copies the file under its stem.
    name = f"_course_user_{stem}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)  # its sibling imports work; installed and standard modules keep precedence
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first, as ``import`` does, so pickling and re-imports find it
    try:
        with _no_exit(what, str(path)):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@contextlib.contextmanager
def _no_exit(what: str, where: str):
    """Turn a ``sys.exit()`` run while importing user code into an error: a run that exits 0 having
    done nothing would look like a success."""
    try:
        yield
    except SystemExit as stop:
        raise UserCodeError(f"{what}: importing {where} called sys.exit({stop.code!r}), so the run would end "
                            "having done nothing. Fix: move that code under `if __name__ == \"__main__\":` "
                            "(importing the module must only define functions).") from None


def resolve_callable(reference: str, what: str = "function") -> Callable:
    """The callable behind ``module:function``, ``module.function`` or ``file.py:function``.

    ``what`` names the argument in errors (e.g. ``"--rewards"``). Raises :class:`UserCodeError`
    naming the reference and the fix; an error raised by the module itself on import
    propagates with its own traceback (it is the user's code).
    """
    if not isinstance(reference, str) or not reference.strip():
        raise UserCodeError(f"{what}: {reference!r} is empty. Fix: give module:function, e.g. my_rewards:my_reward.")
    reference = reference.strip()
    if ":" in reference:
        location, _, attribute = reference.rpartition(":")
    else:
        location, _, attribute = reference.rpartition(".")
    if not attribute.isidentifier():
        raise UserCodeError(f"{what}: {reference!r} does not end in a function name. Fix: module:function, "
                            "e.g. my_rewards:my_reward.")
    if location.endswith(".py"):
        module = _import_file(Path(location).expanduser(), what)
    elif _is_dotted_identifier(location):
        cwd = str(Path.cwd())
        if cwd not in sys.path and "" not in sys.path:
            sys.path.insert(0, cwd)  # as ``python -m`` and TRL's script do: the working folder's modules
        try:
            with _no_exit(what, f"module {location!r}"):
                module = importlib.import_module(location)
        except ModuleNotFoundError as error:
            if error.name and location.startswith(error.name):
                raise UserCodeError(f"{what}: no module {location!r} (from {reference!r}). Fix: run from the folder "
                                    "that holds it, add that folder to PYTHONPATH, or give the file: "
                                    f"path/to/{location.split('.')[-1]}.py:{attribute}.") from None
            raise
    else:
        raise UserCodeError(f"{what}: {reference!r} is not module:function. Fix: a dotted module name or a .py "
                            "file, a colon, and a function name, e.g. my_rewards:my_reward.")
    function = getattr(module, attribute, None)
    if function is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UserCodeError(f"{what}: module {module.__name__!r} has no {attribute!r} (its functions: "
                            f"{', '.join(public[:12]) or 'none'}).")
    if not callable(function):
        raise UserCodeError(f"{what}: {reference!r} is a {type(function).__name__}, not a function.")
    return function


def strict_correctness(function: Callable, what: str = "--correct") -> Callable:
    """``function`` (``f(completion, answer)``), whose every result must be a bool (or 0 / 1).

    Accuracy counts the results: tested for truth, the string ``'False'`` would count as
    correct and a forgotten ``return`` (None) as wrong, silently.
    """
    import numbers

    import numpy as np

    name = getattr(function, "__name__", repr(function))

    def checked(completion, answer):
        result = function(completion, answer)
        if isinstance(result, (bool, np.bool_)) or isinstance(result, numbers.Integral) and result in (0, 1):
            return bool(result)
        raise UserCodeError(f"{what}: {name}(completion, answer) returned {result!r:.80} "
                            f"({type(result).__name__}); a correctness check must return True or False (or 1 / "
                            "0). Fix: return a bool, e.g. `return extracted == answer`.")

    checked.__name__ = name
    return checked
