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
