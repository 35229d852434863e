""".ci/cpu_census.py tells a run's own CPU seconds from other processes' and reads the core speed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

CENSUS = Path(__file__).resolve().parents[2] / ".ci" / "cpu_census.py"
BUSY = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")
def test_the_census_counts_the_runs_children_apart_from_other_processes(tmp_path):
    # The "run": a shell whose child burns 3 CPU s; beside it, not its descendant, one that burns 1.5.
    run = subprocess.Popen(["bash", "-c", f"sleep 0.5; {sys.executable} -c '{BUSY.format(seconds=3)}'"])
    other = subprocess.Popen([sys.executable, "-c", "# the other process\nimport time; time.sleep(0.5)\n"
                              + BUSY.format(seconds=1.5)])
    log = tmp_path / "history.log"
    census = subprocess.run([sys.executable, str(CENSUS), "--root", str(run.pid), "--every", "0.2", "--log", str(log),
                             "--title", "test run"], capture_output=True, text=True, timeout=60)
    run.wait(), other.wait()
    assert census.returncode == 0, census.stderr
    summary = log.read_text()
    assert summary.startswith("== test run: from ") and summary in census.stdout
    ours, others = map(int, re.search(r"this run's processes (\d+), other processes (\d+)", summary).groups())
    # sampled every 0.2 s: the last fifth of a second of each may be missed; other processes may
    # include other tests running beside this one
    assert 2 <= ours <= 4 and others >= 1, summary
    assert re.search(r"other: +[12] CPU s +\S*python -c # the other process", summary), summary
    median = float(re.search(r"core speed .*: median (\d+\.\d)", summary).group(1))
    assert median > 0
