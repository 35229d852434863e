"""Greedy evaluation of a policy on a task with a reference ``answer`` column.

A completion is correct by the same rule the correctness rewards use
(:func:`course_lib.rewards.answers.is_correct`): the number inside ``<answer>`` tags when
there are tags, else the first number, compared numerically with the reference. This is
the held-out metric of the course's learning tests and of ``python -m course_lib eval``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def _check_positions(model, prompt_ids: list[list[int]], max_new_tokens: int, lengths_fix: str | None = None) -> None:
    """Refuse what the model cannot read: a prompt (as it will be generated from) plus
    ``max_new_tokens`` beyond its positions (the generation would run past the trained
    positions, or fail inside the model). ``lengths_fix``: the fix to name (the caller's options)."""
    from .rollout.base import ContextLengthError

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least 1 token "
                         f"({fix('--max-new-tokens', 'max_new_tokens')}).")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not limit:
        return
    lengths = [len(ids) for ids in prompt_ids]
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[longest] + max_new_tokens > limit:
        room = limit - lengths[longest]
        if lengths_fix is None:
            # The command line's eval has --max-new-tokens; train sets the same length with --set
            # max_completion_length; from Python it is the max_new_tokens argument.
            lengths_fix = (f"lower {fix('--max-new-tokens (eval) or --set max_completion_length=N (train)', 'max_new_tokens')} "
                           f"to at most {room}" if room >= 1 else
                           "shorten the prompts: the prompt alone fills the model's positions, so no completion length "
                           "fits") + ", or use a model with more positions"
        raise ContextLengthError(f"prompt {longest} has {lengths[longest]} tokens; with "
                                 f"max_new_tokens={max_new_tokens} "
                                 f"it needs {lengths[longest] + max_new_tokens} positions, but the model reads at most "
                                 f"{limit}. Fix: {lengths_fix}.")


def greedy_completions(model, tokenizer, prompts, max_new_tokens: int = 32, batch_size: int = 32,
                       progress: bool | None = None, desc: str = "eval", max_prompt_length: int | None = None,
                       lengths_fix: str | None = None) -> list[str]:
    """Greedy completions (text, special tokens removed).

    Prompts follow TRL's two formats, as in training (``course_lib.rollout.base.tokenize_prompts``):
    a list of chat messages goes through the chat template with the assistant turn opened
    (conversational); a string is tokenized as it is, with no template (standard).

    ``max_prompt_length``: keep each prompt's last that many tokens, as training does.

    ``progress``: show a bar (periodic lines where no bar can be drawn, see
    :mod:`course_lib.progress`); None (default) shows one when there is more than one batch.
    """
    from .rollout.base import tokenize_prompts
    from .rollout.shared_prefix import prefix_shared_inputs

    prompt_ids = tokenize_prompts(tokenizer, list(prompts))
    if max_prompt_length is not None:  # keep each prompt's end (the question), as training does
        prompt_ids = [ids[-max_prompt_length:] for ids in prompt_ids]
    _check_positions(model, prompt_ids, max_new_tokens, lengths_fix)
    completions = []
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    show = len(prompt_ids) > batch_size if progress is None else progress
    with eval_mode(model), progress_bar(total=len(prompt_ids), desc=desc, unit="prompt", disable=not show) as bar:
        for start in range(0, len(prompt_ids), batch_size):
            # the prompts' common beginning (system prompt, worked example) runs once, not once a row
            ids, mask, shared = prefix_shared_inputs(model, prompt_ids[start:start + batch_size], pad_id, device)
            output = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                    do_sample=False, pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id,
                                    **shared)
            new_tokens = output[:, ids.shape[1]:]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            bar.update(len(new_tokens))
    return completions


def check_correct_fn(correct_fn) -> None:
    """Refuse a ``correct_fn`` that cannot be called as ``correct_fn(completion, answer)`` (a reward
    function passed by mistake, for one) before any model runs."""
    import inspect

    if correct_fn is None:
        return
    if not callable(correct_fn):
        raise ValueError(f"correct_fn={correct_fn!r} is not a function. Fix: pass f(completion, answer) -> bool "
                        f"({fix('--correct module:function', 'correct_fn=f')}).")
    try:
        inspect.signature(correct_fn).bind("completion", "answer")
    except TypeError:
        name = getattr(correct_fn, "__name__", repr(correct_fn))
        raise ValueError(f"correct function {name}{inspect.signature(correct_fn)} cannot be called as "
                        f"{name}(completion, answer): the evaluation passes the completion's text and the row's "
                        "answer. Fix: give a function f(completion: str, answer) -> bool (a reward function takes "
                        "(prompts, completions, **columns) instead).") from None
    except ValueError:  # a builtin without a readable signature: tried when called
        pass


def _judge(correct_fn, completion: str, answer, index: int) -> bool:
    if correct_fn is None:
        return bool(is_correct(completion, answer))
    try:
        return bool(correct_fn(completion, answer))
    except Exception as error:
        name = getattr(correct_fn, "__name__", repr(correct_fn))
        raise ValueError(f"correct function {name!r} raised {type(error).__name__}: {error}\n  at row {index}\n  "
                         f"completion: {completion!r}\n  answer: {answer!r}\nFix: make it return True or False for "
                         "every completion, a malformed one included.") from error


def evaluate_accuracy(model, tokenizer, dataset, max_new_tokens: int = 32, batch_size: int = 32,
                      return_completions: bool = False, progress: bool | None = None, correct_fn=None,
                      max_prompt_length: int | None = None, lengths_fix: str | None = None):
    """Fraction of rows whose greedy completion is correct: ``correct_fn(completion, answer) -> bool``,
    by default :func:`is_correct` (the number in ``<answer>`` tags, else the first number).

    Raises ``ValueError`` on an empty dataset: an accuracy of nothing is not 0.0.
    """
    check_correct_fn(correct_fn)
    if len(dataset) == 0:
        raise ValueError("evaluate_accuracy got a dataset with no rows, which has no accuracy. Fix: evaluate at "
                         f"least one row ({fix('--n / --eval-n >= 1', 'a dataset of at least 1 row')}).")
    completions = greedy_completions(model, tokenizer, dataset["prompt"], max_new_tokens, batch_size, progress,
                                     max_prompt_length=max_prompt_length, lengths_fix=lengths_fix)
    if "answer" not in dataset.column_names:
        raise ValueError(f"evaluate_accuracy needs an 'answer' column (columns: {dataset.column_names}). Fix: add "
                         "the reference answers to the rows.")
    correct = [_judge(correct_fn, c, a, i) for i, (c, a) in enumerate(zip(completions, dataset["answer"]))]
    accuracy = sum(correct) / len(correct)
    return (accuracy, completions) if return_completions else accuracy
