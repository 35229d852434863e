"""Rollouts with Hugging Face ``generate``: the engine that runs anywhere, trainer's model included.

The engine samples from the very model object the trainer updates, so there is nothing to
synchronise (``sync_weights`` is a no-op) and LoRA / PEFT models work as they are.

How the sampling log-probs are recorded. ``generate`` can return every step's processed
scores (``output_scores=True``), but that keeps a ``(B, V)`` tensor per step: gigabytes for
a 150k vocabulary. Instead, all the sampling transformations (repetition penalty,
temperature, min-p, top-k, top-p) run inside one logits processor of ours, placed last, and
``generate``'s own warpers are switched off. That processor therefore sees exactly the
scores ``generate`` samples from; it keeps their log-softmax for one step only and, at the
next step, reads off the entry of the token that was just appended. The result is the
same ``log_softmax(processed scores)[sampled id]`` as with ``output_scores``, holding one
``(B, V)`` tensor at a time instead of one per step.

The filters run in vLLM's order (temperature, min-p, top-k, top-p) rather than
``generate``'s (temperature, top-k, top-p, min-p), so the two engines sample the same
distribution when several filters are combined.

Simplification: ``batch_size`` splits the rows into several ``generate`` calls, each
left-padded to its own longest prompt, so the matmul shapes depend on ``batch_size``. With a
fixed seed every row draws from its own generator (``row_seed``), so the samples do not
depend on ``batch_size`` or on which rows share a call, up to the rounding those shapes bring.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Sequence

import torch

from .base import (Prompt, RolloutBatch, SamplingConfig, assemble_batch, check_context, completion_mask_from_eos,
                   eos_token_ids, left_pad, pad_token_id, row_seed, tokenize_prompts)


class _SamplingProcessor:
    """A ``generate`` logits processor that applies all sampling transformations and logs them.

    Called once per decoding step with ``input_ids`` ``(B, L)`` (prompt plus tokens sampled
    so far) and ``scores`` ``(B, V)``. Returns the processed scores that ``generate`` then
    samples from (softmax) or takes the argmax of (greedy).
    """

    def __init__(self, sampling: SamplingConfig, record_logps: bool, prompt_mask: torch.Tensor,
                 row_generators: list[torch.Generator] | None = None):
        from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                            TopKLogitsWarper, TopPLogitsWarper)

        self.steps: list[torch.Tensor] = []
        self.record_logps = record_logps
        self.row_generators = row_generators
        self.prompt_mask = prompt_mask.bool()
        self.repetition_penalty = sampling.repetition_penalty
        self._previous_logps: torch.Tensor | None = None
        self.transforms = []
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                self.transforms.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.min_p is not None and sampling.min_p > 0:
                self.transforms.append(MinPLogitsWarper(sampling.min_p))
            if sampling.top_k is not None:
                self.transforms.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                self.transforms.append(TopPLogitsWarper(sampling.top_p))

    def _penalize_repeats(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """CTRL's repetition penalty (Keskar et al. 2019) on tokens of the prompt or completion.

        Left padding is not part of the prompt, so pad positions are left out (``generate``'s
        own processor would count them, penalising the pad token, which is often eos).
        """
        generated = input_ids.shape[1] - self.prompt_mask.shape[1]
        real = torch.cat([self.prompt_mask.to(input_ids.device),
                          torch.ones((input_ids.shape[0], generated), dtype=torch.bool, device=input_ids.device)], 1)
        counts = torch.zeros(scores.shape, device=scores.device).scatter_add_(1, input_ids, real.float())
        seen = counts > 0
        penalized = torch.where(scores > 0, scores / self.repetition_penalty, scores * self.repetition_penalty)
        return torch.where(seen, penalized, scores)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._collect(input_ids[:, -1])
        if self.repetition_penalty != 1.0:
            scores = self._penalize_repeats(input_ids, scores)
        for transform in self.transforms:
            scores = transform(input_ids, scores)
        if self.record_logps:
            # Keep this step's distribution until the next call reveals which token was drawn.
            self._previous_logps = torch.log_softmax(scores.float(), dim=-1)
        if self.row_generators is not None:
            return self._draw_per_row(scores)
        return scores

    def _draw_per_row(self, scores: torch.Tensor) -> torch.Tensor:
        """Draw each row's token from its own generator; hand ``generate`` a one-hot choice.

        ``generate`` samples all rows from one global stream, so a row's draw would depend on
        its batch neighbours; here row ``r`` uses generator ``r`` alone, and ``generate``'s own
        draw from the returned scores (0 at the chosen token, -inf elsewhere) is certain.
        """
        probs = torch.softmax(scores.float(), dim=-1)
        chosen = torch.stack([torch.multinomial(row, 1, generator=generator)[0]
                              for row, generator in zip(probs, self.row_generators)])
        one_hot = torch.full_like(scores, float("-inf"))
        return one_hot.scatter_(1, chosen.unsqueeze(1), 0.0)

    def _collect(self, sampled: torch.Tensor) -> None:
        if self._previous_logps is not None:
            self.steps.append(self._previous_logps.gather(1, sampled.unsqueeze(1)).squeeze(1))
            self._previous_logps = None

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor | None:
        """``(B, T)`` log-probs of the sampled tokens, given the tokens of the last step."""
        if not self.record_logps:
            return None
        self._collect(last_tokens)
        return torch.stack(self.steps, dim=1) if self.steps else None


@contextmanager
def _eval_mode(model: torch.nn.Module):
    """Eval mode for sampling (no dropout), then every module back to its previous mode."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def _seeded(seed: int | None, device: torch.device):
    """Use ``seed`` for the duration of the block without disturbing the caller's random state."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


class HFEngine:
    """Sample completions with ``model.generate`` (transformers), on whatever device the model is.

    Args:
        model: a causal LM or a PEFT model wrapping one; it is used as is, never copied.
        tokenizer: its tokenizer (chat template for conversational prompts).
        batch_size: most rows (completions) per ``generate`` call; ``None`` does the whole
            request in one call. Each call holds at least one prompt's ``n`` completions.
        record_logps: fill ``RolloutBatch.sampling_logps`` (cheap; ``False`` skips it).
    """

    def __init__(self, model, tokenizer, batch_size: int | None = None, *, record_logps: bool = True):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: use None (one call) or a positive number of rows.")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.record_logps = record_logps

    def sync_weights(self, model) -> None:
        """Nothing to copy: the engine samples from the trainer's own model object.

        Passing another model object makes the engine sample from that one from now on.
        """
        if model is not self.model:
            self.model = model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _row_generators(self, sampling: SamplingConfig, first: int, rows: int) -> list[torch.Generator] | None:
        """One seeded generator per row (``row_seed``) when the call is seeded and samples."""
        if sampling.seed is None or sampling.greedy:
            return None
        return [torch.Generator(device=self.device).manual_seed(row_seed(sampling, first + r)) for r in range(rows)]

    def _generation_config(self, sampling: SamplingConfig, eos_ids: list[int]):
        from transformers import GenerationConfig

        base = getattr(self.model, "generation_config", None)
        config = copy.deepcopy(base) if base is not None else GenerationConfig()
        # Switch off generate's own warpers and penalties: _SamplingProcessor applies them.
        for name in ("temperature", "top_k", "top_p", "min_p", "typical_p", "top_h", "epsilon_cutoff",
                     "eta_cutoff", "repetition_penalty"):
            if hasattr(config, name):
                setattr(config, name, None)
        config.do_sample = not sampling.greedy
        if config.do_sample:
            config.temperature, config.top_k, config.top_p = 1.0, 0, 1.0  # neutral: no warper is built
        config.num_beams = 1
        config.num_return_sequences = 1  # rows are repeated beforehand: greedy refuses n > 1 returns
        config.max_new_tokens = sampling.max_tokens
        config.max_length = None
        config.eos_token_id = eos_ids
        config.pad_token_id = pad_token_id(self.tokenizer)
        config.return_dict_in_generate = False
        config.output_scores = False
        config.use_cache = True
        for name, value in sampling.generation_kwargs.items():  # e.g. suppress_tokens, cache_implementation
            setattr(config, name, value)
        return config

    @property
    def context_limit(self) -> int | None:
        """Positions the model reads (``max_position_embeddings``); ``None`` when it does not say."""
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    @property
    def eos_ids(self) -> list[int]:
        return eos_token_ids(self.tokenizer, getattr(self.model, "generation_config", None))

    @torch.no_grad()
    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seeds: Sequence[int] | None = None) -> tuple[list[list[int]], list[list[float]] | None]:
        """One completion per row of token ids, token in, token out (a multi-turn rollout's next turn).

        ``seeds[r]`` seeds row ``r``'s own generator (ignored when greedy); without seeds the
        global torch generator is used. Returns each row's new tokens, cut after its first
        eos, and their sampling log-probs when the engine records them.
        """
        eos_ids, pad_id = self.eos_ids, pad_token_id(self.tokenizer)
        config = self._generation_config(sampling, eos_ids)
        rows_per_call = len(prompt_ids) if self.batch_size is None else self.batch_size
        completions: list[list[int]] = []
        logps: list[list[float]] | None = [] if self.record_logps else None
        with _eval_mode(self.model), _seeded(None if seeds is None else int(seeds[0]), self.device):
            for start in range(0, len(prompt_ids), rows_per_call):
                ids, mask = left_pad(prompt_ids[start:start + rows_per_call], pad_id)
                generators = None
                if seeds is not None and not sampling.greedy:
                    generators = [torch.Generator(device=self.device).manual_seed(int(s))
                                  for s in seeds[start:start + len(ids)]]
                processor = _SamplingProcessor(sampling, self.record_logps, mask, generators)
                sequences = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                                generation_config=config, logits_processor=[processor])
                new_tokens = sequences[:, ids.shape[1]:].cpu()
                chunk_logps = processor.finish(sequences[:, -1])
                keep, _ = completion_mask_from_eos(new_tokens, eos_ids)
                for r in range(len(new_tokens)):
                    length = int(keep[r].sum())
                    completions.append(new_tokens[r, :length].tolist())
                    if logps is not None:
                        logps.append(chunk_logps[r, :length].float().cpu().tolist() if chunk_logps is not None else [])
        return completions, logps

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig) -> RolloutBatch:
        """Sample ``n`` completions for every prompt; rows are prompt-major (see ``RolloutBatch``).

        With ``sampling.seed`` set, every completion is drawn from its own generator seeded
        with its global index (``row_seed``), so the call is reproducible, the caller's
        random stream is untouched, and a completion is the same whichever rows share the
        call; without it, the global torch generator is used (reproducible under
        ``torch.manual_seed``).
        """
        if n < 1:
            raise ValueError(f"n={n}: ask for at least one completion per prompt.")
        prompt_ids = tokenize_prompts(self.tokenizer, prompts, sampling.max_prompt_length,
                                      sampling.chat_template_kwargs)
        check_context(prompt_ids, sampling.max_tokens,
                      getattr(getattr(self.model, "config", None), "max_position_embeddings", None))
        eos_ids = eos_token_ids(self.tokenizer, getattr(self.model, "generation_config", None))
        pad_id = pad_token_id(self.tokenizer)
        config = self._generation_config(sampling, eos_ids)
        prompts_per_call = len(prompt_ids) if self.batch_size is None else max(1, self.batch_size // n)

        completions: list[list[int]] = []
        logps: list[list[float]] | None = [] if self.record_logps else None
        with _eval_mode(self.model), _seeded(sampling.seed, self.device):
            for start in range(0, len(prompt_ids), prompts_per_call):
                chunk = prompt_ids[start:start + prompts_per_call]
                ids, mask = left_pad(chunk, pad_id)
                ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)  # prompt-major
                processor = _SamplingProcessor(sampling, self.record_logps, mask,
                                               self._row_generators(sampling, start * n, len(ids)))
                sequences = self.model.generate(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                    generation_config=config, logits_processor=[processor])
                new_tokens = sequences[:, ids.shape[1]:].cpu()
                chunk_logps = processor.finish(sequences[:, -1])
                completions.extend(new_tokens.tolist())
                if logps is not None:
                    logps.extend(chunk_logps.cpu().tolist() if chunk_logps is not None else [[]] * len(new_tokens))
        batch = assemble_batch(self.tokenizer, prompt_ids, completions, n, eos_ids, logps)
        if batch.sampling_logps is not None and not torch.isfinite(batch.sampling_logps).all():
            # A sampled token can never have been filtered out; a -inf here means the recording went wrong.
            raise RuntimeError("Non-finite sampling log-prob on a sampled token; please report this.")
        return batch

