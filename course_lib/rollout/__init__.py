"""Rollout engines: sample ``n`` completions per prompt, with the sampler's log-probs.

- :class:`~course_lib.rollout.hf.HFEngine`: ``model.generate`` on the trainer's own model; rows
  that start alike (a group's copies of a prompt, prompts behind one system prompt) run their
  common beginning once (``shared_prefix.py``, which greedy evaluation uses too).
- :class:`~course_lib.rollout.vllm_engine.VLLMEngine`: an in-process vLLM engine (optional
  dependency), faster, whose weights the trainer refreshes with ``sync_weights``.

Both return a :class:`RolloutBatch` (prompt-major rows) and follow :class:`RolloutEngine`
(``base.py``: the sampling settings, the batch, the protocol).
Both also continue a sequence of token ids by one turn (``generate_from_ids``), which the
multi-turn tool loop (:mod:`~course_lib.rollout.agents`, set up for the trainer by
:mod:`~course_lib.rollout.tool_run`) drives; ``tools.py`` runs the calls and the environments,
``tool_calls.py`` holds the schemas, the chat template and the parsing, and ``warmup.py`` the
scripted traces and the supervised warm-up that teach the call format before RL.
"""

from __future__ import annotations

import importlib.util
import os

from ..config import RLConfig
from ..models import unwrap_peft
from ..config.validation import field_choices
from .base import (ContextLengthError, PromptTruncationWarning, RolloutBatch, RolloutEngine, SamplingConfig,
                   tokenize_prompts)
from .hf import HFEngine

ENGINES = field_choices(RLConfig, "engine")  # ("hf", "vllm"): the config field's Literal


def vllm_available() -> bool:
    """Whether the ``vllm`` package is installed (without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def make_engine(name: str, model, tokenizer, **kwargs) -> RolloutEngine:
    """Build a rollout engine by name.

    Args:
        name: ``"hf"`` (transformers ``generate``) or ``"vllm"``.
        model: the policy. The HF engine samples from it directly; the vLLM engine loads
            the checkpoint at ``kwargs["model_path"]`` (default: ``model.name_or_path``)
            and then receives ``model``'s current weights through ``sync_weights``.
        tokenizer: the policy's tokenizer.
        **kwargs: passed to :class:`HFEngine` or :class:`VLLMEngine`.
    """
    if name == "hf":
        return HFEngine(model, tokenizer, **kwargs)
    if name == "vllm":
        if not vllm_available():
            from .vllm_engine import VLLM_INSTALL_HINT
            raise ImportError(f"make_engine('vllm'): {VLLM_INSTALL_HINT}")
        from .vllm_engine import VLLMEngine

        model_path = kwargs.pop("model_path", None) or _checkpoint_path(model)
        engine = VLLMEngine(model_path, tokenizer, **kwargs)
        engine.sync_weights(model)  # the model may already differ from its checkpoint
        return engine
    raise ValueError(f"make_engine: unknown engine {name!r}; use one of {', '.join(ENGINES)}.")


def _checkpoint_path(model) -> str:
    base = unwrap_peft(model)
    path = getattr(base, "name_or_path", None) or getattr(getattr(base, "config", None), "_name_or_path", None)
    if not path:
        raise ValueError("make_engine('vllm'): the model does not say where its checkpoint is; pass "
                         "model_path=<folder with config.json and safetensors> (see models.resolve_model_path).")
    return os.fspath(path)


__all__ = ["ENGINES", "ContextLengthError", "PromptTruncationWarning", "HFEngine", "RolloutBatch", "RolloutEngine",
           "SamplingConfig", "make_engine", "tokenize_prompts", "vllm_available"]
