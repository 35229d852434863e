"""The rows SFT and DPO read from the dataset instead of sampling: their checks and tokens.

The trainer's micro-steps read a ``GenerationBatch`` (prompt-major rows: left-padded prompt,
right-padded completion, its loss mask); RL fills it by sampling and scoring
(``Algorithm.batches="sampled"``, the default). Here the completions are the dataset's own:

- :func:`check_sft_rows` / :func:`check_pair_rows`: the dataset's columns, checked once when
  the trainer is built (an empty completion, a pair whose chosen equals its rejected);
- :func:`completion_tokens`: a completion's tokens, the end-of-turn token appended (what the
  policy must learn to write, as TRL appends ``eos_token``);

The batches themselves (rows of prompt and completion into a ``GenerationBatch``, DPO's
reference log-probs from the reference pass) are built on the loop's floor by the batch
generators of :mod:`course_lib.run.dataset_batches` (``Algorithm.batches="sft"`` / ``"pairs"``).
"""

from __future__ import annotations


def refuse_sampling_options(config) -> None:
    """Refuse the options of a sampling loop on a run that reads its rows from the dataset (SFT, DPO)."""
    from course_lib.config import fail

    for name, why in (("async_generation", "there is no sampling to run ahead of the trainer"),
                      ("dynamic_sampling", "there are no sampled groups to refill")):
        if getattr(config, name):
            fail(name, True, f"does nothing for {config.algo}, which reads its rows from the dataset: {why}",
                 f"leave {name}=False")


def _text(completion) -> str:
    """A completion as text: a string, or the content of a conversation's assistant message(s)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        return "".join(str(m.get("content") or "") for m in completion)
    raise TypeError(f"a completion is a string or a list of messages, not {type(completion).__name__}")


def check_sft_rows(dataset, assistant_only_loss: bool = False) -> None:
    """Refuse an SFT dataset without a ``completion`` (or ``messages``) column or with an empty completion,
    and ``assistant_only_loss`` on rows that are not conversations (as TRL does)."""
    from .conversations import check_conversations

    if "completion" not in dataset.column_names and "messages" in dataset.column_names:
        check_conversations(dataset["messages"])
        return
    if "completion" not in dataset.column_names:
        raise ValueError(f"train_dataset has no 'completion' column (columns: {dataset.column_names}); SFT learns "
                         "the completion of each prompt. Fix: rows of {'prompt': ..., 'completion': ...}, or of "
                         "{'messages': [...]} (whole conversations).")
    if assistant_only_loss and not all(isinstance(p, list) for p in dataset["prompt"]):
        raise ValueError("assistant_only_loss=True needs conversations (TRL refuses it on text rows too): a "
                         "'messages' column, or prompts that are lists of messages. Fix: leave "
                         "assistant_only_loss=False (completion_only_loss already trains only the completion).")
    for row, completion in enumerate(dataset["completion"]):
        if not _text(completion).strip():
            raise ValueError(f"train_dataset row {row}: the completion is empty, so there is nothing to learn. "
                             "Fix: drop rows with empty completions.")


def check_pair_rows(dataset) -> None:
    """Refuse a DPO dataset without ``chosen`` / ``rejected``, with an empty one, or with chosen == rejected."""
    missing = [name for name in ("chosen", "rejected") if name not in dataset.column_names]
    if missing:
        raise ValueError(f"train_dataset has no {missing} column(s) (columns: {dataset.column_names}); DPO learns "
                         "from pairs. Fix: rows of {'prompt': ..., 'chosen': ..., 'rejected': ...}.")
    for row, (chosen, rejected) in enumerate(zip(dataset["chosen"], dataset["rejected"])):
        chosen, rejected = _text(chosen), _text(rejected)
        if not chosen.strip() or not rejected.strip():
            raise ValueError(f"train_dataset row {row}: an empty {'chosen' if not chosen.strip() else 'rejected'} "
                             "completion. Fix: drop the pair.")
        if chosen == rejected:
            raise ValueError(f"train_dataset row {row}: chosen and rejected are the same text ({chosen[:40]!r}); "
                             "the pair prefers nothing and its loss has zero gradient. Fix: drop the pair.")


def completion_tokens(tokenizer, completion) -> list[int]:
    """The completion's tokens plus the end-of-turn (eos) token, no other special tokens."""
    ids = tokenizer(_text(completion), add_special_tokens=False)["input_ids"]
    return list(ids) + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
