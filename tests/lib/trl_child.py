"""The environment of a child process that runs TRL's trainers on a CPU in the tests.

``env_for_trl_child`` adds ``trl_child_site/`` to ``PYTHONPATH``: its ``sitecustomize``
hides vLLM from the child, so that TRL does not import it (about 7 CPU s a process, and
no run here samples with it). Use it only for children that never use the vLLM engine.
"""

from __future__ import annotations

import os
from pathlib import Path

SITE = Path(__file__).resolve().parent / "trl_child_site"


def env_for_trl_child(env: dict) -> dict:
    """A copy of the child environment ``env`` in which vLLM counts as not installed."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH", "")]))
    return env
