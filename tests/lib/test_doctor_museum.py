"""The failure museum: each run made to fail one way makes the doctor name that failure, and
the healthy presets (GRPO, RLOO) and PPO on GRPO's settings fire nothing above "info".

Runs are trained once per session (tiny model, one CPU thread) and shared by the tests.
The healthy GRPO and RLOO presets are checked where they already train, in
``tests/lib/test_learning.py``; ``benchmarks/doctor_museum.py`` prints the confusion matrix
of rules x runs.
"""

import pytest

from course_lib.doctor import RULES
from course_lib.museum import EXHIBITS, run_exhibit
from course_lib.doctor.report import first_firing

SLOW = {"length_paid", "long_rollouts"}  # 60 steps, 80-token completions

_RESULTS: dict[str, tuple] = {}


@pytest.fixture(scope="module")
def museum(tmp_path_factory):
    def run(name):
        if name not in _RESULTS:
            folder = tmp_path_factory.mktemp(name)
            rows, config = run_exhibit(name, folder)
            _RESULTS[name] = (rows, config, first_firing(rows, config.to_dict()), folder)
        return _RESULTS[name]

    return run


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("name", _params([n for n, e in EXHIBITS.items() if e.expect]))
def test_each_broken_run_triggers_its_rule(museum, name):
    rows, config, findings, _ = museum(name)
    fired = {f.rule for f in findings}
    missing = set(EXHIBITS[name].expect) - fired
    assert not missing, f"{name} ({EXHIBITS[name].story}): {sorted(missing)} did not fire; fired {sorted(fired)}"


def test_every_rule_has_a_museum_run():
    """Each rule is expected on a run of the first museum, or is the cause a stored run of the
    second or third museum (benchmarks/data/doctor_museum2, doctor_museum3) was made to fail by,
    and fires there; an info rule (no failure: too_few_rows on a TRL log of averaged rows) fires
    on some stored run."""
    from course_lib.doctor.museum2 import MUSEUM2_DIR, MUSEUM3_DIR, load_manifest, score_run

    covered = {rule for e in EXHIBITS.values() for rule in e.expect}
    for folder in (MUSEUM2_DIR, MUSEUM3_DIR):
        for entry in load_manifest(folder).values():
            fired = {rule for _, rule in score_run(entry, folder)["findings"]}
            if entry["broken"]:
                covered |= set(entry["causes"]) & fired
            covered |= {rule for rule in fired if RULES[rule].severity == "info"}
    assert set(RULES) == covered, sorted(set(RULES) - covered)


def test_the_cli_reports_a_museum_run_and_saves_its_figure(museum, tmp_path, capsys):
    """``doctor RUN --figure PATH`` prints the report (the finding and its fix), saves the figure,
    and exits 0 on warnings only, 1 on an error."""
    _, _, _, folder = museum("short_budget")
    _, _, _, broken = museum("constant_reward")
    from course_lib.__main__ import main

    capsys.readouterr()  # only what the command prints below, not what the training printed
    figure = tmp_path / "signals.png"
    assert main(["doctor", str(folder), "--figure", str(figure)]) == 0  # warnings only: exit 0
    assert figure.stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "completions_truncated" in text and "max_completion_length=4" in text
    assert main(["doctor", str(broken), "--figure", str(tmp_path / "b.png")]) == 1  # an error-level finding


def test_the_stale_sampler_shows_in_the_importance_ratio_range_alone(museum):
    """Without the share of tokens outside the band and the mean log-prob gap, the ratio's
    min/max (inside [0.5, 2] at the first step, a min near 0 once the trainer moved away from
    the frozen sampler) still name the failure."""
    from course_lib.doctor import diagnose

    rows, config, _, _ = museum("stale_sampler")
    ratios_only = [{k: v for k, v in r.items() if not k.startswith(("sampling/sampling_logp_difference",
                                                                    "sampling/token_ratio_outside_band"))}
                   for r in rows]
    found = diagnose(ratios_only, config.to_dict(), rules=["sampler_mismatch"])
    assert found and found[0].evidence["ratio_outside_share"] >= 0.8, [str(f) for f in found]


def test_the_stale_sampler_shows_in_the_share_of_tokens_outside_the_band(museum):
    """The trainer logs the share of tokens whose sampler/trainer ratio leaves [0.5, 2]: 0 at the
    first step (same weights), then far above the 5% a bfloat16 sampler stays under."""
    rows, _, findings, _ = museum("stale_sampler")
    shares = [r["sampling/token_ratio_outside_band"] for r in rows if "sampling/token_ratio_outside_band" in r]
    assert shares[0] == 0.0 and min(shares[1:]) > 0.05, shares
    found = next(f for f in findings if f.rule == "sampler_mismatch")
    assert found.evidence["outside_share"] > 0.05 and "of completion tokens" in found.message


@pytest.mark.parametrize("name", ["short_budget", "learning_rate_100x", "stale_sampler", "kl_runaway"])
def test_the_report_dates_museum_findings_as_checking_every_step_does(museum, name):
    from course_lib.doctor import Doctor

    rows, config, findings, _ = museum(name)
    doctor, every_step = Doctor(config), []
    for end in range(1, len(rows) + 1):
        every_step += doctor.check(rows[:end])
    assert [(f.rule, f.step, f.message, repr(f.evidence)) for f in findings] == \
           [(f.rule, f.step, f.message, repr(f.evidence)) for f in every_step]


def test_ppo_on_the_grpo_preset_raises_no_false_alarm(museum):
    # PPO has no measured preset of its own; on GRPO's settings more than half of its groups
    # end up alike, which a critic's advantages do not care about: nothing above "info" fires.
    _, _, findings, _ = museum("ppo_grpo_settings")
    assert [f.rule for f in findings if f.severity != "info"] == []
