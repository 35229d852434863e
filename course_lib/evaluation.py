"""Greedy evaluation of a policy on a task with a reference ``answer`` column.

A completion is correct by the same rule the correctness rewards use
(:func:`course_lib.rewards.answers.is_correct`): the number inside ``<answer>`` tags when
there are tags, else the first number, compared numerically with the reference. This is
the held-out metric of the course's learning tests and of ``python -m course_lib eval``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .models import eval_mode
from .progress import progress_bar
from .common.wording import fix
from .rewards.answers import is_correct
from .sampled_evaluation import (  # pass@k, maj@k and sampled accuracy live beside greedy evaluation
    SampledEvaluation,
    evaluate_sampled,
    group_texts,
    maj_at_k,
    majority_answer,
    mean_pass_at_k,
    pass_at_k,
    sampled_completions,
    score_samples,
)

__all__ = ["evaluate_accuracy", "greedy_completions", "is_correct", "lift_interval", "wilson_interval",
           "format_accuracy", "pass_at_k", "mean_pass_at_k", "majority_answer", "maj_at_k", "sampled_completions",
           "SampledEvaluation", "score_samples", "group_texts", "evaluate_sampled"]

# Two-sided 95% normal quantile.
Z95 = 1.959963984540054


def wilson_interval(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion ``correct / total`` (Wilson, 1927).

    Unlike the normal ("Wald") interval it stays inside [0, 1] and is not empty at 0 or
    ``total`` successes, which matters for small evaluation sets: 0/20 correct still
    leaves an upper bound of 16%. Returns ``(low, high)``.
    """
    if total <= 0:
        raise ValueError(f"wilson_interval needs total >= 1, got total={total}.")
    if not 0 <= correct <= total:
        raise ValueError(f"wilson_interval needs 0 <= correct <= total, got correct={correct}, total={total}.")
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z / (1 + z * z / total) * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def lift_interval(before: Sequence[bool], after: Sequence[bool], z: float = Z95) -> tuple[float, float, float]:
    """Accuracy lift ``mean(after) - mean(before)`` on the *same* problems, with a paired interval.

    Pairing removes the problem-to-problem difficulty that two independent intervals would
    count twice: the interval is ``d̄ ± z·s_d/√n`` over the per-problem differences
    ``d_i = after_i - before_i`` (normal approximation; ``s_d`` with ``n - 1``). A lift whose
    interval excludes 0 is larger than its noise. Returns ``(lift, low, high)``.
    """
    if len(before) != len(after):
        raise ValueError(f"lift_interval needs the same problems before and after, got {len(before)} and {len(after)}.")
    n = len(before)
    if n < 2:
        raise ValueError(f"lift_interval needs at least 2 problems, got {n}.")
    diffs = [float(a) - float(b) for b, a in zip(before, after)]
    mean = sum(diffs) / n
    spread = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = z * spread / math.sqrt(n)
    return mean, mean - half, mean + half


def format_accuracy(correct: int, total: int) -> str:
    """``"53.5% [46.6, 60.3] (107/200)"``: the accuracy with its 95% Wilson interval."""
    low, high = wilson_interval(correct, total)
    return f"{100 * correct / total:.1f}% [{100 * low:.1f}, {100 * high:.1f}] ({correct}/{total})"


@torch.no_grad()
def _check_positions(model, tokenizer, texts: list[str], max_new_tokens: int) -> None:
    """Refuse what the model cannot read: a prompt plus ``max_new_tokens`` beyond its positions
    (the generation would run past the trained positions, or fail inside the model)."""
    from .rollout.base import ContextLengthError

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least 1 token "
                         f"({fix('--max-new-tokens', 'max_new_tokens')}).")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not limit:
        return
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[longest] + max_new_tokens > limit:
        raise ContextLengthError(f"prompt {longest} has {lengths[longest]} tokens; with "
                                 f"max_new_tokens={max_new_tokens} "
                                 f"it needs {lengths[longest] + max_new_tokens} positions, but the model reads at most "
                                 f"{limit}. Fix: lower {fix('--max-new-tokens', 'max_new_tokens')}, or evaluate shorter "
                                 "prompts.")


def greedy_completions(model, tokenizer, prompts, max_new_tokens: int = 32, batch_size: int = 32,
                       progress: bool | None = None, desc: str = "eval") -> list[str]:
    """Greedy completions (text, special tokens removed) for conversational prompts.

    ``progress``: show a bar (periodic lines where no bar can be drawn, see
    :mod:`course_lib.progress`); None (default) shows one when there is more than one batch.
    """
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    _check_positions(model, tokenizer, texts, max_new_tokens)
    completions = []
    device = next(model.parameters()).device
    show = len(texts) > batch_size if progress is None else progress
    with eval_mode(model), progress_bar(total=len(texts), desc=desc, unit="prompt", disable=not show) as bar:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                              add_special_tokens=False).to(device)
            output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            new_tokens = output[:, batch["input_ids"].shape[1]:]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            bar.update(len(new_tokens))
    return completions


def evaluate_accuracy(model, tokenizer, dataset, max_new_tokens: int = 32, batch_size: int = 32,
                      return_completions: bool = False, progress: bool | None = None, correct_fn=None):
    """Fraction of rows whose greedy completion is correct: ``correct_fn(completion, answer) -> bool``,
    by default :func:`is_correct` (the number in ``<answer>`` tags, else the first number).

    Raises ``ValueError`` on an empty dataset: an accuracy of nothing is not 0.0.
    """
    if len(dataset) == 0:
        raise ValueError("evaluate_accuracy got a dataset with no rows, which has no accuracy. Fix: evaluate at "
                         f"least one row ({fix('--n / --eval-n >= 1', 'a dataset of at least 1 row')}).")
    completions = greedy_completions(model, tokenizer, dataset["prompt"], max_new_tokens, batch_size, progress)
    if "answer" not in dataset.column_names:
        raise ValueError(f"evaluate_accuracy needs an 'answer' column (columns: {dataset.column_names}). Fix: add "
                         "the reference answers to the rows.")
    check = correct_fn or is_correct
    correct = [bool(check(c, a)) for c, a in zip(completions, dataset["answer"])]
    accuracy = sum(correct) / len(correct)
    return (accuracy, completions) if return_completions else accuracy
