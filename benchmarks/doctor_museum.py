"""The failure museum's confusion matrix: which doctor rule fires on which run.

Trains every museum run (``course_lib.museum.EXHIBITS``: the tiny model, made to fail
one way each, plus the healthy preset runs of GRPO, RLOO and PPO), runs the doctor over each
history as it would live, and prints a rules x runs table (E/W/I = the severity of a rule
that fired; '.' = silent) with each run's seconds.

    OMP_NUM_THREADS=1 python benchmarks/doctor_museum.py --museum1 [--runs name ...] [--output-dir DIR]

The second museum (runs of this trainer and of TRL's GRPOTrainer the rules were not written
on, stored by ``benchmarks/doctor_museum2_build.py``) is scored from its histories in seconds:
first finding right and cause named somewhere on the broken runs, no warning or error on the
healthy ones, per split (``seen`` while the rules were revised, ``held_out`` at the end). The
third museum (``benchmarks/doctor_museum3_build.py``: runs trained and labelled before the rules'
next revision, all held out) is scored the same way:

    python benchmarks/doctor_museum.py --museum2 [--split seen|held_out|all]
    python benchmarks/doctor_museum.py --museum3

With none of ``--museum1/2/3`` it prints all three: the two stored museums (seconds), then the
first one (trained: minutes).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from course_lib.doctor import RULES
from course_lib.museum import EXHIBITS, confusion, run_exhibit
from course_lib.doctor.report import first_firing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=list(EXHIBITS), choices=list(EXHIBITS))
    parser.add_argument("--output-dir", default=None, help="keep the run folders here (default: a temp folder)")
    parser.add_argument("--museum1", action="store_true", help="train and score the first museum only")
    parser.add_argument("--museum2", action="store_true", help="score the stored second museum only")
    parser.add_argument("--museum3", action="store_true", help="score the stored third museum only")
    parser.add_argument("--split", default="all", choices=["seen", "held_out", "all"])
    args = parser.parse_args()
    everything = not (args.museum1 or args.museum2 or args.museum3)
    if args.museum2 or everything:
        from course_lib.doctor.museum2 import score

        for split in (["seen", "held_out", "all"] if args.split == "all" else [args.split]):
            print(f"--- second museum, {split} runs")
            print(score(split)[1] + "\n", flush=True)
    if args.museum3 or everything:
        from course_lib.doctor.museum2 import MUSEUM3_DIR, score

        print("--- third museum (all held out)")
        print(score("all", MUSEUM3_DIR)[1] + "\n", flush=True)
    if not (args.museum1 or everything):
        return
    print("--- first museum (trained now)", flush=True)
    scratch = None if args.output_dir else tempfile.TemporaryDirectory(prefix="museum-")  # goes at the end
    root = Path(args.output_dir or scratch.name)
    results = {}
    for name in args.runs:
        started = time.time()
        rows, config = run_exhibit(name, root / name)
        results[name] = first_firing(rows, config.to_dict())
        expected = set(EXHIBITS[name].expect)
        fired = {f.rule for f in results[name]}
        verdict = ("ok" if expected <= fired else f"MISSING {sorted(expected - fired)}") if expected else (
            "ok" if all(f.severity == "info" for f in results[name]) else "FALSE ALARM")
        print(f"{name:20s} {time.time() - started:6.1f} s  {len(rows):4d} steps  {verdict}", flush=True)
    print()
    print(confusion(results, list(RULES)))
    print(f"\nrun folders: {root}")


if __name__ == "__main__":
    main()
