"""Shared pytest set-up: offline, one thread, headless plots."""
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def pytest_addoption(parser):
    parser.addoption("--impl", default=None, choices=["exercises", "solutions"],
                     help="grade exercises/ (your code, the default) or solutions/ (the reference); "
                          "the environment variable COURSE_IMPL does the same")
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N",
                     help="list the N tests that used the most CPU time (setup, call and teardown; the "
                          "test's process and the child processes it waited for): unlike wall times, "
                          "these do not grow when other work shares the machine")


import resource  # noqa: E402

import pytest  # noqa: E402

_CPU_KEY = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _count_cpu(item):
    started = _cpu_seconds()
    try:
        return (yield)
    finally:
        item.stash[_CPU_KEY] = item.stash.get(_CPU_KEY, 0.0) + _cpu_seconds() - started


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _count_cpu(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _count_cpu(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _count_cpu(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown":  # user_properties travel from an xdist worker to the controller
        report.user_properties.append(("cpu_seconds", item.stash.get(_CPU_KEY, 0.0)))
    return report


_CPU_BY_TEST: dict[str, float] = {}
_XDIST_GROUP = re.compile(r"@[^@\]]*$")


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "cpu_seconds":
                _CPU_BY_TEST[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("--cpu-durations", 0)
    if not count or hasattr(config, "workerinput") or not _CPU_BY_TEST:
        return
    slowest = sorted(_CPU_BY_TEST.items(), key=lambda pair: -pair[1])[:count]
    terminalreporter.section(f"{len(slowest)} tests that used the most CPU time "
                             f"(of {sum(_CPU_BY_TEST.values()):.0f} CPU s in all)")
    for nodeid, seconds in slowest:
        name = _XDIST_GROUP.sub("", nodeid)  # without the "@group" that pytest-xdist's loadgroup appends
        terminalreporter.write_line(f"{seconds:8.1f} CPU s  {name}")
    # A file's module fixtures (shared runs) count in its first test only: the sum per file
    # says which file a cut would shorten.
    by_file: dict[str, float] = {}
    for nodeid, seconds in _CPU_BY_TEST.items():
        path = nodeid.split("::", 1)[0]
        by_file[path] = by_file.get(path, 0.0) + seconds
    heaviest = sorted(by_file.items(), key=lambda pair: -pair[1])[:2 * count]
    terminalreporter.section(f"{len(heaviest)} test files that used the most CPU time")
    for path, seconds in heaviest:
        terminalreporter.write_line(f"{seconds:8.1f} CPU s  {path}")


@pytest.fixture
def working_sandbox():
    """Skip a test that needs the code sandbox where this machine has none (no bubblewrap,
    macOS, no user namespaces), after checking that the sandbox refuses clearly there."""
    from course_lib.sandbox import SandboxUnavailableError, detect_isolation, run_python

    found = detect_isolation()
    if not found.available:
        with pytest.raises(SandboxUnavailableError, match="refusing to run untrusted code") as refused:
            run_python("print('must not run')")
        assert found.reason and found.reason in str(refused.value)
        pytest.skip(f"needs a working code sandbox, which this machine lacks: {found.reason}")
    return found


NO_CUDA_REASON = "no CUDA device: a test marked gpu needs one (torch.cuda.is_available() is False here)"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The files that hold a test marked ``slow`` run first, so that under pytest-xdist
    (`make test`: two workers) no long test starts last while the other worker has nothing
    left to do; each file's tests stay together and in their order. Each file is one unit of
    work for `--dist loadgroup`: a test without an ``xdist_group`` mark joins its file's group,
    so a file's module fixtures and cached runs are built on one worker, once (xdist sends
    ungrouped tests one by one, to either worker). Tests marked ``gpu`` skip, saying why,
    where PyTorch sees no CUDA device (run them on a GPU machine with ``pytest -m gpu``)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort: the order is kept otherwise
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
