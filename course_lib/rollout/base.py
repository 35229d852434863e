"""What every rollout engine takes and returns: sampling settings, the batch, the protocol.

A rollout engine turns prompts into ``n`` sampled completions each and reports, for every
completion token, the log-probability the *sampler* gave it. The trainer needs those to
correct for the gap between the engine that sampled and the policy being trained (the
truncated importance sampling, TIS, of Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training").

Both engines tokenize prompts with :func:`tokenize_prompts`, so they see the same prompt
tokens, and build their output with :func:`assemble_batch`, so masks, padding and
``is_eos`` follow one definition.

Layout is prompt-major, as in TRL: the ``n`` completions of prompt ``i`` are rows
``i*n ... i*n + n-1``, so ``rewards.view(-1, n)`` groups them.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch

Prompt = list[dict] | str


@dataclass
class SamplingConfig:
    """How completions are sampled; the names and defaults follow TRL's ``GRPOConfig``.

    Attributes:
        temperature: logits are divided by it before sampling; ``0`` means greedy decoding.
        top_p: nucleus sampling, keep the smallest set of tokens with this much probability
            (``1.0`` keeps all).
        top_k: keep the ``top_k`` most likely tokens (``None`` keeps all).
        min_p: drop tokens whose probability is below ``min_p`` times the top one's
            (``None`` keeps all).
        repetition_penalty: CTRL-style penalty on tokens already in prompt or completion
            (``1.0`` is none).
        max_tokens: most completion tokens per sample; longer ones are truncated.
        seed: makes one call reproducible: the same prompts, ``n`` and seed give the same
            completions. ``None`` draws from the engine's own random stream.
        max_prompt_length: keep at most this many prompt tokens, dropping the oldest (left)
            ones with a :class:`PromptTruncationWarning`; ``None`` keeps whole prompts.
        first_row: global index of this call's first completion. With ``seed`` set, row
            ``r`` of the call is drawn from its own seed ``seed + first_row + r`` (see
            :func:`row_seed`), so a completion does not depend on which other rows share the
            call: a generation batch split across processes samples what one process would.
        generation_kwargs: extra engine arguments (HF ``GenerationConfig`` attributes or vLLM
            ``SamplingParams``); the names above (and ``max_new_tokens``) given here override
            the fields and are removed from it.
        chat_template_kwargs: extra ``apply_chat_template`` arguments for conversational
            prompts (e.g. ``{"enable_thinking": False}``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    max_tokens: int = 32
    seed: int | None = None
    max_prompt_length: int | None = None
    first_row: int = 0
    generation_kwargs: dict | None = None
    chat_template_kwargs: dict | None = None

    def __post_init__(self):
        extra = dict(self.generation_kwargs or {})
        if "max_new_tokens" in extra:
            extra["max_tokens"] = extra.pop("max_new_tokens")
        for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens"):
            if name in extra:  # TRL: generation_kwargs win over the sampling fields
                setattr(self, name, extra.pop(name))
        self.generation_kwargs = extra
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: use 0 (greedy) or a positive value.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}: use a value in (0, 1]; 1.0 disables nucleus sampling.")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k}: use None to keep every token, or a positive integer.")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p={self.min_p}: use None or a value in [0, 1].")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty}: use a positive value (1.0 = none).")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens}: generate at least one token.")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise ValueError(f"max_prompt_length={self.max_prompt_length}: use None or a positive length.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_config(cls, config, *, seed: int | None, first_row: int = 0, greedy: bool = False) -> SamplingConfig:
        """The sampling settings of a training config (:class:`course_lib.config.RLConfig`), the one
        place the trainer and the in-loop evaluation build them from.

        Args:
            config: the run's config: its temperature, top_p, top_k, min_p, repetition_penalty,
                max_completion_length, max_prompt_length, generation and chat-template kwargs.
            seed, first_row: as the attributes above.
            greedy: temperature 0 and no filtering (the evaluation's greedy pass); the length
                limits and the extra kwargs still come from `config`.
        """
        shared = dict(max_tokens=config.max_completion_length, max_prompt_length=config.max_prompt_length,
                      generation_kwargs=config.sampling_extras, chat_template_kwargs=config.chat_template_kwargs,
                      seed=seed, first_row=first_row)
        if greedy:
            return cls(temperature=0.0, **shared)
        return cls(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k, min_p=config.min_p,
                   repetition_penalty=config.repetition_penalty, **shared)


