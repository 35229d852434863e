"""Your own functions by name: ``module:function``, ``module.function`` or ``file.py:function``.

The command line and the TRL export name a reward function, a task or a correctness check
the library does not ship by where it lives, as TRL's ``reward_funcs`` does:

- ``my_rewards:digit_sum_reward`` or ``my_rewards.digit_sum_reward``: a module importable
  from the working folder or the Python path;
- ``path/to/my_rewards.py:digit_sum_reward``: a file, imported under its own stem (its
  folder goes on ``sys.path`` so its own sibling imports work).

Only dotted identifiers are accepted: a name is never evaluated as code.
"""

from __future__ import annotations

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
    loaded = sys.modules.get(stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module  # registered first, as ``import`` does, so pickling and re-imports find it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(stem, None)
        raise
    return module


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
