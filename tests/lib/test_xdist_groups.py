"""`make test`'s two pytest-xdist workers build each file's shared runs once.

`tests/conftest.py` puts every test without an ``xdist_group`` mark in its file's group, and
`--dist loadgroup` sends a group to one worker. Both halves can break without a failure: a
test file whose tests are split across the workers still passes, each worker building the
file's module fixtures (a training launch, a vLLM engine) again. pytest 9.2 broke the second
half with pytest-xdist 3.8 (its group tag no longer reaches the scheduler), which is why
pyproject.toml keeps pytest below 9.2. This test runs the suite's own conftest on two small
files in a child pytest with two workers, and counts.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

FILE_WITH_A_SHARED_RUN = '''
import os
import pytest


def record(what):
    with open(os.environ["RECORD"], "a") as log:
        log.write(f"{what} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.fixture(scope="module")
def shared_run():
    record("shared-run")


@pytest.mark.parametrize("case", range(6))
def test_reads_the_shared_run(shared_run, case):
    record("case")


@pytest.mark.xdist_group("pair")
def test_first_of_a_pair():
    record("pair")
'''

OTHER_FILE = '''
import os
import time
import pytest


@pytest.mark.xdist_group("pair")
def test_second_of_a_pair():
    with open(os.environ["RECORD"], "a") as log:
        log.write(f"pair {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.parametrize("case", range(6))
def test_other_work(case):
    with open(os.environ["RECORD"], "a") as log:
        log.write(f"other {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.2)
'''


def test_a_files_tests_and_a_declared_group_each_run_on_one_worker(tmp_path):
    shutil.copy(Path(__file__).resolve().parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_shared.py").write_text(FILE_WITH_A_SHARED_RUN)
    (tmp_path / "test_other.py").write_text(OTHER_FILE)
    record = tmp_path / "record.txt"
    env = {**os.environ, "RECORD": str(record), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                             "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line.split() for line in record.read_text().splitlines()]
    workers = {kind: [worker for what, worker in rows if what == kind] for kind in ("shared-run", "case", "pair")}
    assert {worker for _, worker in rows} == {"gw0", "gw1"}, f"one worker did everything: {rows}"
    assert len(workers["shared-run"]) == 1, f"the module fixture was built {len(workers['shared-run'])} times"
    assert len(set(workers["case"])) == 1, f"one file's tests ran on several workers: {workers['case']}"
    assert len(workers["pair"]) == 2 and len(set(workers["pair"])) == 1, (
        f"an xdist_group's tests ran on several workers: {workers['pair']}")
