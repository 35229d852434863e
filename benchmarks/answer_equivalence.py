"""The course's answer rule against ``math-verify`` on real GSM8K answers, printing where they disagree.

For each of the first ``--n`` GSM8K test problems (``../shared/data/gsm8k/test.jsonl`` or
``--data``), the reference is the number after ``####`` and these candidate answers are graded:

- ``last_line``: the solution's own last sentence, calculator notes ``<<...>>`` removed
  (real text: "So he made a profit of 200,000-130,000=$70,000"), read by the course's
  last-number rule and by ``math-verify``'s own extraction from the sentence;
- the reference written other ways, as a model might put it in its ``<answer>`` tag:
  ``commas`` (``$1,080``), ``decimal`` (``1080.00``), ``boxed`` (``\\boxed{1080}``),
  ``fraction`` (``\\frac{2160}{2}``), ``units`` (``1080 dollars``), ``sentence`` (``The answer is 1080.``);
- three wrong answers: ``off_by_one`` (reference + 1), ``near`` (reference + 1e-7, a rounding
  slip that is wrong for GSM8K's whole-number answers) and ``hedge`` (``1081 or 1080``: two
  answers offered, the last one right).

The course's rule is ``same_answer`` on the tag's content (``last_number`` for the
sentence); ``math-verify`` is ``parse`` then ``verify``. A row is printed for every
disagreement, then a table of agreement per kind.

    OMP_NUM_THREADS=1 python benchmarks/answer_equivalence.py            # 300 problems
    OMP_NUM_THREADS=1 python benchmarks/answer_equivalence.py --n 50 --show 5
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

from course_lib.rewards.equivalence import equivalent, math_verify_equal
from course_lib.rewards.extract import extract_last_number, normalize_number, same_answer

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def candidates(solution: str) -> tuple[str, dict[str, tuple[str, bool]]]:
    """``(reference, {kind: (candidate answer, is it right)})`` for one GSM8K solution."""
    body, _, final = solution.rpartition("####")
    reference = final.strip().replace(",", "")
    value = int(reference) if re.fullmatch(r"-?\d+", reference) else None
    last_line = re.sub(r"<<[^>]*>>", "", body.strip().splitlines()[-1]).strip()
    kinds = {"last_line": (last_line, True), "boxed": (f"\\boxed{{{reference}}}", True),
             "units": (f"{reference} dollars", True), "decimal": (f"{reference}.00", True)}
    if value is not None:
        kinds.update({
            "commas": (f"${value:,}", True),
            "fraction": (f"\\frac{{{2 * value}}}{{2}}", True),
            "sentence": (f"The answer is {value}.", True),
            "hedge": (f"{value + 1} or {value}", False),
            "off_by_one": (str(value + 1), False),
            "near": (f"{value + 1e-7:.7f}", False),
        })
    return reference, kinds


def course_rule(kind: str, candidate: str, reference: str) -> bool:
    """The shipped verifier: last number of a sentence; the tag rule (normalized number) for a bare answer."""
    if kind == "last_line":
        return same_answer(extract_last_number(candidate), reference)
    return same_answer(normalize_number(candidate) or candidate, reference)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--show", type=int, default=40, help="disagreements printed at most")
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"{args.data} not found. Fix: --data <GSM8K test.jsonl> (the shared data folder beside "
                         "the project has one).")
    rows = [json.loads(line) for line in args.data.read_text().splitlines()[:args.n]]
    counts: dict[str, Counter] = defaultdict(Counter)
    disagreements = []
    start = time.perf_counter()
    for i, row in enumerate(rows):
        reference, kinds = candidates(row["answer"])
        for kind, (candidate, right) in kinds.items():
            ours, theirs = course_rule(kind, candidate, reference), math_verify_equal(candidate, reference)
            combined, rule = equivalent(extract_last_number(candidate) if kind == "last_line" else candidate,
                                        reference)
            c = counts[kind]
            c["n"] += 1
            c["course right"] += ours == right
            c["math-verify right"] += theirs == right
            c["combined right"] += combined == right
            if ours != theirs:
                c["disagree"] += 1
                disagreements.append((i, kind, candidate, reference, right, ours, theirs, rule))
    seconds = time.perf_counter() - start
    print(f"{len(disagreements)} disagreements on {sum(c['n'] for c in counts.values())} answers "
          f"({len(rows)} GSM8K test problems), {seconds:.1f} s")
    for i, kind, candidate, reference, right, ours, theirs, rule in disagreements[:args.show]:
        print(f"  #{i:<4} {kind:<10} {candidate[:60]!r:<64} ref {reference:>8}  truth {right!s:<5} "
              f"course {ours!s:<5} math-verify {theirs!s:<5} (combined uses {rule})")
    print(f"\n{'kind':<11} {'n':>4} {'course right':>13} {'math-verify right':>18} {'combined right':>15} "
          f"{'disagree':>9}")
    for kind, c in counts.items():
        print(f"{kind:<11} {c['n']:>4} {c['course right']:>13} {c['math-verify right']:>18} "
              f"{c['combined right']:>15} {c['disagree']:>9}")


if __name__ == "__main__":
    main()
