"""Scoring the doctor on the stored museums: histories of runs the rules were not written on.

``benchmarks/doctor_museum2_build.py`` trains the runs (this trainer and TRL 1.16's
``GRPOTrainer``, on the tiny model; its SmolLM2-135M runs are too slow for a shared CPU) and
keeps their histories with a ``manifest.json``. Per run the manifest names the rules that name its cause (empty for a
healthy run) and its split: ``seen`` (read while the rules were revised) or ``held_out``
(scored at the end only).

A broken run scores on two counts: the **first finding** of the report (what a person acts
on) names its cause, and its cause is named **somewhere** in the report. A healthy run scores
when no finding of severity warning or error fires (``info`` is allowed: normal behaviour
that looks alarming).

The third museum (:data:`MUSEUM3_DIR`, built by ``benchmarks/doctor_museum3_build.py``) has
the same manifest and is scored by the same functions: ``score("all", MUSEUM3_DIR)``.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Where the builder keeps the histories (beside the benchmark that builds them).
MUSEUM2_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "doctor_museum2"
#: The third museum (``benchmarks/doctor_museum3_build.py``): runs trained and labelled before a
#: later revision of the rules, all ``held_out``; scored by the same functions with this folder.
MUSEUM3_DIR = MUSEUM2_DIR.parent / "doctor_museum3"


def load_manifest(folder: Path = MUSEUM2_DIR) -> dict[str, dict]:
    """name -> the run's entry (``file``, ``trainer``, ``model``, ``broken``, ``causes``, ``split``, ``story``)."""
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def score_run(entry: dict, folder: Path = MUSEUM2_DIR) -> dict:
    """The doctor's report on one stored run and whether it is right.

    Returns ``{"findings", "first", "first_right", "somewhere", "quiet"}``: ``first_right`` and
    ``somewhere`` for a broken run, ``quiet`` (no warning or error) for a healthy one.
    """
    from .report import diagnose_run, load_run

    rows, config, _ = load_run(folder / entry["file"])
    findings = diagnose_run(rows, config)
    names = [f.rule for f in findings]
    causes = set(entry["causes"])
    loud = [f.rule for f in findings if f.severity != "info"]
    return {"findings": [(f.severity, f.rule) for f in findings], "first": loud[0] if loud else None,
            "first_right": bool(loud) and loud[0] in causes, "somewhere": bool(causes & set(names)),
            "quiet": not loud}


def score(split: str = "all", folder: Path = MUSEUM2_DIR) -> tuple[dict[str, dict], str]:
    """Every run of ``split`` (``seen``, ``held_out`` or ``all``) scored, and a printable table."""
    manifest = load_manifest(folder)
    results, lines = {}, []
    for name, entry in manifest.items():
        if split != "all" and entry["split"] != split:
            continue
        result = results[name] = score_run(entry, folder)
        if entry["broken"]:
            verdict = ("first right" if result["first_right"] else
                       "named below" if result["somewhere"] else "MISSED")
        else:
            verdict = "quiet" if result["quiet"] else "FALSE ALARM"
        shown = ", ".join(f"{s[0].upper()}:{r}" for s, r in result["findings"]) or "-"
        lines.append(f"{name:26s} {entry['split']:8s} {entry['trainer']:9s} {verdict:12s} {shown}")
    broken = [n for n in results if manifest[n]["broken"]]
    healthy = [n for n in results if not manifest[n]["broken"]]
    lines.append(
        f"\nbroken runs: first finding right on {sum(results[n]['first_right'] for n in broken)} of {len(broken)}, "
        f"cause named somewhere on {sum(results[n]['somewhere'] for n in broken)} of {len(broken)}; "
        f"healthy runs with no warning or error: {sum(results[n]['quiet'] for n in healthy)} of {len(healthy)}")
    return results, "\n".join(lines)
