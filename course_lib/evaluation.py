"""Greedy evaluation of a policy on a task with a reference ``answer`` column.

A completion is correct by the same rule the correctness rewards use
(:func:`course_lib.rewards.answers.is_correct`): the number inside ``<answer>`` tags when
there are tags, else the first number, compared numerically with the reference. This is
the held-out metric of the course's learning tests and of ``python -m course_lib eval``.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from .rewards.answers import is_correct

__all__ = ["evaluate_accuracy", "greedy_completions", "is_correct"]


@torch.no_grad()
def greedy_completions(model, tokenizer, prompts, max_new_tokens: int = 32, batch_size: int = 32,
                       progress: bool = False) -> list[str]:
    """Greedy completions (text, special tokens removed) for conversational prompts."""
    model.eval()
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    completions = []
    device = next(model.parameters()).device
    for start in tqdm(range(0, len(texts), batch_size), desc="eval", disable=not progress):
        batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False).to(device)
        output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        new_tokens = output[:, batch["input_ids"].shape[1]:]
        completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    return completions


def evaluate_accuracy(model, tokenizer, dataset, max_new_tokens: int = 32, batch_size: int = 32,
                      return_completions: bool = False, progress: bool = False):
    """Fraction of rows whose greedy completion is correct (see :func:`is_correct`).

    Raises ``ValueError`` on an empty dataset: an accuracy of nothing is not 0.0.
    """
    if len(dataset) == 0:
        raise ValueError("evaluate_accuracy got a dataset with no rows, which has no accuracy. Fix: evaluate at "
                         "least one row (--n / --eval-n >= 1).")
    completions = greedy_completions(model, tokenizer, dataset["prompt"], max_new_tokens, batch_size, progress)
    correct = [is_correct(c, a) for c, a in zip(completions, dataset["answer"])]
    accuracy = sum(correct) / len(correct)
    return (accuracy, completions) if return_completions else accuracy
