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

Speed: rows that share a prompt (GRPO's ``G`` completions per prompt) share one prefill of
it (``HFEngine._shared_prompt_cache``), and with a seed each row's sampling noise is drawn
a block of decoding steps at a time from its own generator (``_RowNoise``); both give the
completions of the plain path (tested), the first up to float rounding in the log-probs.

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

from ..models import eval_mode
from .base import (Prompt, RolloutBatch, SamplingConfig, assemble_batch, check_context, completion_mask_from_eos,
                   eos_token_ids, left_pad, pad_token_id, row_seed, tokenize_prompts)
from .shared_prefix import prefix_shared_inputs, sharing_decoder


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
        # On CPU, each row's noise is drawn a block of steps at a time (``_RowNoise``): the
        # same numbers ``multinomial`` would draw, in far fewer calls.
        self.row_noise = (_RowNoise(row_generators, sampling.max_tokens)
                          if row_generators and _blocked_draws_match() and row_generators[0].device.type == "cpu"
                          else None)
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
        if self.row_noise is not None:
            chosen = _draw_with_noise(probs, self.row_noise.next(probs.shape[1], probs.dtype))
        else:
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


def _distinct_indices(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Each prompt's index among the distinct prompts, in order of first appearance."""
    seen: dict[tuple, int] = {}
    return [seen.setdefault(tuple(ids), len(seen)) for ids in prompts]


def _draw_with_noise(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``(B,)`` tokens ``argmax(probs / noise)`` with ``noise ~ Exp(1)``: one draw from each row's ``probs``.

    This is how ``torch.multinomial(row, 1, generator=g)`` draws (the exponential race,
    equivalent to the Gumbel-max trick): it fills a tensor like ``row`` with
    ``exponential_(generator=g)`` and takes ``argmax(row / noise)``. Given the noise that
    ``g`` would have produced, the token is the one ``multinomial`` returns.
    """
    return torch.div(probs, noise).argmax(dim=-1)


class _RowNoise:
    """Each row's exponential noise for the coming decoding steps, drawn from the row's own generator.

    ``multinomial`` draws ``V`` numbers from the row's generator at every step; drawing
    ``k * V`` at once gives the same ``k`` consecutive blocks (on CPU the generator fills a
    tensor element by element, in order; :func:`_blocked_draws_match` checks it once per
    process). So a block of steps costs one call per row instead of one per row and step.
    Blocks hold at most ``_BLOCK_STEPS`` steps (a batch that stops early wastes little) and
    ``_BLOCK_FLOATS`` numbers.
    """

    def __init__(self, generators: list[torch.Generator], max_steps: int):
        self.generators, self.remaining = generators, max_steps
        self.block: torch.Tensor | None = None  # (B, k, V)
        self.position = 0

    def next(self, vocab: int, dtype: torch.dtype) -> torch.Tensor:
        """``(B, V)`` noise of the next decoding step."""
        if self.block is None or self.position >= self.block.shape[1]:
            rows = len(self.generators)
            steps = max(1, min(self.remaining, _BLOCK_STEPS, _BLOCK_FLOATS // max(1, rows * vocab)))
            self.block = torch.empty((rows, steps, vocab), dtype=dtype)
            for row, generator in enumerate(self.generators):
                self.block[row].exponential_(generator=generator)
            self.remaining -= steps
            self.position = 0
        noise = self.block[:, self.position]
        self.position += 1
        return noise


_BLOCK_STEPS, _BLOCK_FLOATS = 8, 2**22
# Off only to test the shared prompt prefill against generate's own.
_SHARE_PROMPT_PREFILL = True
_BLOCKED_DRAWS_MATCH: bool | None = None


def _blocked_draws_match() -> bool:
    """Whether blocked noise gives ``multinomial``'s draws with this torch build (checked once, on CPU)."""
    global _BLOCKED_DRAWS_MATCH
    if _BLOCKED_DRAWS_MATCH is None:
        probs = torch.softmax(torch.arange(4 * 37, dtype=torch.float32).reshape(4, 37).sin() * 4, dim=-1)
        probs[:, ::5] = 0.0  # filtered tokens (top-k, top-p) have probability 0
        seeds = [3, 17, 2**40 + 1, 99]
        reference = [torch.Generator().manual_seed(s) for s in seeds]
        steps = _BLOCK_STEPS + 3  # across two blocks
        noise = _RowNoise([torch.Generator().manual_seed(s) for s in seeds], steps)
        match = True
        for _ in range(steps):
            expected = torch.stack([torch.multinomial(row, 1, generator=g)[0] for row, g in zip(probs, reference)])
            match &= bool(torch.equal(_draw_with_noise(probs, noise.next(37, probs.dtype)), expected))
        _BLOCKED_DRAWS_MATCH = match
    return _BLOCKED_DRAWS_MATCH


@contextmanager
def _seeded(seed: int | None, device: torch.device):
    """Use ``seed`` for the duration of the block without disturbing the caller's random state."""
    if seed is None:
        yield
        return
    if device.type == "cpu":  # only the CPU generator matters: seed it alone (torch.manual_seed is ~1 ms)
        generator = torch.random.default_generator
        state = generator.get_state()
        generator.manual_seed(seed)
        try:
            yield
        finally:
            generator.set_state(state)
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
        device = self.device
        return [torch.Generator(device=device).manual_seed(row_seed(sampling, first + r)) for r in range(rows)]

    def _generation_config(self, sampling: SamplingConfig, eos_ids: list[int], own_draws: bool = False):
        """``generate``'s settings; ``own_draws``: the processor draws every token from per-row
        generators and hands back a one-hot choice, which ``generate`` then takes greedily
        (sampling from it would only spend a draw of the global stream on a certain outcome)."""
        from transformers import GenerationConfig

        base = getattr(self.model, "generation_config", None)
        config = copy.deepcopy(base) if base is not None else GenerationConfig()
        # Switch off generate's own warpers and penalties: _SamplingProcessor applies them.
        for name in ("temperature", "top_k", "top_p", "min_p", "typical_p", "top_h", "epsilon_cutoff",
                     "eta_cutoff", "repetition_penalty"):
            if hasattr(config, name):
                setattr(config, name, None)
        config.do_sample = not sampling.greedy and not own_draws
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

    def _shared_prompt_cache(self, ids: torch.Tensor, mask: torch.Tensor, prompt_of_row: list[int], config):
        """The key/value cache of every row's prompt but its last token, each distinct prompt run once.

        GRPO asks for ``G`` completions of each prompt, so ``generate`` would run every prompt
        ``G`` times before its first token. Here the decoder runs each distinct prompt (but
        its last token) once, the cache is expanded to one row per completion by indexing,
        and ``generate`` continues from it: its first step reads only the last prompt token
        of each row. Positions and masks are those ``generate`` uses, so the logits equal
        the unshared ones up to float rounding. ``None`` (``generate`` does it all) when no
        prompt repeats, the prompts are one token long, or the model's cache cannot be
        shared this way (sliding-window layers, a cache implementation asked for).
        """
        distinct = max(prompt_of_row) + 1
        if not _SHARE_PROMPT_PREFILL or distinct == len(prompt_of_row) or ids.shape[1] < 2:
            return None
        found = sharing_decoder(self.model, config)
        if found is None:
            return None
        body, cache = found
        first = torch.as_tensor([prompt_of_row.index(p) for p in range(distinct)], dtype=torch.long)
        prefix_ids, prefix_mask = ids[first, :-1].to(self.device), mask[first, :-1].to(self.device)
        position_ids = (prefix_mask.long().cumsum(-1) - 1).masked_fill(prefix_mask == 0, 0)  # generate's positions
        body(input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=position_ids, past_key_values=cache,
             use_cache=True)
        cache.batch_select_indices(torch.as_tensor(prompt_of_row, dtype=torch.long, device=self.device))
        return cache

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
        config = self._generation_config(sampling, eos_ids, own_draws=seeds is not None and not sampling.greedy)
        rows_per_call = len(prompt_ids) if self.batch_size is None else self.batch_size
        completions: list[list[int]] = []
        logps: list[list[float]] | None = [] if self.record_logps else None
        with eval_mode(self.model), _seeded(None if seeds is None else int(seeds[0]), self.device):
            for start in range(0, len(prompt_ids), rows_per_call):
                # the rows' common beginning (the system prompt; a group's whole first turn) runs once
                ids, mask, shared = prefix_shared_inputs(self.model, prompt_ids[start:start + rows_per_call], pad_id,
                                                         self.device, config)
                generators = None
                if seeds is not None and not sampling.greedy:
                    generators = [torch.Generator(device=self.device).manual_seed(int(s))
                                  for s in seeds[start:start + len(ids)]]
                processor = _SamplingProcessor(sampling, self.record_logps, mask, generators)
                sequences = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                                logits_processor=[processor], **shared)
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
        config = self._generation_config(sampling, eos_ids,
                                         own_draws=sampling.seed is not None and not sampling.greedy)
        prompts_per_call = len(prompt_ids) if self.batch_size is None else max(1, self.batch_size // n)

        completions: list[list[int]] = []
        logps: list[list[float]] | None = [] if self.record_logps else None
        with eval_mode(self.model), _seeded(sampling.seed, self.device):
            for start in range(0, len(prompt_ids), prompts_per_call):
                chunk = prompt_ids[start:start + prompts_per_call]
                prompt_of_row = [index for index in _distinct_indices(chunk) for _ in range(n)]
                if max(prompt_of_row) + 1 == len(prompt_of_row):  # no prompt repeats: share their opening
                    ids, mask, shared = prefix_shared_inputs(self.model, chunk, pad_id, self.device, config)
                else:  # groups (G copies of a prompt, or n > 1): each distinct prompt runs once
                    ids, mask = left_pad(chunk, pad_id)
                    ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)  # prompt-major
                    cache = self._shared_prompt_cache(ids, mask, prompt_of_row, config)
                    ids, mask = ids.to(self.device), mask.to(self.device)
                    shared = {} if cache is None else {"past_key_values": cache}
                processor = _SamplingProcessor(sampling, self.record_logps, mask,
                                               self._row_generators(sampling, start * n, len(ids)))
                sequences = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                                logits_processor=[processor], **shared)
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

