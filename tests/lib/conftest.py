"""Fixtures shared by several files of the library tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl_child import env_for_trl_child

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def trl_doctor_runs(tmp_path_factory):
    """``trl_doctor_runs.py`` run once: its output folder and the finished child process.
    The tests that read it share the xdist group ``trl_doctor_runs``, so one worker runs it."""
    out = tmp_path_factory.mktemp("trl_doctor_runs")
    env = env_for_trl_child({**os.environ,
                             "PYTHONPATH": str(HERE.parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    done = subprocess.run([sys.executable, str(HERE / "trl_doctor_runs.py"), str(out)], env=env, timeout=900,
                          capture_output=True, text=True)
    return out, done