@dataclass
class RolloutBatch:
    """``n`` completions for each of ``len(prompts)`` prompts; ``B = len(prompts) * n`` rows.

    Attributes:
        prompt_ids: ``(B, P)`` prompt tokens, left-padded with the pad id.
        prompt_mask: ``(B, P)`` 1 on real prompt tokens.
        completion_ids: ``(B, T)`` sampled tokens, right-padded with the pad id; the eos
            token is kept when it was generated.
        completion_mask: ``(B, T)`` 1 up to and including the first eos, 0 after.
        is_eos: ``(B,)`` True when the completion ended with eos, False when it was cut at
            ``max_tokens``.
        texts: decoded completions (masked tokens only, special tokens skipped).
        sampling_logps: ``(B, T)`` log-probability of each sampled token under the
            distribution it was actually drawn from: the logits after repetition penalty,
            divided by the temperature, with top-k / top-p / min-p filtering applied, then
            log-softmaxed. With no filtering this is ``log_softmax(logits / T)``, the same
            quantity the trainer computes for its own policy. In greedy mode there is no
            temperature: it is ``log_softmax(logits)`` after the repetition penalty. Zero on
            padding. ``None`` when the engine did not record them.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    is_eos: torch.Tensor
    texts: list[str]
    sampling_logps: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def to(self, device: torch.device | str) -> RolloutBatch:
        """The same batch with every tensor on ``device``: engines tokenize prompts on the CPU, the
        trainer's forward passes run where the model is."""
        moved = {spec.name: value.to(device) for spec in dataclasses.fields(self)
                 if isinstance(value := getattr(self, spec.name), torch.Tensor) and value.device != torch.device(device)}
        return dataclasses.replace(self, **moved) if moved else self

    @property
    def num_completion_tokens(self) -> int:
        """How many completion tokens were generated (eos included), the unit of tokens/s."""
        return int(self.completion_mask.sum())


@runtime_checkable
class RolloutEngine(Protocol):
    """Anything that samples completions for the trainer."""

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig) -> RolloutBatch:
        """Sample ``n`` completions per prompt (prompt-major rows)."""
        ...

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...


