"""DoctorCallback in real TRL 1.16 trainers (tiny model, CPU, the child process of
``trl_doctor_runs.py``: TRL's trainers change process-wide settings that later tests would
inherit), and the doctor's input handling."""

import json
from pathlib import Path

import pytest

from course_lib.__main__ import main
from course_lib.doctor.report import doctor_run


@pytest.mark.slow
@pytest.mark.xdist_group("trl_doctor_runs")
def test_the_callback_reports_live_in_trl_grpo_and_stays_out_of_sft(trl_doctor_runs):
    """``trl_doctor_runs.py``: GRPO with ``DoctorCallback(stop=True)`` and a reward of 0.5 for
    everything, then SFT with a ``DoctorCallback`` (what it printed after ``CALLBACK RUNS``)."""
    tmp_path, done = trl_doctor_runs
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.split("CALLBACK RUNS", 1)[1]
    # Printed live, once: three steps in a row with loss and gradient 0 (every group alike).
    assert out.count("[doctor error]") == 1 and "no_learning_signal" in out
    assert "FOUND ['no_learning_signal']" in out
    # stop=True: the error finding at step 3 ends the 6-step run there.
    assert "GRPO_STEPS 3 " in out
    # Written as it fires (a killed run keeps it) and into the saved log, which the report reads back.
    lines = [json.loads(x) for x in (tmp_path / "grpo" / "doctor.jsonl").read_text().splitlines()]
    assert [(x["rule"], x["step"]) for x in lines] == [("no_learning_signal", 3)]
    state = json.loads((tmp_path / "grpo" / "trainer_state.json").read_text())
    assert [e["rule"] for e in state["log_history"] if e.get("type") == "doctor"] == ["no_learning_signal"]
    findings, text, _ = doctor_run(tmp_path / "grpo", figure=tmp_path / "grpo.png")
    assert [f.rule for f in findings] == ["no_learning_signal"] and "every group's rewards are equal" in text
    # SFT: one line, no finding.
    assert "SFT_FOUND 0" in out and "this log has no rewards" in out
    assert main(["doctor", str(tmp_path / "sft"), "--figure", str(tmp_path / "sft.png")]) == 0


def _write_history(folder: Path, rows) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "history.jsonl"


def test_an_empty_history_or_trl_log_exits_non_zero_with_a_message(tmp_path, capsys):
    _write_history(tmp_path / "run", [])
    assert main(["doctor", str(tmp_path / "run")]) == 2
    assert "no logged step" in capsys.readouterr().err
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    assert main(["doctor", str(tmp_path / "trl")]) == 2
    assert "no logged step" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "trainer_state.json").write_text("{not json")
    assert main(["doctor", str(tmp_path / "broken")]) == 2


def _constant_rows(n=12):
    return [{"step": i + 1, "loss": 0.0, "grad_norm": 0.0, "reward": 0.5, "frac_reward_zero_std": 1.0,
             "rewards/half/mean": 0.5, "rewards/half/std": 0.0, "entropy": 0.7} for i in range(n)]


def test_history_jsonl_itself_is_accepted_and_a_bad_figure_path_keeps_the_report(tmp_path, capsys):
    path = _write_history(tmp_path / "run", _constant_rows())
    findings, text, saved = doctor_run(path, figure=tmp_path / "no" / "such" / "folder" / "f.png")
    assert saved is None and "figure: not saved" in text
    assert {f.rule for f in findings} == {"dead_reward_function", "no_learning_signal"}
    # The error first; the constant function (info: it changes no advantage) named below it.
    assert "Act on the first: no_learning_signal" in text
    assert text.index("ERROR   no_learning_signal") < text.index("INFO    dead_reward_function")
    assert main(["doctor", str(path), "--figure", str(tmp_path / "no" / "f.png")]) == 1  # an error finding
    assert "no_learning_signal" in capsys.readouterr().out


def test_a_log_without_rewards_says_the_rl_rules_do_not_apply(tmp_path):
    # An SFT log: loss, grad_norm, learning_rate, entropy (TRL's SFTTrainer logs it), no reward.
    rows = [{"step": i + 1, "loss": 2.0 - 0.01 * i, "grad_norm": 3.0, "learning_rate": 2e-5,
             "entropy": 0.5 + 0.1 * i} for i in range(30)]
    findings, text, _ = doctor_run(_write_history(tmp_path / "sft", rows), figure=tmp_path / "f.png")
    assert findings == [] and "this log has no rewards" in text


def test_a_dpo_log_is_no_rl_log(tmp_path):
    # TRL's DPOTrainer logs implicit rewards of fixed pairs (rewards/chosen, rewards/margins...).
    rows = [{"step": i + 1, "loss": 0.69 - 0.01 * i, "grad_norm": 5.0, "learning_rate": 5e-7,
             "rewards/chosen": 0.01 * i, "rewards/rejected": -0.01 * i, "rewards/accuracies": 0.5,
             "rewards/margins": 0.02 * i, "logps/chosen": -40.0, "logps/rejected": -42.0} for i in range(20)]
    (tmp_path / "dpo").mkdir()
    (tmp_path / "dpo" / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
    findings, text, _ = doctor_run(tmp_path / "dpo", figure=tmp_path / "f.png")
    assert findings == [] and "this log has no rewards" in text
