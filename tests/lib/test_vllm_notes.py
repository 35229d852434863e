"""``env`` says whether vLLM pays off on this machine, on either path (hidden CPU features
included), and the warning vLLM prints at every weight sync for the rotary embedding (which
has no trained weights) is dropped, while its other warnings still reach the user."""

from __future__ import annotations

import logging

import pytest

from course_lib import machine


def _report(device="cpu", vllm=True):
    return {"device": device, "engines": {"hf": True, "vllm": vllm, "unsloth": False}}


@pytest.mark.parametrize("bf16, avx512, expected", [
    (True, True, "pays off: this CPU has native bfloat16"),
    (False, True, "some gain: this CPU has AVX-512 but no native bfloat16"),  # float32 vLLM measured 1.6x a step
    (False, False, "little or no gain: this CPU has neither native bfloat16 nor AVX-512")])
def test_env_says_when_vllm_pays_off_on_a_cpu(bf16, avx512, expected, monkeypatch):
    import torch

    monkeypatch.setattr(machine, "cpu_supports_bfloat16", lambda: bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: avx512)
    assert machine.vllm_verdict(_report()).startswith(expected)


def test_env_on_a_gpu_and_without_vllm():
    assert machine.vllm_verdict(_report(device="cuda")).startswith("pays off on this GPU")
    assert machine.vllm_verdict(_report(vllm=False)).startswith("not installed")


def test_the_rotary_embedding_reload_warning_is_dropped_and_others_are_kept():
    from course_lib.rollout.vllm_engine import EXPECTED_VLLM_WARNINGS, quiet_expected_vllm_warnings

    name, _ = EXPECTED_VLLM_WARNINGS[0]
    logger = logging.getLogger(name)
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Collect()
    logger.addHandler(handler)
    # Whatever an earlier test's vLLM import did to this logger (level, disabled by dictConfig),
    # this test reads the filter alone.
    saved = logger.level, logger.disabled, logging.root.manager.disable
    logger.setLevel(logging.WARNING)
    logger.disabled = False
    logging.disable(logging.NOTSET)
    try:
        quiet_expected_vllm_warnings()
        quiet_expected_vllm_warnings()  # idempotent: one filter
        logger.warning("%s: Failed to load weights", "RotaryEmbedding")  # vLLM's own call, as it logs it
        logger.warning("%s: Failed to load weights", "QKVParallelLinear")  # a real failure: kept
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled = saved[1]
        logging.disable(saved[2])
    assert seen == ["QKVParallelLinear: Failed to load weights"]
    assert sum(type(f).__name__ == "_DropExpected" for f in logger.filters) == 1
