"""Shared pytest set-up: offline, one thread, headless plots."""
import os

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


import pytest  # noqa: E402


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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, saying why, where PyTorch sees no CUDA device
    (run them on a GPU machine with ``pytest -m gpu``)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
