"""The doctor inside the trainer: findings printed once, written as their own rows, "stop"
ends the run, "off" is silent, and the timing metrics it reads are logged."""

import json

import pytest

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.museum import constant_reward
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.run.history import load_history
from course_lib.trainer import Trainer


def _trainer(tmp_path, rewards, **overrides):
    model, tokenizer = load_policy("tiny")
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), per_device_train_batch_size=8,
                    num_generations=4, max_completion_length=6, learning_rate=3e-5, max_steps=8, save_steps=0,
                    logging_steps=2, seed=0)
    settings.update(overrides)
    return Trainer(make_config("grpo", **settings), rewards, get_task("arithmetic", split="train", n=64, seed=0),
                   model, tokenizer, progress=False)


def _train(tmp_path, rewards, **overrides):
    trainer = _trainer(tmp_path, rewards, **overrides)
    return trainer, trainer.train()


def test_findings_are_printed_once_and_written_as_doctor_rows(tmp_path, capsys):
    trainer, rows = _train(tmp_path, [constant_reward])
    out = capsys.readouterr().out
    assert out.count("no_learning_signal") == 1 and "[doctor error]" in out
    events = [r for r in load_history(tmp_path) if r.get("type") == "doctor"]
    assert {e["rule"] for e in events} >= {"no_learning_signal", "zero_spread_groups", "dead_reward_function"}
    assert len(events) == len({e["rule"] for e in events})
    # Checked at logging steps only (2, 4, 6, 8); three zero steps are first seen at step 4.
    assert {e["step"] for e in events} <= {2, 4, 6, 8}
    assert [e for e in events if e["rule"] == "no_learning_signal"][0]["step"] == 4
    # The rows train() returns are the metric rows, one per step, as before.
    assert [r["step"] for r in rows] == list(range(1, 9)) and all("type" not in r for r in rows)
    assert all(r["timing/step_s"] >= r["timing/generation_s"] > 0 for r in rows)


def test_stop_ends_the_run_at_the_first_error_with_a_checkpoint(tmp_path):
    trainer, rows = _train(tmp_path, [constant_reward], doctor="stop")
    assert trainer.interrupted and trainer.doctor.stopped_by.rule == "no_learning_signal"
    assert len(rows) == 4 and (tmp_path / "checkpoint-4").is_dir() and not (tmp_path / "final").exists()


def test_off_writes_no_finding_and_trains_the_same(tmp_path):
    _, warned = _train(tmp_path / "warn", get_reward_functions(["correctness_first_number_reward"]))
    _, silent = _train(tmp_path / "off", get_reward_functions(["correctness_first_number_reward"]), doctor="off")
    assert not [r for r in load_history(tmp_path / "off") if r.get("type")]
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("timing/") and k not in ("tokens/s", "eps")}  # noqa: E731
    assert [strip(r) for r in warned] == [strip(r) for r in silent]


def test_a_non_finite_update_is_reported_through_the_doctor(tmp_path):
    from course_lib.run.nonfinite import NonFiniteTrainingError

    model, tokenizer = load_policy("tiny")
    # A gradient turned NaN on its way back (as an overflow would): the trainer refuses the update.
    next(model.parameters()).register_hook(lambda grad: grad * float("nan"))
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), per_device_train_batch_size=8,
                         num_generations=4, max_completion_length=6, max_steps=3, save_steps=0, seed=0)
    trainer = Trainer(config, get_reward_functions(["correctness_first_number_reward"]),
                      get_task("arithmetic", split="train", n=64, seed=0), model, tokenizer, progress=False)
    with pytest.raises(NonFiniteTrainingError):
        trainer.train()
    events = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    found = [e for e in events if e.get("type") == "doctor" and e["rule"] == "non_finite_values"]
    assert len(found) == 1 and found[0]["step"] == 1 and "grad_norm=nan" in found[0]["message"]


def test_the_config_refuses_an_unknown_doctor_mode():
    with pytest.raises(ValueError, match="doctor"):
        make_config("grpo", doctor="loud")


def test_the_dashboard_marks_findings_on_the_curves_they_read(tmp_path):
    from course_lib.widgets.dashboard import LiveDashboard, plot_training_history

    trainer, _ = _train(tmp_path, [constant_reward], max_steps=4)
    figure = plot_training_history(tmp_path / "history.jsonl", keys=["frac_reward_zero_std", "entropy"])
    marked = {ax.get_title(): [t.get_text().strip() for t in ax.texts] for ax in figure.axes}
    assert "zero_spread_groups" in marked["frac_reward_zero_std"]
    assert marked["entropy"] == []  # no finding read the entropy
    # Live: the doctor hands each finding to the dashboard as it reports it.
    dashboard = LiveDashboard(keys=["frac_reward_zero_std"])
    trainer = _trainer(tmp_path / "live", [constant_reward], max_steps=4)
    trainer.doctor.on_finding = dashboard.update
    trainer.train()
    assert {r["rule"] for r in dashboard.history} >= {"zero_spread_groups", "no_learning_signal"}


def test_a_resumed_run_reports_each_finding_once_as_the_uninterrupted_run_did(tmp_path):
    _train(tmp_path, [constant_reward], save_steps=4)
    uninterrupted = [r for r in load_history(tmp_path) if r.get("type") == "doctor"]
    resumed = _trainer(tmp_path, [constant_reward], save_steps=4)
    resumed.train(resume_from=tmp_path / "checkpoint-4")
    assert [r for r in load_history(tmp_path) if r.get("type") == "doctor"] == uninterrupted
