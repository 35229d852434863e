"""The doctor on the second museum: stored histories of runs its rules were not written on
(this trainer and TRL 1.16's GRPOTrainer, the tiny model and SmolLM2-135M), rebuilt by
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
