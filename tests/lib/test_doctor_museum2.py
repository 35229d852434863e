"""The doctor on the second museum: stored histories of runs its rules were not written on
(this trainer and TRL 1.16's GRPOTrainer, on the tiny model), rebuilt by
``benchmarks/doctor_museum2_build.py`` and scored by ``benchmarks/doctor_museum.py --museum2``.

Each broken run names the rules that name its cause (``causes``, fixed before the rules were
revised); a healthy run must get no warning and no error. Runs of the ``seen`` split were read
while the rules were revised; the ``held_out`` ones were scored once, at the end.
"""

import json

import pytest

from course_lib.doctor.museum2 import MUSEUM2_DIR, load_manifest, score, score_run

MANIFEST = load_manifest()


def test_the_museum_holds_both_trainers_both_splits_and_enough_runs():
    broken = [n for n, e in MANIFEST.items() if e["broken"]]
    healthy = [n for n, e in MANIFEST.items() if not e["broken"]]
    assert len(broken) >= 15 and len(healthy) >= 8
    assert {e["trainer"] for e in MANIFEST.values()} >= {"course", "trl"}
    assert {e["split"] for e in MANIFEST.values()} == {"seen", "held_out"}
    for name, entry in MANIFEST.items():
        path = MUSEUM2_DIR / entry["file"]
        assert path.stat().st_size < 1_000_000, name  # histories only, small
        if path.name == "trainer_state.json":
            assert json.loads(path.read_text())["log_history"], name


@pytest.mark.parametrize("name", [n for n, e in MANIFEST.items() if e["split"] == "seen"])
def test_each_seen_run(name):
    entry, result = MANIFEST[name], score_run(MANIFEST[name])
    if entry["broken"]:
        assert result["first_right"], f"{name}: first finding {result['first']}, causes {entry['causes']}"
    else:
        assert result["quiet"], f"{name}: {result['findings']}"


def test_the_scores_printed_by_the_benchmark():
    """The whole museum, as ``benchmarks/doctor_museum.py --museum2`` prints it. The held-out
    runs miss where their logs are too short for the rule that names their cause (a TRL log
    of 3 rows at logging_steps=10), and one healthy TRL run gets a zero_spread_groups warning:
    these are the numbers the benchmark README reports, not a target met."""
    results, text = score("all")
    broken = [n for n, e in MANIFEST.items() if e["broken"]]
    healthy = [n for n, e in MANIFEST.items() if not e["broken"]]
    first = sum(results[n]["first_right"] for n in broken)
    somewhere = sum(results[n]["somewhere"] for n in broken)
    quiet = sum(results[n]["quiet"] for n in healthy)
    assert f"first finding right on {first} of {len(broken)}" in text
    # Never worse than measured at the end of the revision (13, 15 and 8 of 17, 17 and 9).
    assert first >= 13 and somewhere >= 15 and quiet >= 8, text
