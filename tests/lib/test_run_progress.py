"""What a run shows while it trains: the bar's signals within its width, a notice when clipping
rules the step size, eval results when computed, step times in the history, a closing line
naming what was written; and ``frac_reward_zero_std`` for RLOO and PPO as for GRPO."""

from __future__ import annotations

import pytest

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.run.step_report import ClipWatch, bar_postfix, closing_line
from course_lib.trainer import Trainer

ROW = {"loss": 0.0, "reward": 0.41, "rewards/correctness_reward/mean": 0.375, "rewards/format_reward/mean": 0.9,
       "frac_reward_zero_std": 0.25, "entropy": 0.812, "kl": 0.0123, "clip_ratio/region_mean": 0.0,
       "completions/clipped_ratio": 0.125, "timing/step_s": 3.52}


def test_the_bar_shows_the_watched_signals_in_order_and_never_the_on_policy_loss():
    text = bar_postfix(ROW, width=200)
    assert text == ("reward=0.410 correct=0.375 zero_std=0.250 entropy=0.812 kl=0.012 clip=0.000 trunc=0.125 "
                    "s/step=3.520")
    assert "loss" not in text


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_the_bar_fits_its_width_keeping_the_most_important_signals(width):
    text = bar_postfix(ROW, width=width)
    assert len(text) <= max(width - 48, 16) and text.startswith("reward=0.410")
    labels = [part.split("=")[0] for part in text.split()]
    order = ["reward", "correct", "zero_std", "entropy", "kl", "clip", "trunc", "s/step"]
    assert labels == order[:len(labels)]  # a prefix: dropped from the least important end


def test_a_clip_notice_comes_once_when_clipping_fires_at_most_steps():
    watch = ClipWatch(max_grad_norm=1.0, after=10)
    notes = [watch.update(norm) for norm in [4.0, 0.5, 5.9, 3.0, 2.0, 3.3, 0.9, 4.4, 1.5, 2.2, 3.0, 5.0]]
    assert [i for i, n in enumerate(notes) if n] == [9]  # at the 10th step, once
    assert "fired at 8 of the first 10 steps" in notes[9] and "grad_norm up to 5.9 > max_grad_norm=1" in notes[9]
    quiet = ClipWatch(max_grad_norm=1.0, after=10)
    assert not any(quiet.update(norm) for norm in [0.4, 2.0] * 10)  # half the steps is not most
    off = ClipWatch(max_grad_norm=0.0, after=1)
    assert not any(off.update(9.0) for _ in range(5))


def _alternating(prompts, completions, **kwargs):  # each group of two gets {0, 1}: no group has zero spread
    return [float(i % 2) for i in range(len(completions))]


def _per_prompt(prompts, completions, answer, **kwargs):  # one value per prompt: every group has zero spread
    return [float(a) % 3 for a in answer]


@pytest.mark.parametrize("algo", ["rloo", "ppo"])
@pytest.mark.parametrize("reward, expected", [(_alternating, 0.0), (_per_prompt, 1.0)])
def test_rloo_and_ppo_log_frac_reward_zero_std(algo, reward, expected, tmp_path):
    config = make_config(algo, model_name_or_path="tiny", output_dir=str(tmp_path / "run"), max_steps=1,
                         per_device_train_batch_size=4, num_generations=2, max_completion_length=3, num_iterations=1)
    rows = Trainer(config, [reward], get_task("arithmetic", n=8, seed=0), progress=False).train()
    assert rows[-1]["frac_reward_zero_std"] == expected


def test_a_run_prints_eval_results_and_a_closing_line_and_logs_step_times(tmp_path, capsys):
    from course_lib.rewards import get_reward_functions

    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path / "run"), max_steps=2,
                         per_device_train_batch_size=4, num_generations=2, max_completion_length=3, save_steps=1,
                         eval_strategy="steps", eval_steps=1)
    rows = Trainer(config, get_reward_functions(["correctness_reward"]), get_task("arithmetic", n=8, seed=0),
                   eval_dataset=get_task("arithmetic", split="test", n=2, seed=0)).train()
    assert all(row["timing/step_s"] > 0 for row in rows)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "eval at step 1: " in out and "eval at step 2: " in out and "eval/greedy_accuracy=" in out
    expected = closing_line(tmp_path / "run", 2, False)
    assert expected in captured.err
    assert "history.jsonl (2 steps)" in expected and "checkpoint-1, checkpoint-2" in expected and "final/" in expected


def test_rloo_and_ppo_report_kl_under_grpos_name_per_valid_token():
    import torch

    from course_lib.algos.onpolicy import kl_penalized_rewards

    logps = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]])
    ref = torch.tensor([[-1.5, -2.0], [-1.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    scores, eos = torch.tensor([1.0, 0.0]), torch.tensor([True, False])
    shaped = kl_penalized_rewards(scores, logps, ref, mask, beta=0.1)
    # k1 = log pi - log ref on the three valid tokens: 0.5, 0, 0 -> mean 1/6
    assert shaped.metrics(scores, logps, mask, eos)["kl"] == pytest.approx(0.5 / 3)
    assert "kl" not in kl_penalized_rewards(scores, logps, None, mask, beta=0.0).metrics(scores, logps, mask, eos)
