"""A pre-flight probe: score degenerate completions beside a correct one, before any training step.

A policy finds the cheapest completion its reward pays for. Many reward bugs are visible
without training: write the cheap completions yourself and score them. For a few prompts of
the task, :func:`probe_rewards` scores one **correct reference** completion (the answer in the
layout the prompt asks for, with a line of reasoning) and these **degenerate** ones:

==========================  ===============================================================
case                        completion
==========================  ===============================================================
``empty``                   ``""``
``whitespace``              spaces, a tab and newlines
``empty_answer_tag``        the prompt's layout with nothing inside the answer tag
``prompt_numbers``          every number of the prompt, in order
``prompt_repeated``         the question, copied back
``very_long``               about 4,000 characters of filler, no answer
``number_spray``            every integer from 0 to 999 ("let me count"), a long list of guesses
``huge_number``             ``"99999999"``: a number far outside any plausible answer
``format_no_reasoning``     the layout with the right answer and no reasoning at all
``right_answer_wrong_form`` the right answer, outside the layout the prompt asks for
``i_dont_know``             ``"I don't know."``
``wrong_answer``            the reference with a wrong answer (the right one plus 1): layout and reasoning, no truth
==========================  ===============================================================

A degenerate case that scores **at least as well as the reference** (weighted total, as
the trainer adds the functions) is *flagged*. A flagged case without the right answer
in it is a reward hack waiting for a policy to find it; a flagged case that holds the right
answer (the last two) says what the reward does not ask for (reasoning, the layout), which
may be what you intend. A case identical to the reference (``format_no_reasoning`` on a
task whose answer is a bare number) is left out.

``python -m course_lib probe-rewards --task arithmetic --rewards correctness_first_number_reward``
prints the same table for a task and reward functions by name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .combine import compute_rewards, reward_function_name
from .extract import completion_text, completions_like, extract_hash_answer

__all__ = ["DEGENERATE_CASES", "ANSWER_FREE_CASES", "ProbeReport", "degenerate_completions", "probe_rewards",
           "reference_completion"]

#: The degenerate cases, in the order of the table.
DEGENERATE_CASES = ("empty", "whitespace", "empty_answer_tag", "prompt_numbers", "prompt_repeated", "very_long",
                    "number_spray", "huge_number", "format_no_reasoning", "right_answer_wrong_form", "i_dont_know", "wrong_answer")
#: Cases written without the right answer (``number_spray`` lists it among a thousand guesses and
#: ``prompt_numbers`` may hold it by chance: both count as answer-free, a verifier must not pay them).
ANSWER_FREE_CASES = ("empty", "whitespace", "empty_answer_tag", "prompt_numbers", "prompt_repeated", "very_long",
                     "number_spray", "huge_number", "i_dont_know", "wrong_answer")

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _prompt_text(prompt: Any) -> str:
    """The whole prompt as text: a string, or the contents of its chat messages."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt)


