"""Fixes worded for the interface in use: command-line flags on the command line, Python elsewhere.

An error raised deep in the library names its fix; a Python user should read
``train(resume_from="latest")``, a command-line user ``--resume-from latest``. The command
line calls :func:`use_command_line` once; :func:`fix` picks the spelling.
"""

from __future__ import annotations

_COMMAND_LINE = False


def use_command_line(active: bool = True) -> None:
    """Word fixes for ``python -m course_lib ...`` from now on (the command line's ``main`` calls it)."""
    global _COMMAND_LINE
    _COMMAND_LINE = active


def command_line_active() -> bool:
    return _COMMAND_LINE


def fix(command_line: str, python: str) -> str:
    """``command_line`` when the command line runs, else ``python``."""
    return command_line if _COMMAND_LINE else python


def resume_latest() -> str:
    return fix("--resume-from latest", "Trainer.train(resume_from='latest')")


def field_list(config_name: str = "the config class") -> str:
    return fix("run with --list-fields to see the fields",
               f"help({config_name}) or course_lib.config.field_docs({config_name}) lists the fields")
