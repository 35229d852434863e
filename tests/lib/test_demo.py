"""`make demo`'s report: the before/after table with Wilson intervals and the paired lift interval."""

import json
import math

import pytest

from course_lib.demo import pass_at_k_table, results_table, run_demo


def test_results_table_on_a_hand_worked_case():
    # 10 problems: 2 right before; after, those 2 plus 4 more right and none broken.
    before = [True, True] + [False] * 8
    after = [True, True, True, True, True, True] + [False] * 4
    table, numbers = results_table(before, after)
    # Wilson 95% bounds of 2/10 and 6/10 from the closed form (z = 1.959964)
    assert numbers["interval_before"] == pytest.approx((0.056682, 0.509834), abs=1e-5)
    assert numbers["interval_after"] == pytest.approx((0.312673, 0.831820), abs=1e-5)
    # differences: four 1s, six 0s -> mean 0.4, sample sd sqrt(0.4 * 0.6 * 10 / 9)
    half = 1.959964 * math.sqrt(0.24 * 10 / 9) / math.sqrt(10)
    assert numbers["lift"] == pytest.approx(0.4)
    assert numbers["lift_interval"] == pytest.approx([0.4 - half, 0.4 + half], abs=1e-6)
    assert "20.0% [5.7, 51.0] (2/10)" in table and "60.0% [31.3, 83.2] (6/10)" in table
    assert "+40.0 points" in table and "excludes 0" in table
    assert "problems fixed 4, broken 0" in table


def test_results_table_says_when_the_lift_is_noise():
    before = [True, False] * 10
    after = [False, True] * 10  # as many fixed as broken: lift 0
    table, numbers = results_table(before, after)
    assert numbers["lift"] == 0.0 and numbers["lift_interval"][0] < 0 < numbers["lift_interval"][1]
    assert "contains 0" in table


def test_pass_at_k_table_on_a_hand_worked_case():
    from course_lib.evaluation import SampledEvaluation, mean_pass_at_k

    # 4 problems x 4 samples; pass@4 of a problem is 1 when any sample is right.
    before = SampledEvaluation(n=4, temperature=1.0, correct_counts=[0, 1, 2, 0], answers=[])
    after = SampledEvaluation(n=4, temperature=1.0, correct_counts=[1, 4, 2, 0], answers=[])
    for result in (before, after):
        result.pass_at = {k: mean_pass_at_k(result.correct_counts, 4, k) for k in (1, 4)}
    table, numbers = pass_at_k_table(before, after)
    assert numbers["pass@1_before"] == pytest.approx(3 / 16) and numbers["pass@1_after"] == pytest.approx(7 / 16)
    assert numbers["pass@4_before"] == pytest.approx(2 / 4) and numbers["pass@4_after"] == pytest.approx(3 / 4)
    # pass@1 per problem differences: +1/4, +3/4, 0, 0 -> mean 0.25
    diffs = [0.25, 0.75, 0.0, 0.0]
    half = 1.959964 * math.sqrt(sum((d - 0.25) ** 2 for d in diffs) / 3) / 2
    assert numbers["pass@1_lift_interval"] == pytest.approx([0.25 - half, 0.25 + half], abs=1e-6)
    assert "pass@1   before  18.8%, after  43.8%" in table and "pass@4" in table


@pytest.mark.slow
def test_tiny_demo_prints_the_table_and_saves_its_numbers(tmp_path, capsys):
    results = run_demo("tiny", output_dir=str(tmp_path), max_steps=4, eval_n=40)
    printed = capsys.readouterr().out
    assert "held-out greedy accuracy, 40 problems" in printed and "lift" in printed
    saved = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert saved["n"] == 40 and saved["steps"] == 4
    for key in ("before", "after"):
        low, high = saved[f"interval_{key}"]
        assert low <= saved[f"accuracy_{key}"] <= high
    assert saved["lift"] == pytest.approx(saved["accuracy_after"] - saved["accuracy_before"])
    assert saved["lift_interval"][0] <= saved["lift"] <= saved["lift_interval"][1]
    assert (tmp_path / "tiny" / "reward.png").exists()
    assert 0 <= saved["pass@1_before"] <= saved["pass@8_before"] <= 1 and "pass@8" in printed


def test_the_examples_shown_are_fixed_and_broken_problems():
    from course_lib.demo import example_rows

    before = [True, False, False, True, False, True]
    after = [True, True, False, False, True, True]
    assert example_rows(before, after) == [(1, "fixed"), (4, "fixed"), (3, "broken")]
    assert example_rows([True, False], [True, False]) == [(0, "unchanged"), (1, "unchanged")]


def test_the_demo_names_its_path_and_estimates_its_time_from_the_measured_pace(monkeypatch):
    from course_lib import demo
    from course_lib import machine

    monkeypatch.setattr(machine, "cpu_supports_bfloat16", lambda: False)
    settings = {"max_steps": 30}  # what demo_settings gives on a CPU without bfloat16
    path, why, seconds = demo.path_and_estimate("smollm2-135m", settings, 200)
    pace = demo.MEASURED_PACE["hf-fp32"]
    assert path == "hf-fp32" and "no native bfloat16" in why
    assert seconds == pytest.approx(pace["start_s"] + 400 * pace["eval_s"] + 30 * pace["step_s"])
    fast = {"max_steps": 30, "engine": "vllm", "vllm_dtype": "bfloat16", "dtype": "bfloat16"}
    assert demo.path_and_estimate("smollm2-135m", fast, 200)[0] == "vllm-bf16"
    assert demo.path_and_estimate("tiny", {"max_steps": 200}, 200)[2] is None  # no measured pace: no guess


def test_the_demo_samples_in_a_second_process_only_where_that_was_measured_faster(monkeypatch, tmp_path):
    from course_lib import demo

    monkeypatch.setattr(demo, "fast_engine_settings", lambda: {})  # no vLLM here: Hugging Face generate
    settings = demo.demo_settings("smollm2-135m", tmp_path)
    assert settings["async_generation"] and settings["max_staleness"] == 1
    assert demo.path_and_estimate("smollm2-135m", settings, 200)[0] == "hf-fp32-async"
    assert "async_generation" not in demo.demo_settings("smollm2-135m", tmp_path, asynchronous=False)
    assert "async_generation" not in demo.demo_settings("tiny", tmp_path)  # a 16 s run: the worker's start-up would not pay
    monkeypatch.setattr(demo, "fast_engine_settings", lambda: {"engine": "vllm", "vllm_dtype": "bfloat16"})
    assert "async_generation" not in demo.demo_settings("smollm2-135m", tmp_path)  # the worker runs HF only
    from course_lib.algos import GRPOConfig

    GRPOConfig(**settings)  # a valid config


def test_the_demo_evaluation_reports_progress_in_chunks(capsys):
    from course_lib import demo

    class Engine:
        calls = []

        def generate(self, prompts):
            self.calls.append(len(prompts))
            return type("Batch", (), {"texts": ["<answer>1</answer>"] * len(prompts)})()

    rows = {"prompt": [[{"role": "user", "content": str(i)}] for i in range(60)], "answer": ["1"] * 59 + ["2"]}
    correct, _ = demo.greedy_correct(Engine(), rows, desc="Before GRPO")
    assert Engine.calls == [25, 25, 10] and sum(correct) == 59
    assert "Before GRPO: 60/60 (100%)" in capsys.readouterr().out
