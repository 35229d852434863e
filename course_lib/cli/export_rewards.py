"""The reward functions of a TRL export: ``course_rewards.py`` and copies of your modules.

TRL's ``trl grpo`` loads each ``reward_funcs`` entry ``a.b.name`` by importing ``a.b`` from
its working folder (the export folder) and taking ``name``. So every reward of the run
must be importable there, by a name written now:

- a shipped reward (``correctness_reward``) is read from ``course_lib``'s registry;
- your own function, defined at the top level of a plain ``.py`` file (a script run as
  ``__main__`` included), is imported from a copy of that file placed in the export folder,
  so the export carries it to another machine; the copy is imported, not run as a script:
  keep the script's work under ``if __name__ == "__main__":``;
- a function of an installed package or of a package folder is imported by its dotted path
  (the package must be importable where TRL runs).

Every reward resolves before anything is written, and only identifiers reach the file:
a name that does not resolve is refused here instead of failing (or running as code)
when TRL imports the module.
"""

from __future__ import annotations

import functools
import shutil
import sys
from pathlib import Path
from typing import Callable

from ..rewards.combine import reward_function_name
from ..rewards.registry import REWARD_FUNCTIONS
from ..common.user_code import UserCodeError, looks_like_reference, resolve_callable

MODULE_NAME = "course_rewards"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # course_lib


def _installed(path: Path) -> bool:
    """A module file of an installed distribution or of this package (importable anywhere it is installed)."""
    return bool({"site-packages", "dist-packages"} & set(path.parts)) or _PACKAGE_DIR in path.parents


def _resolve(reward) -> tuple[Callable, str | None]:
    """``(function, registry name or None)``; refuses what does not resolve."""
    if isinstance(reward, str):
        if reward in REWARD_FUNCTIONS:
            return REWARD_FUNCTIONS[reward], reward
        if not looks_like_reference(reward):
            raise UserCodeError(f"export: unknown reward {reward!r}; shipped names: {', '.join(sorted(REWARD_FUNCTIONS))}. "
                                "Fix: a shipped name, your function itself, or module:function.")
        reward = resolve_callable(reward, what=f"export reward {reward!r}")
    if not callable(reward):
        raise UserCodeError(f"export: reward {reward!r} is a {type(reward).__name__}, not a function or a name.")
    for name, function in REWARD_FUNCTIONS.items():
        if function is reward:
            return reward, name
    return reward, None


def _module_attribute(function: Callable) -> tuple[object, str]:
    """The module holding ``function`` at its top level, and the attribute name there."""
    where = reward_function_name(function)
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    if module is not None and not isinstance(function, functools.partial):
        if getattr(module, getattr(function, "__name__", ""), None) is function:
            return module, function.__name__
        for attribute, value in vars(module).items():
            if value is function and attribute.isidentifier() and not attribute.startswith("_"):
                return module, attribute
    raise UserCodeError(f"export: reward {where!r} cannot be imported by TRL: it is not a top-level name of its "
                        "module (a lambda, a nested function, a functools.partial or an object built in a "
                        f"function). Fix: assign it at the top level of a .py file, e.g. `{where} = ...`, and "
                        "pass that.")


def _alias(name: str, taken: set[str]) -> str:
    alias = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "reward"
    if not alias.isidentifier():
        alias = f"reward_{alias}"
    candidate, n = alias, 2
    while candidate in taken:
        candidate, n = f"{alias}_{n}", n + 1
    taken.add(candidate)
    return candidate


def check_reward_columns(rewards: list, columns) -> None:
    """Refuse rewards that read a dataset column the exported data does not have.

    A reward declares the columns it cannot work without in ``required_columns`` (the code
    execution reward: its tests column); without the column TRL would fail at the first step.
    """
    columns = set(columns)
    for reward in rewards:
        function, _ = _resolve(reward)
        missing = [c for c in getattr(function, "required_columns", ()) if c not in columns]
        if missing:
            raise UserCodeError(
                f"export: reward {reward_function_name(function)!r} reads the dataset column(s) {missing}, which "
                f"the task's data does not have (columns: {sorted(columns)}). Fix: export a task whose rows carry "
                f"{missing[0]!r} (e.g. a JSONL file with that column), or leave that reward out.")


def write_reward_module(rewards: list, output: Path) -> tuple[list[str], list[str]]:
    """Write ``output/course_rewards.py`` (and copies of user modules) for ``rewards``.

    Returns ``(reward_funcs, notes)``: the dotted paths for TRL's ``reward_funcs`` and one
    line per reward saying where it comes from.
    """
    if isinstance(rewards, (str, bytes)) or not callable(getattr(rewards, "__iter__", None)):
        raise UserCodeError(f"export: rewards must be a list of names or functions, got {type(rewards).__name__}.")
    resolved = [_resolve(r) for r in rewards]
    if not resolved:
        raise UserCodeError("export: no reward functions. Fix: pass at least one name or function.")
    taken: set[str] = {MODULE_NAME, "course_lib", "REWARD_FUNCTIONS"}
    imports, assignments, paths, notes, copies = [], [], [], [], {}
    for function, registry_name in resolved:
        alias = _alias(registry_name or reward_function_name(function), taken)
        if registry_name is not None:
            assignments.append(f"{alias} = REWARD_FUNCTIONS[{registry_name!r}]")
            notes.append(f"{alias}: course_lib's {registry_name}")
        else:
            module, attribute = _module_attribute(function)
            module_name, file = module.__name__, Path(getattr(module, "__file__", "") or "")
            if file.suffix == ".py" and "." not in module_name and not _installed(file.resolve()):
                module_name = file.stem  # __main__ too: the copy is imported under the file's name
                if not module_name.isidentifier() or module_name in {MODULE_NAME, "course_lib", "trl", *sys.stdlib_module_names}:
                    raise UserCodeError(f"export: reward {attribute!r} lives in {file.name}, which cannot be copied "
                                        f"under that name (it would replace that module where TRL runs). Fix: "
                                        f"rename the file (not {MODULE_NAME}.py, nor a standard module's name).")
                if copies.setdefault(module_name, file.resolve()) != file.resolve():
                    raise UserCodeError(f"export: two reward modules are both named {module_name}.py "
                                        f"({copies[module_name]} and {file}). Fix: rename one.")
                notes.append(f"{alias}: {attribute} from {module_name}.py (copied from {file})")
            else:
                notes.append(f"{alias}: {module_name}.{attribute} (must be importable where TRL runs)")
            if not all(part.isidentifier() for part in module_name.split(".")):
                raise UserCodeError(f"export: module name {module_name!r} of reward {attribute!r} is not importable.")
            imports.append(f"from {module_name} import {attribute} as {alias}")
        paths.append(f"{MODULE_NAME}.{alias}")
    for module_name, source in copies.items():
        shutil.copy2(source, output / f"{module_name}.py")
    header = ['"""The run\'s reward functions, by dotted path for TRL (course_rewards.<name>)."""', ""]
    if any(name is not None for _, name in resolved):
        header.append("from course_lib.rewards.registry import REWARD_FUNCTIONS")
    text = "\n".join([*header, *imports, "", *assignments, ""])
    compile(text, MODULE_NAME, "exec")  # identifiers only: it parses, and it has nothing else to run
    (output / f"{MODULE_NAME}.py").write_text(text)
    return paths, notes
