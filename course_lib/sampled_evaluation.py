"""Evaluation beyond greedy accuracy: pass@k, maj@k, sampled accuracy.

Greedy accuracy asks one question: is the policy's most likely answer right? RL papers
also ask what the policy *can* do when it samples:

- **pass@k**: the probability that at least one of k sampled answers is correct. From n
  >= k samples of a problem with c correct, the unbiased estimator (Chen et al. 2021,
  "Evaluating Large Language Models Trained on Code", eq. 1) is
  ``1 - C(n - c, k) / C(n, k)``, averaged over problems. Taking the first k samples
  instead, or ``1 - (1 - c/n)^k``, is biased (the second one low).
- **maj@k** (majority voting, "self-consistency", Wang et al. 2023): the answer that most
  of k samples give is compared with the reference.
- **sampled accuracy** is pass@1: the mean fraction of correct samples, at the sampling
  temperature, which differs from greedy accuracy.

Comparing pass@k curves before and after RL tells whether training *sharpened* the
policy (pass@1 up, pass@k for large k unchanged or down: the answers it finds were
already in its samples, Yue et al. 2025) or *expanded* it (pass@k up at large k too).

Correctness is :func:`course_lib.rewards.answers.is_correct`, the rule of greedy
evaluation and of the correctness rewards.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from .models import eval_mode
from .rewards.answers import ANSWER_EXTRACTORS, is_correct
from .rewards.extract import normalize_number, same_answer

__all__ = ["pass_at_k", "mean_pass_at_k", "majority_answer", "maj_at_k", "sampled_completions",
           "SampledEvaluation", "score_samples", "group_texts", "evaluate_sampled"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples with ``c`` correct (Chen et al. 2021).

    ``1 - C(n - c, k) / C(n, k)``: one minus the probability that k samples drawn without
    replacement from the n are all wrong. Computed as a product, ``1 - prod_{i=n-c+1}^{n}
    (1 - k / i)``, which stays exact for large n (no huge binomials). Examples: n = 5, c = 2,
    k = 2 gives 1 - 3/10 = 0.7; any c >= 1 with k = n gives 1.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k needs integers, got n={n!r}, c={c!r}, k={k!r}.")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}. "
                         "Fix: sample at least k completions per problem.")
    if n - c < k:  # every draw of k samples contains a correct one
        return 1.0
    all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def mean_pass_at_k(correct_counts: Sequence[int], n: int, k: int) -> float:
    """pass@k of a set of problems: the mean of :func:`pass_at_k` over their correct counts."""
    if len(correct_counts) == 0:
        raise ValueError("mean_pass_at_k got no problems. Fix: evaluate at least one problem.")
    return sum(pass_at_k(n, int(c), k) for c in correct_counts) / len(correct_counts)


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The most frequent answer; ties go to the one seen first; ``None`` (no answer) never votes.

    Returns None when no sample gave an answer.
    """
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None
    top = max(votes.values())
    return next(a for a in answers if a is not None and votes[a] == top)


def maj_at_k(answers: Sequence[Sequence[str | None]], references: Sequence[object], k: int) -> float:
    """maj@k: fraction of problems whose majority answer over their first ``k`` samples is right.

    Args:
        answers: per problem, the answers read from its samples (None = none found), at
            least ``k`` of them.
        references: the reference answer of each problem.
        k: samples that vote.
    """
    if len(answers) != len(references) or not answers:
        raise ValueError(f"maj_at_k needs one list of answers per reference, got {len(answers)} and "
                         f"{len(references)}.")
    if k < 1 or any(len(row) < k for row in answers):
        raise ValueError(f"maj_at_k(k={k}) needs k >= 1 and at least k answers per problem.")
    right = 0
    for row, reference in zip(answers, references):
        vote = majority_answer(list(row[:k]))
        right += vote is not None and same_answer(vote, reference)
    return right / len(answers)