def _question(prompt: Any) -> str:
    """The last user turn (the question itself, without the instruction or the worked example)."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return str((users or list(prompt))[-1].get("content", ""))


def _layout(prompt: Any) -> str:
    """Which answer layout the prompt asks for: ``"gsm8k"`` (reasoning/answer XML), ``"tagged"`` or ``"bare"``."""
    text = _prompt_text(prompt)
    if "<reasoning>" in text:
        return "gsm8k"
    if "<answer>" in text:
        return "tagged"
    return "bare"


def _write(layout: str, answer: str, reasoning: str) -> str:
    if layout == "gsm8k":
        return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>\n"
    if layout == "tagged":
        return f"{reasoning} <answer>{answer}</answer>".strip()
    return f"{reasoning} {answer}".strip() if reasoning else answer


def reference_completion(prompt: Any, answer: Any) -> str:
    """A correct completion in the layout the prompt asks for, with a line of reasoning.

    For a prompt without tags the reference is the bare answer (what the course's
    arithmetic task and the tiny model write)."""
    answer = _final(answer)
    layout = _layout(prompt)
    if layout == "bare":
        return answer
    return _write(layout, answer, f"Working through the question step by step, the result is {answer}.")


def _final(answer: Any) -> str:
    text = str(answer)
    return (extract_hash_answer(text) or text) if "####" in text else text.strip()


def _wrong(answer: str) -> str:
    """A wrong answer of the same shape: the number plus one, else the text with "not " before it."""
    from .extract import normalize_number, parse_number

    number = parse_number(answer)
    return normalize_number(number + 1) if number is not None else f"not {answer}"


def degenerate_completions(prompt: Any, answer: Any) -> dict[str, str]:
    """The degenerate completions of one prompt, by case (see the module docstring)."""
    answer, layout, question = _final(answer), _layout(prompt), _question(prompt)
    filler = "Let me think about this carefully. " * 115
    cases = {
        "empty": "",
        "whitespace": "  \n\t \n",
        "empty_answer_tag": _write(layout, "", "") if layout != "bare" else "<answer></answer>",
        "prompt_numbers": " ".join(_NUMBER.findall(question)),
        "prompt_repeated": question,
        "very_long": filler.strip(),
        "number_spray": "Let me count: " + ", ".join(str(i) for i in range(1000)) + ".",
        "huge_number": _write(layout, "99999999", "") if layout != "bare" else "99999999",
        "format_no_reasoning": _write(layout, answer, ""),
        "right_answer_wrong_form": (f"The answer is {answer}." if layout != "bare" else f"<answer>{answer}</answer>"),
        "i_dont_know": "I don't know.",
        "wrong_answer": reference_completion(prompt, _wrong(answer)),
    }
    return cases


@dataclass
class ProbeReport:
    """What :func:`probe_rewards` measured.

    ``scores[case]``: one weighted total per probed prompt (NaN where every function returned
    None); ``per_function[case][name]``: the per-function scores, same order. ``flagged``:
    the cases that scored at least the reference's total on at least one prompt.
    """

    names: list[str]
    scores: dict[str, list[float]]
    per_function: dict[str, dict[str, list[float | None]]]
    completions: dict[str, list[str]] = field(default_factory=dict)

    @property
    def flagged(self) -> list[str]:
        reference = self.scores["reference"]
        return [case for case in self.scores if case != "reference"
                and any(_ge(s, r) for s, r in zip(self.scores[case], reference))]

    @property
    def hacks(self) -> list[str]:
        """Flagged cases that do not carry the right answer: what a policy can be paid for without solving."""
        return [case for case in self.flagged if case in ANSWER_FREE_CASES]

    def table(self) -> str:
        """One line per case: mean total, ties-or-beats count, and the flag."""
        reference = self.scores["reference"]
        lines = [f"{'case':<24} {'mean total':>10} {'>= reference':>13}  "
                 + "  ".join(f"{n[:18]:>18}" for n in self.names)]
        for case, totals in self.scores.items():
            beats = sum(_ge(s, r) for s, r in zip(totals, reference))
            flag = ("" if case == "reference" else "FLAG (no answer in it)" if case in self.hacks
                    else "flag" if case in self.flagged else "")
            means = [_mean(self.per_function[case][n]) for n in self.names]
            shown_beats = "" if case == "reference" else f"{beats}/{len(totals)}"
            lines.append(f"{case:<24} {_mean(totals):>10.3f} {shown_beats:>13}  "
                         + "  ".join(f"{m:>18.3f}" for m in means) + f"  {flag}")
        return "\n".join(lines)


def _ge(score: float, reference: float) -> bool:
    """``score >= reference``, where an unscored (NaN) reference is beaten by any score."""
    if math.isnan(score):
        return False
    return math.isnan(reference) or score >= reference - 1e-9


def _mean(xs: Sequence[float | None]) -> float:
    finite = [float(x) for x in xs if x is not None and not math.isnan(float(x))]
    return sum(finite) / len(finite) if finite else math.nan


def probe_rewards(reward_funcs: Sequence[Callable] | Callable, rows: Any, *, n_prompts: int = 3,
                  weights: Sequence[float] | None = None,
                  reference_fn: Callable[[Any, Any], str] = reference_completion) -> ProbeReport:
    """Score the degenerate completions of :func:`degenerate_completions` beside a correct one.

    Args:
        reward_funcs: functions with TRL's signature (or one).
        rows: a dataset (or list of dicts) with ``prompt``, ``answer`` and whatever columns the
            rewards read; its first ``n_prompts`` rows are probed.
        weights: ``reward_weights`` (default: 1 each), as the trainer combines them.
        reference_fn: ``(prompt, answer) -> completion``, the correct completion to compare with.

    Returns:
        A :class:`ProbeReport`; ``report.flagged`` lists the cases that tie or beat the reference.
    """
    funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
    if not funcs:
        raise ValueError("probe_rewards needs at least one reward function.")
    if n_prompts < 1:
        raise ValueError(f"n_prompts={n_prompts}: probe at least one prompt.")
    records = [dict(r) for r in (rows.select(range(min(n_prompts, len(rows)))) if hasattr(rows, "select")
                                 else list(rows)[:n_prompts])]
    if not records:
        raise ValueError("probe_rewards got no rows: give the task's dataset (rows with 'prompt' and 'answer').")
    for column in ("prompt", "answer"):
        if column not in records[0]:
            raise ValueError(f"probe_rewards needs a {column!r} column to write the reference completion; the rows "
                             f"have {sorted(records[0])}. Fix: pass reference_fn= and rows with a prompt.")
    names = [reward_function_name(f) for f in funcs]
    texts_by_case: dict[str, list[str]] = {"reference": []}
    for record in records:
        reference = reference_fn(record["prompt"], record["answer"])
        texts_by_case["reference"].append(reference)
        for case, text in degenerate_completions(record["prompt"], record["answer"]).items():
            texts_by_case.setdefault(case, []).append(text)
    # A case that is the reference itself on every prompt says nothing: leave it out.
    for case in list(texts_by_case):
        if case != "reference" and texts_by_case[case] == texts_by_case["reference"]:
            del texts_by_case[case]
    cases = list(texts_by_case)
    prompts = [r["prompt"] for _ in cases for r in records]
    texts = [t for case in cases for t in texts_by_case[case]]
    columns = {k: [r[k] for _ in cases for r in records] for k in records[0] if k != "prompt"}
    per_func, total = compute_rewards(funcs, prompts, completions_like(prompts, texts), columns, weights)
    n = len(records)
    scores, per_function = {}, {}
    for c, case in enumerate(cases):
        rows_of_case = slice(c * n, (c + 1) * n)
        scores[case] = [float(x) for x in total[rows_of_case].tolist()]
        per_function[case] = {name: [None if math.isnan(v) else float(v) for v in per_func[rows_of_case, f].tolist()]
                              for f, name in enumerate(names)}
    return ProbeReport(names, scores, per_function, texts_by_case)


def completion_of(report: ProbeReport, case: str, prompt_index: int = 0) -> str:
    """The text probed for ``case`` on prompt ``prompt_index`` (for showing a flagged case)."""
    return completion_text(report.completions[case][prompt_index])