def eos_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Token ids that end a completion: the tokenizer's eos plus the generation config's eos."""
    ids: list[int] = []
    candidates = [tokenizer.eos_token_id]
    if generation_config is not None:
        extra = generation_config.eos_token_id
        candidates += extra if isinstance(extra, (list, tuple)) else [extra]
    for token_id in candidates:
        if token_id is not None and int(token_id) not in ids:
            ids.append(int(token_id))
    if not ids:
        raise ValueError("The tokenizer has no eos_token; set tokenizer.eos_token so completions can end.")
    return ids


def pad_token_id(tokenizer) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    if tokenizer.eos_token_id is not None:
        return int(tokenizer.eos_token_id)
    raise ValueError("The tokenizer has neither pad_token nor eos_token; set tokenizer.pad_token.")


# Seeds are Python ints fed to torch.Generator.manual_seed (below 2**64).
SEED_MODULUS = 2**62


def row_seed(sampling: SamplingConfig, row: int) -> int:
    """The seed of row ``row`` of a call (``sampling.seed`` must be set): one per completion."""
    return (int(sampling.seed) + sampling.first_row + row) % SEED_MODULUS


class PromptTruncationWarning(UserWarning):
    """Some prompts were longer than ``max_prompt_length`` and lost their first tokens."""


def tokenize_prompts(tokenizer, prompts: Sequence[Prompt], max_length: int | None = None,
                     chat_template_kwargs: dict | None = None) -> list[list[int]]:
    """Token ids of each prompt, unpadded.

    Conversations (lists of ``{"role", "content"}`` messages) go through the tokenizer's
    chat template with the assistant turn opened (``add_generation_prompt=True``); the
    template already writes any special tokens, so none are added; ``chat_template_kwargs``
    reach the template (e.g. ``enable_thinking=False``). Plain strings are
    tokenized as they are, with the tokenizer's usual special tokens.

    ``max_length`` keeps each prompt's last ``max_length`` tokens (left truncation, as TRL
    does: the end of a prompt, where the assistant turn opens, matters most) and warns
    once per call with the number of prompts cut.
    """
    if isinstance(prompts, (str, dict)) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts: pass a non-empty list of prompts (each a string or a list of chat messages).")
    token_ids = []
    seen: dict = {}  # a prompt repeated (GRPO's G copies of one object) is tokenized once
    for index, prompt in enumerate(prompts):
        key = prompt if isinstance(prompt, str) else id(prompt)
        if key in seen:
            token_ids.append(list(seen[key]))
            continue
        if isinstance(prompt, str):
            ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        elif isinstance(prompt, Sequence) and all(isinstance(m, dict) for m in prompt):
            text = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False,
                                                 **(chat_template_kwargs or {}))
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            raise TypeError(f"prompts[{index}] is a {type(prompt).__name__}; use a string or a list of "
                            "{'role': ..., 'content': ...} messages.")
        if len(ids) == 0:
            raise ValueError(f"prompts[{index}] tokenizes to nothing; give the model at least one token.")
        token_ids.append(list(ids))
        seen[key] = token_ids[-1]
    if max_length is not None:
        too_long = [len(ids) for ids in token_ids if len(ids) > max_length]
        if too_long:
            warnings.warn(f"{len(too_long)} of {len(token_ids)} prompts are longer than max_prompt_length="
                          f"{max_length} (up to {max(too_long)} tokens); their first tokens were dropped. "
                          "Raise max_prompt_length or shorten the prompts to keep them whole.",
                          PromptTruncationWarning, stacklevel=3)
            token_ids = [ids[-max_length:] for ids in token_ids]
    return token_ids


class ContextLengthError(ValueError):
    """A prompt plus its completion would not fit in the model's positions."""