@torch.no_grad()
def sampled_completions(model, tokenizer, prompts, n: int, temperature: float = 1.0, max_new_tokens: int = 32,
                        batch_size: int = 256, seed: int = 0, progress: bool = False) -> list[list[str]]:
    """``n`` sampled completions (text) per conversational prompt, ``[prompt][sample]``.

    ``batch_size`` counts sequences: ``batch_size // n`` prompts go through ``generate``
    at a time. The sampling is reproducible (``seed``) and leaves torch's global random
    state as it was.
    """
    if n < 1 or temperature <= 0:
        raise ValueError(f"sampled_completions needs n >= 1 and temperature > 0, got n={n}, "
                         f"temperature={temperature}. Fix: use greedy_completions for temperature 0.")
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    device = next(model.parameters()).device
    per_batch = max(1, batch_size // n)
    out: list[list[str]] = []
    with eval_mode(model), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for start in tqdm(range(0, len(texts), per_batch), desc="sample", disable=not progress):
            batch = tokenizer(texts[start:start + per_batch], return_tensors="pt", padding=True,
                              add_special_tokens=False).to(device)
            output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature,
                                    top_k=0, top_p=1.0, num_return_sequences=n,
                                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            decoded = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            out += [decoded[i:i + n] for i in range(0, len(decoded), n)]
    return out


@dataclass
class SampledEvaluation:
    """What :func:`evaluate_sampled` measured: per problem, then summarised."""

    n: int
    temperature: float
    correct_counts: list[int]  # per problem: correct samples out of n
    answers: list[list[str | None]] = field(repr=False)  # per problem, per sample
    pass_at: dict[int, float] = field(default_factory=dict)
    maj_at: dict[int, float] = field(default_factory=dict)

    def per_problem_pass_at(self, k: int) -> list[float]:
        """pass@k of each problem (for paired before/after intervals)."""
        return [pass_at_k(self.n, c, k) for c in self.correct_counts]


def score_samples(samples: Sequence[Sequence[str]], references: Sequence[object], ks: Sequence[int],
                  temperature: float = 1.0, extractor: str = "tag_or_first_number") -> SampledEvaluation:
    """pass@k and maj@k for ``ks`` from ``samples[problem][i]`` (n texts per problem, any engine).

    Every problem must have the same number n of samples, and every k must lie in [1, n].
    """
    if len(samples) == 0 or len(samples) != len(references):
        raise ValueError(f"score_samples needs one list of samples per reference, got {len(samples)} and "
                         f"{len(references)}. Fix: evaluate at least one problem.")
    n = len(samples[0])
    if n < 1 or any(len(row) != n for row in samples):
        raise ValueError("score_samples needs the same number (>= 1) of samples for every problem.")
    if any(not 1 <= k <= n for k in ks):
        raise ValueError(f"every k must lie in [1, n={n}], got ks={list(ks)}. Fix: raise n or drop the larger k.")
    extract = ANSWER_EXTRACTORS[extractor]
    references = list(references)
    counts = [sum(is_correct(text, ref, extractor) for text in row) for row, ref in zip(samples, references)]
    read = (extract(text) for row in samples for text in row)
    flat = [None if a is None else (normalize_number(a) or a) for a in read]  # "4.0" and "4" vote together
    answers = [flat[i:i + n] for i in range(0, len(flat), n)]
    result = SampledEvaluation(n=n, temperature=temperature, correct_counts=counts, answers=answers)
    result.pass_at = {k: mean_pass_at_k(counts, n, k) for k in ks}
    result.maj_at = {k: maj_at_k(answers, references, k) for k in ks}
    return result


def group_texts(texts: Sequence[str], n: int) -> list[list[str]]:
    """Prompt-major flat texts (an engine's ``RolloutBatch.texts`` with ``n`` per prompt) -> ``[prompt][sample]``."""
    if n < 1 or len(texts) % n:
        raise ValueError(f"group_texts: {len(texts)} texts do not split into groups of n={n}.")
    return [list(texts[i:i + n]) for i in range(0, len(texts), n)]


def evaluate_sampled(model, tokenizer, dataset, n: int, ks: Sequence[int], temperature: float = 1.0,
                     max_new_tokens: int = 32, seed: int = 0, extractor: str = "tag_or_first_number",
                     batch_size: int = 256, progress: bool = False) -> SampledEvaluation:
    """Sample ``n`` completions per row of ``dataset`` (columns ``prompt``, ``answer``) with Hugging Face
    ``generate``; pass@k and maj@k for ``ks``. With a run's trainer at hand, sample through its engine
    instead (``Trainer.generate(prompts, n, sampling)``, vLLM where the run uses it) and call
    :func:`score_samples`: Hugging Face sampling of a 135M model on a CPU takes minutes per few hundred."""
    if len(dataset) == 0:
        raise ValueError("evaluate_sampled got a dataset with no rows. Fix: evaluate at least one row.")
    if any(not 1 <= k <= n for k in ks):
        raise ValueError(f"every k must lie in [1, n={n}], got ks={list(ks)}. Fix: raise n or drop the larger k.")
    samples = sampled_completions(model, tokenizer, dataset["prompt"], n, temperature, max_new_tokens,
                                  batch_size, seed, progress)
    return score_samples(samples, dataset["answer"], ks, temperature, extractor)
