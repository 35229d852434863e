"""After the fact: the doctor reads TRL's trainer_state.json as well as our run folders."""

import json

import pytest

from course_lib.doctor.report import doctor_run, load_run


def test_a_trl_log_history_is_merged_by_step_with_eval_keys_renamed(tmp_path):
    log = [{"step": 1, "loss": 0.1, "reward": 0.2}, {"step": 1, "eval_reward": 0.3, "eval_runtime": 1.0},
           {"step": 2, "loss": 0.0, "reward": 0.4},
           {"step": 2, "train_runtime": 3.0, "train_loss": 0.05}]  # TRL's closing summary
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": log, "global_step": 2}))
    rows, config, kind = load_run(tmp_path)
    assert kind == "trl" and config == {}
    assert rows == [{"step": 1, "loss": 0.1, "reward": 0.2, "eval/reward": 0.3, "eval_runtime": 1.0},
                    {"step": 2, "loss": 0.0, "reward": 0.4}]


def test_a_folder_without_a_history_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="output_dir"):
        load_run(tmp_path)


@pytest.mark.slow
@pytest.mark.xdist_group("trl_doctor_runs")
def test_a_real_trl_run_with_a_constant_reward_and_a_short_budget(trl_doctor_runs):
    """TRL 1.16's GRPOTrainer, the tiny model, 8 steps (``trl_doctor_runs.py``, in a child
    process): its own log names the same failures."""
    out, done = trl_doctor_runs
    assert done.returncode == 0, done.stderr[-3000:]
    findings, text, figure = doctor_run(out / "report")
    fired = {f.rule for f in findings}
    assert {"no_learning_signal", "zero_spread_groups", "completions_truncated", "dead_reward_function"} <= fired
    assert "TRL log" in text and figure.exists()


# ------------------------------------------------------------------ dating findings over a long history


def _every_step(rows, config):
    """The report's first algorithm, kept as the reference: the live doctor at every prefix."""
    from course_lib.doctor import Doctor

    doctor, found = Doctor(config), []
    for end in range(1, len(rows) + 1):
        found += doctor.check(rows[:end])
    return found


def _comparable(findings):
    return [(f.rule, f.severity, f.step, f.message, f.signals, repr(f.evidence)) for f in findings]  # NaN != NaN


def _history(n, events):
    """``n`` healthy-looking rows; ``events`` maps a key to ``(first step, value)`` from which on it holds."""
    import math

    rows = []
    for i in range(n):
        row = {"step": i + 1, "loss": 0.05 * math.sin(i), "grad_norm": 2.0, "reward": 0.3 + 0.02 * math.sin(i / 7),
               "reward_std": 0.4, "frac_reward_zero_std": 0.1, "entropy": 0.6 + 0.01 * math.cos(i),
               "learning_rate": 3e-5, "completions/clipped_ratio": 0.0, "completions/mean_length": 4.0,
               "clip_ratio/region_mean": 0.0, "kl": 0.01, "rewards/correct/mean": 0.3, "rewards/correct/std": 0.45}
        for key, (start, value) in events.items():
            if i + 1 >= start:
                row[key] = value(i) if callable(value) else value
        rows.append(row)
    return rows


def test_the_report_dates_findings_as_checking_every_step_does_on_a_short_history():
    from course_lib.doctor.report import first_firing

    rows = _history(120, {"completions/clipped_ratio": (30, 0.5), "kl": (50, 0.9),
                          "frac_reward_zero_std": (80, 0.9)})
    rows[99]["grad_norm"] = None  # a non-finite gradient, written as null
    for row in rows[60:63]:  # three steps without a gradient: fires at the third, then no more
        row.update(loss=0.0, grad_norm=0.0)
    config = {"beta": 0.04, "max_completion_length": 8, "num_generations": 8}
    expected = _every_step(rows, config)
    assert {f.rule for f in expected} >= {"completions_truncated", "policy_moves_too_fast", "no_learning_signal",
                                          "zero_spread_groups", "non_finite_values"}
    assert _comparable(first_firing(rows, config)) == _comparable(expected)


def test_a_5000_step_history_is_reported_with_each_finding_at_its_first_step(monkeypatch):
    from course_lib.doctor import core
    from course_lib.doctor.report import first_firing

    rows = _history(5000, {"completions/clipped_ratio": (3991, 0.5)})
    rows[4499]["grad_norm"] = None
    read = []  # rows handed to the rules, over the whole report
    diagnose = core.diagnose
    monkeypatch.setattr(core, "diagnose",
                        lambda history, *a, **k: read.append(len(history)) or diagnose(history, *a, **k))
    found = {f.rule: f.step for f in first_firing(rows, {"max_completion_length": 8})}
    # The last 10 steps average 5 x 0.5 / 10 = 0.25 > 0.2 first at step 3995 (4 x 0.5 / 10 = 0.2 at 3994).
    assert found == {"completions_truncated": 3995, "non_finite_values": 4500}
    # Linear in the length: checking all 5000 prefixes would hand the rules 12.5 million rows.
    assert sum(read) < 50 * len(rows), sum(read)