def check_context(prompt_ids: Sequence[Sequence[int]], max_tokens: int, context_limit: int | None) -> None:
    """Refuse prompts that, with ``max_tokens`` completion tokens, exceed the model's positions.

    Both engines call it with their own limit (HF: the model's ``max_position_embeddings``;
    vLLM: the engine's ``max_model_len``), so a prompt the model cannot read is refused the
    same way by both, instead of being refused by vLLM and silently run past the trained
    positions by HF. ``max_prompt_length`` (left truncation) is the way to fit long prompts.
    """
    if context_limit is None:
        return
    longest = max(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    length = len(prompt_ids[longest])
    if length + max_tokens <= context_limit:
        return
    room = context_limit - max_tokens      # the longest prompt that fits beside max_tokens
    left = context_limit - length          # the most completion tokens that fit beside this prompt
    options = [f"set max_prompt_length <= {room} (keeps each prompt's last tokens)"] if room >= 1 else []
    options.append(f"lower max_completion_length to at most {left}" if left >= 1 else
                   "shorten the prompts (this one alone fills the model's positions)")
    fix = " or ".join(options)
    raise ContextLengthError(f"prompts[{longest}] has {length} tokens; with max_tokens={max_tokens} completion tokens "
                             f"it needs {length + max_tokens} positions, but the model reads at most {context_limit}. "
                             f"Fix: {fix}.")


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)``, both ``(len(rows), max_len)``, rows right-aligned (left padding)."""
    lengths = torch.as_tensor([len(row) for row in rows], dtype=torch.long)
    width = int(lengths.max()) if len(rows) else 0
    mask = (torch.arange(width).expand(len(rows), width) >= (width - lengths).unsqueeze(1)).long()
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    ids[mask.bool()] = torch.as_tensor([token for row in rows for token in row], dtype=torch.long)  # row-major
    return ids, mask


def completion_mask_from_eos(completion_ids: torch.Tensor, eos_ids: Sequence[int],
                             lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, is_eos)`` for right-padded completions ``(B, T)``.

    ``mask`` is 1 up to and including the first eos token and 0 after it; ``is_eos`` is
    ``(B,)``, True where an eos occurs. ``lengths`` (``(B,)``), when given, also cuts each
    row at its generated length, so a pad id equal to an eos id is never mistaken for one.
    """
    batch, width = completion_ids.shape
    positions = torch.arange(width).expand(batch, width)
    if lengths is None:
        lengths = torch.full((batch,), width)
    valid = positions < lengths.unsqueeze(1)
    is_eos_token = torch.isin(completion_ids, torch.as_tensor(list(eos_ids), dtype=completion_ids.dtype)) & valid
    is_eos = is_eos_token.any(dim=1)
    first_eos = torch.where(is_eos, is_eos_token.int().argmax(dim=1), torch.full((batch,), width))
    mask = (positions <= first_eos.unsqueeze(1)) & valid
    return mask.long(), is_eos


def assemble_batch(tokenizer, prompt_ids: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                   n: int, eos_ids: Sequence[int], logps: Sequence[Sequence[float]] | None) -> RolloutBatch:
    """Pad per-row token lists into a :class:`RolloutBatch`.

    Args:
        prompt_ids: one unpadded token list per *prompt* (``len(completions) / n`` of them).
        completions: one token list per row, prompt-major, possibly with tokens after eos.
        n: completions per prompt.
        eos_ids: tokens that end a completion.
        logps: per-row sampling log-probs aligned with ``completions``, or ``None``.
    """
    if len(completions) != len(prompt_ids) * n:
        raise ValueError(f"Expected {len(prompt_ids)} prompts x n={n} completions, got {len(completions)}.")
    pad_id = pad_token_id(tokenizer)
    prompt_tensor, prompt_mask = left_pad(prompt_ids, pad_id)
    width = max(1, max(len(row) for row in completions))
    lengths = torch.as_tensor([len(row) for row in completions], dtype=torch.long)
    filled = torch.arange(width).expand(len(completions), width) < lengths.unsqueeze(1)  # (B, T) generated
    completion_ids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    completion_ids[filled] = torch.as_tensor([token for row in completions for token in row], dtype=torch.long)
    completion_mask, is_eos = completion_mask_from_eos(completion_ids, eos_ids, lengths)
    sampling_logps = None
    if logps is not None:
        sampling_logps = torch.zeros((len(completions), width), dtype=torch.float32)
        row_lengths = torch.as_tensor([len(row) for row in logps], dtype=torch.long)
        sampling_logps[torch.arange(width).expand(len(logps), width) < row_lengths.unsqueeze(1)] = torch.as_tensor(
            [value for row in logps for value in row], dtype=torch.float32)
        sampling_logps = torch.where(completion_mask.bool(), sampling_logps, torch.zeros(()))
    kept_lengths = completion_mask.sum(1).tolist()
    kept = [row[:length] for row, length in zip(completion_ids.tolist(), kept_lengths)]
    texts = tokenizer.batch_decode(kept, skip_special_tokens=True)
    return RolloutBatch(
        prompt_ids=prompt_tensor.repeat_interleave(n, dim=0),
        prompt_mask=prompt_mask.repeat_interleave(n, dim=0),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        is_eos=is_eos,
        texts=texts,
        sampling_logps=sampling_logps,
    )
