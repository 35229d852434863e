"""Plots and explorers of `course_lib.widgets`: the drawn data equals hand-computed values.

Every figure is also rendered to PNG (into `$WIDGET_FIG_DIR` when set, to look at them,
else a temporary folder) so that drawing errors surface here.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from course_lib import widgets as w
from course_lib.widgets.schedule import SCHEDULE_PRESETS


@pytest.fixture
def render(tmp_path):
    folder = Path(os.environ.get("WIDGET_FIG_DIR", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)

    def save(fig: Figure, name: str) -> Figure:
        assert isinstance(fig, Figure)
        fig.savefig(folder / f"{name}.png", dpi=80)
        return fig

    return save


def bar_heights(ax) -> np.ndarray:
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    return np.array([patch.get_height() for patch in bars])


def value_at(line, x: float) -> float:
    xs, ys = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    return float(ys[np.argmin(np.abs(xs - x))])


# ----------------------------------------------------------------------------- advantages

def test_advantage_bars_match_group_zscores(render):
    fig = render(w.plot_advantages("1, 0, 0, 1,  1, 1, 1, 1", num_generations=4), "advantages")
    assert len(fig.axes) == 2
    rewards_ax, adv_ax = fig.axes
    np.testing.assert_allclose(bar_heights(rewards_ax), [1, 0, 0, 1, 1, 1, 1, 1])
    std = math.sqrt(4 * 0.5**2 / 3)  # Bessel-corrected std of [1, 0, 0, 1]
    expected = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 1
    np.testing.assert_allclose(bar_heights(adv_ax)[:2], expected, rtol=1e-5)
    np.testing.assert_allclose(bar_heights(adv_ax)[4:], 0.0)  # all-equal group: no signal
    # the zero-std group is shaded: one span besides the 8 bars
    assert len(adv_ax.patches) == 8 + 1


def test_advantage_compare_panels(render):
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0])
    fig = render(w.plot_advantages(rewards, num_generations=4, compare=True), "advantages_compare")
    assert len(fig.axes) == 5
    titles = [ax.get_title() for ax in fig.axes[1:]]
    assert titles == ["Advantages, scale_rewards='group'", "Advantages, scale_rewards='batch'",
                      "Advantages, scale_rewards='none'", "Advantages, RLOO (leave-one-out)"]
    groups = rewards.reshape(2, 4)
    centred = (groups - groups.mean(axis=1, keepdims=True)).reshape(-1)
    batch_std = rewards.std(ddof=1)
    np.testing.assert_allclose(bar_heights(fig.axes[2]), centred / (batch_std + 1e-4), rtol=1e-5)
    np.testing.assert_allclose(bar_heights(fig.axes[3]), centred, atol=1e-6)
    leave_one_out = (groups - (groups.sum(axis=1, keepdims=True) - groups) / 3).reshape(-1)
    np.testing.assert_allclose(bar_heights(fig.axes[4]), leave_one_out, atol=1e-6)


def test_advantage_nan_reward_is_drawn_as_zero(render):
    fig = render(w.plot_advantages("1, 0, nan, 1", num_generations=4), "advantages_nan")
    heights = bar_heights(fig.axes[1])
    assert heights[2] == 0.0 and heights[0] > 0 > heights[1]
    with pytest.raises(ValueError, match="not a number"):
        w.plot_advantages("1, zero", num_generations=2)


# ----------------------------------------------------------------------------- clipping

@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clip_curve_hand_values(level):
    up = w.clip_curve([0.5, 1.5], advantage=1.0, epsilon=0.2, level=level)
    np.testing.assert_allclose(up.objective, [0.5, 1.2], atol=1e-12)
    np.testing.assert_allclose(up.gradient, [1.0, 0.0], atol=1e-12)
    down = w.clip_curve([0.5, 2.0], advantage=-1.0, epsilon=0.2, level=level)
    np.testing.assert_allclose(down.objective, [-0.8, -2.0], atol=1e-12)
    np.testing.assert_allclose(down.gradient, [0.0, -1.0], atol=1e-12)
    two_sided = w.clip_curve([2.0], advantage=-1.0, epsilon=0.2, delta=1.5, level=level)
    np.testing.assert_allclose(two_sided.objective, [-1.5], atol=1e-12)
    np.testing.assert_allclose(two_sided.gradient, [0.0], atol=1e-12)
    clip_higher = w.clip_curve([1.25, 1.3], advantage=1.0, epsilon=0.2, epsilon_high=0.28, level=level)
    np.testing.assert_allclose(clip_higher.objective, [1.25, 1.28], atol=1e-12)
    np.testing.assert_allclose(clip_higher.gradient, [1.0, 0.0], atol=1e-12)


def test_loss_weight_curves_by_hand():
    """The weight of grad log pi: DAPO's clip r or 0, CISPO min(r, eps_max), SAPO 4 s (1 - s) r."""
    ratios = np.array([0.5, 1.0, 1.5, 6.0])
    dapo = w.loss_weight_curve(ratios, 1.0, "dapo", epsilon=0.2, epsilon_high=0.28)
    np.testing.assert_allclose(dapo, [0.5, 1.0, 0.0, 0.0], atol=1e-12)  # A > 0 clipped above 1.28
    np.testing.assert_allclose(w.loss_weight_curve(ratios, -1.0, "dapo", epsilon=0.2), [0.0, 1.0, 1.5, 6.0],
                               atol=1e-12)  # A < 0 clipped below 0.8
    np.testing.assert_allclose(w.loss_weight_curve(ratios, 1.0, "cispo", epsilon_high=5.0), [0.5, 1.0, 1.5, 5.0],
                               atol=1e-12)
    for advantage, tau in ((1.0, 1.0), (-1.0, 1.05)):
        sigma = 1 / (1 + np.exp(-tau * (ratios - 1)))
        # rtol 1e-6: the temperatures enter as float32 scalars, as in TRL's torch.where
        np.testing.assert_allclose(w.loss_weight_curve(ratios, advantage, "sapo"), 4 * sigma * (1 - sigma) * ratios,
                                   rtol=1e-6)


def test_loss_weight_figure(render):
    fig = render(w.plot_loss_weights(), "loss_weights")
    assert len(fig.axes) == 2
    assert [line.get_label().split(":")[0] for line in fig.axes[0].lines][:4] == ["dapo", "cispo", "sapo", "unclipped"]
    assert value_at(fig.axes[0].lines[1], 2.0) == pytest.approx(2.0)  # CISPO keeps the gradient past the clip
    assert value_at(fig.axes[0].lines[0], 2.0) == pytest.approx(0.0)


def test_clip_figure_lines(render):
    fig = render(w.plot_clip_objective(epsilon=0.2), "clip_token")
    assert len(fig.axes) == 4
    objective_up, objective_down, gradient_up, gradient_down = (ax.lines[0] for ax in fig.axes)
    assert value_at(objective_up, 1.5) == pytest.approx(1.2)
    assert value_at(gradient_up, 1.5) == pytest.approx(0.0)
    assert value_at(objective_up, 0.5) == pytest.approx(0.5)
    assert value_at(gradient_up, 0.5) == pytest.approx(1.0)
    assert value_at(objective_down, 0.5) == pytest.approx(-0.8)
    assert value_at(gradient_down, 0.5) == pytest.approx(0.0)
    # A > 0: one clipped region (r > 1.2); A < 0: one (r < 0.8)
    grey = to_rgba("0.88")
    for ax in fig.axes:
        assert sum(p.get_facecolor() == grey for p in ax.patches) == 1

    fig = render(w.plot_clip_objective(epsilon=0.2, delta=1.5, level="sequence"), "clip_sequence_delta")
    objective_down, gradient_down = fig.axes[1].lines[0], fig.axes[3].lines[0]
    assert value_at(objective_down, 2.0) == pytest.approx(-1.5)
    assert value_at(gradient_down, 2.0) == pytest.approx(0.0)
    assert value_at(gradient_down, 1.0) == pytest.approx(-1.0)
    assert sum(p.get_facecolor() == to_rgba("0.88") for p in fig.axes[3].patches) == 2  # r < 0.8 and r > 1.5


def test_clip_curve_of_ppo_loss_is_the_symmetric_clip():
    curve = w.clip_curve([0.5, 1.0, 1.5], advantage=1.0, epsilon=0.2, loss="ppo")
    np.testing.assert_allclose(curve.objective, [0.5, 1.0, 1.2])  # min(r, clip(r, 0.8, 1.2)) * A
    np.testing.assert_allclose(curve.gradient, [1.0, 1.0, 0.0], atol=1e-12)
    curve = w.clip_curve([0.5, 1.0, 1.5], advantage=-1.0, epsilon=0.2, loss="ppo")
    np.testing.assert_allclose(curve.objective, [-0.8, -1.0, -1.5])
    np.testing.assert_allclose(curve.gradient, [0.0, -1.0, -1.0], atol=1e-12)
    with pytest.raises(ValueError, match="epsilon_high"):
        w.clip_curve([1.0], 1.0, epsilon_high=0.28, loss="ppo")  # PPO's clip is symmetric


def test_sequence_ratio_is_geometric_mean(render):
    ratios = np.array([0.5, 1.0, 1.1, 2.0])
    maps = w.sequence_clip_maps(ratios, epsilon=0.2)
    r2, r1 = np.meshgrid(ratios, ratios, indexing="ij")
    s = np.sqrt(r1 * r2)
    np.testing.assert_allclose(maps["sequence_ratio"], s, rtol=1e-12)
    # A = +1, mean over the 2 tokens: d/d log pi_1 = r1 / 2 unless token 1 is clipped ...
    np.testing.assert_allclose(maps["token_gradient"], np.where(r1 > 1.2, 0.0, r1 / 2), atol=1e-12)
    # ... and at the sequence level s / 2 unless the whole sequence is clipped
    np.testing.assert_allclose(maps["sequence_gradient"], np.where(s > 1.2, 0.0, s / 2), atol=1e-12)
    fig = render(w.plot_sequence_ratio(num_points=41), "clip_gspo")
    assert len([ax for ax in fig.axes if ax.images]) == 3


def test_sequence_ratio_defaults_to_gspo_range(render):
    # GSPO's range is [1 - 3e-4, 1 + 4e-4]; the default window is 1 -+ 3 x 4e-4.
    fig = render(w.plot_sequence_ratio(num_points=41), "clip_gspo_default")
    image_axes = [ax for ax in fig.axes if ax.images]
    assert image_axes[0].images[0].get_extent() == pytest.approx([1 - 1.2e-3, 1 + 1.2e-3] * 2)
    assert "[0.9997, 1.0004]" in fig._suptitle.get_text()
    ratios = np.array([0.9996, 0.9999, 1.0, 1.0003, 1.0006])
    maps = w.sequence_clip_maps(ratios, epsilon=3e-4, epsilon_high=4e-4)
    r2, r1 = np.meshgrid(ratios, ratios, indexing="ij")
    s = np.sqrt(r1 * r2)
    # A = +1: token 1 keeps s / 2 unless the sequence ratio exceeds 1.0004
    np.testing.assert_allclose(maps["sequence_gradient"], np.where(s > 1.0004, 0.0, s / 2), atol=1e-12)
    with pytest.raises(ValueError, match="window"):
        w.plot_sequence_ratio(min_ratio=1.1, max_ratio=1.2)


# ----------------------------------------------------------------------------- schedule

# The seed's tables (Example 3 with its typo fixed: step 2 is [1,1,2]), cycles A and B.
SEED_TABLES = {
    "Example 1": [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4], [5, 5, 5], [6, 6, 6], [7, 7, 7]],
    "Example 2": [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4], [5, 5, 5], [6, 6, 6], [7, 7, 7]],
    "Example 3": [[0, 0, 0], [0, 1, 1], [1, 1, 2], [2, 2, 2], [3, 3, 3], [3, 4, 4], [4, 4, 5], [5, 5, 5]],
    "Example 4": [[0, 0, 0, 1, 1, 1], [2, 2, 2, 3, 3, 3], [4, 4, 4, 5, 5, 5], [6, 6, 6, 7, 7, 7]],
}
SEED_UPDATES = {"Example 1": [1, 3, 5, 7], "Example 2": [3, 7], "Example 3": [3, 7], "Example 4": [1, 3]}
SEED_FORMULAS = {  # effective batch, generation batch, unique prompts, optimizer steps per generation
    "Example 1": (6, 12, 4, 2.0), "Example 2": (12, 12, 4, 1.0),
    "Example 3": (12, 12, 3, 1.0), "Example 4": (12, 12, 4, 1.0),
}


@pytest.mark.parametrize("name", list(SCHEDULE_PRESETS))
def test_schedule_presets_reproduce_seed_tables(name, render):
    from course_lib.schedule import schedule_table

    parameters = SCHEDULE_PRESETS[name]
    rows = schedule_table(**parameters, cycles=2)
    fig = render(w.plot_schedule(rows, parameters, title=name), f"schedule_{name.replace(' ', '_')}")
    assert len(fig.axes) == 2
    grid_ax = fig.axes[0]
    np.testing.assert_array_equal(np.asarray(grid_ax.images[0].get_array()), np.array(SEED_TABLES[name]).T)
    update_lines = [line for line in grid_ax.lines
                    if line.get_color() == "crimson" and len(line.get_xdata()) == 2]
    assert sorted(float(line.get_xdata()[0]) for line in update_lines) == [k + 0.5 for k in SEED_UPDATES[name]]
    formulas = w.schedule_formulas(**parameters)
    assert tuple(formulas.values()) == SEED_FORMULAS[name]
    text = fig.axes[1].texts[0].get_text()
    assert f"= {SEED_FORMULAS[name][2]} per generation" in text


def test_schedule_without_formulas_and_with_processes(render):
    from course_lib.schedule import schedule_table

    rows = schedule_table(per_device_train_batch_size=2, gradient_accumulation_steps=3, num_generations=2,
                          steps_per_generation=2, num_processes=2, num_iterations=2, cycles=1)
    fig = render(w.plot_schedule(rows), "schedule_processes")
    assert len(fig.axes) == 1
    assert fig.axes[0].images[0].get_array().shape == (4, 4)  # 2 processes x 2 slots, 2 steps x 2 iterations
    with pytest.raises(ValueError, match="rows is empty"):
        w.plot_schedule([])


# ----------------------------------------------------------------------------- loss normalization

def test_per_token_weights_by_loss_type():
    lengths = [2, 4, 10]
    np.testing.assert_allclose(w.per_token_weights(lengths, "grpo"), [1 / (2 * 3), 1 / (4 * 3), 1 / (10 * 3)])
    np.testing.assert_allclose(w.per_token_weights(lengths, "bnpo"), [1 / 16] * 3)
    np.testing.assert_allclose(w.per_token_weights(lengths, "dapo"), [1 / 16] * 3)
    np.testing.assert_allclose(w.per_token_weights(lengths, "dr_grpo", max_completion_length=32), [1 / (3 * 32)] * 3)
    # the seed: bnpo equals grpo when the local batch holds one completion
    np.testing.assert_allclose(w.per_token_weights([7], "bnpo"), w.per_token_weights([7], "grpo"))
    with pytest.raises(ValueError, match="positive token counts"):
        w.per_token_weights([3, 0], "grpo")


def test_normalization_figure(render):
    lengths = [40, 5, 20]
    fig = render(w.plot_loss_normalization(lengths, max_completion_length=64), "normalization")
    assert len(fig.axes) == 2
    token_ax, sequence_ax = fig.axes
    assert [line.get_label().split(":")[0] for line in token_ax.lines] == ["grpo", "bnpo", "dr_grpo", "dapo"]
    np.testing.assert_allclose(token_ax.lines[0].get_xdata(), [5, 20, 40])
    np.testing.assert_allclose(token_ax.lines[0].get_ydata(), [1 / 15, 1 / 60, 1 / 120])
    np.testing.assert_allclose(sequence_ax.lines[0].get_ydata(), [1 / 3] * 3)  # grpo: equal per completion
    np.testing.assert_allclose(sequence_ax.lines[1].get_ydata(), [5 / 65, 20 / 65, 40 / 65])
    np.testing.assert_allclose(token_ax.lines[2].get_ydata(), [1 / (3 * 64)] * 3)


# ----------------------------------------------------------------------------- KL estimators

def test_kl_estimators_bias_and_variance():
    gaps = [0.25, 1.0]
    stats = w.kl_estimator_stats(gaps, "gaussian", num_samples=40_000, seed=1)
    gaps = np.array(gaps)
    np.testing.assert_allclose(stats["true_kl"], gaps**2 / 2, rtol=1e-12)
    # k1 = -gap * x + gap^2 / 2 with x ~ N(0, 1): std = gap
    np.testing.assert_allclose(stats["k1_std"], gaps, rtol=0.03)
    for name in ("k1", "k3"):  # unbiased
        se = stats[f"{name}_std"] / math.sqrt(40_000)
        assert np.all(np.abs(stats[f"{name}_mean"] - stats["true_kl"]) < 4 * se + 1e-9)
    # k2: E[(gap x - gap^2/2)^2] / 2 = gap^2/2 + gap^4/8, biased upwards
    se = stats["k2_std"] / math.sqrt(40_000)
    assert np.all(np.abs(stats["k2_mean"] - (gaps**2 / 2 + gaps**4 / 8)) < 4 * se)
    true_kl, samples = w.kl_estimator_samples(0.5, "categorical", num_samples=20_000)
    assert (samples["k1"] < 0).any() and (samples["k2"] >= 0).all() and (samples["k3"] >= 0).all()
    assert abs(samples["k3"].mean() - true_kl) < 4 * samples["k3"].std() / math.sqrt(20_000)
    assert samples["k3"].std() < samples["k1"].std()  # close distributions: k3 is the low-variance one


def test_kl_figure(render):
    fig = render(w.plot_kl_estimators(gap=0.5, num_samples=2_000), "kl_gaussian")
    assert len(fig.axes) == 3
    mean_ax = fig.axes[0]
    true_line = mean_ax.lines[3]
    assert true_line.get_label() == "true KL"
    np.testing.assert_allclose(true_line.get_ydata(), np.asarray(true_line.get_xdata()) ** 2 / 2, rtol=1e-12)
    render(w.plot_kl_estimators(gap=1.0, distribution="categorical", num_samples=2_000), "kl_categorical")
    with pytest.raises(ValueError, match="distribution"):
        w.plot_kl_estimators(distribution="poisson")


# ----------------------------------------------------------------------------- dashboard

def _history() -> list[dict]:
    rows = []
    for step in range(1, 13):
        row = {"step": step, "reward": step / 12, "loss": 1 / step, "learning_rate": 1e-4,
               "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.01 * step}
        if step % 3 == 0:
            row["kl"] = float("nan")
        elif step > 4:
            row["kl"] = 0.01 * step
        if step == 5:
            row["entropy"] = None
        rows.append(row)
    return rows


def test_training_history_panels_and_data(render):
    history = _history()
    fig = render(w.plot_training_history(history), "dashboard")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["reward", "kl", "clip_ratio", "loss", "learning_rate"]  # entropy has no finite value
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), range(1, 13))
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), np.arange(1, 13) / 12)
    kl_steps = [s for s in range(5, 13) if s % 3]
    np.testing.assert_allclose(fig.axes[1].lines[0].get_xdata(), kl_steps)
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [0.01 * s for s in kl_steps])
    assert len(fig.axes[2].lines) == 2  # the two clip ratios share a panel

    fig = render(w.plot_training_history(history, keys=["reward", "entropy"], smooth=4), "dashboard_keys")
    assert len(fig.axes) == 2
    assert fig.axes[1].texts[0].get_text() == "no data"
    smoothed = fig.axes[0].lines[1].get_ydata()
    assert smoothed[5] == pytest.approx(np.mean(np.arange(3, 7) / 12))  # trailing mean of 4
    assert len(render(w.plot_training_history([]), "dashboard_empty").axes) == 1


def test_load_history_and_live_dashboard(tmp_path, render):
    path = tmp_path / "history.jsonl"
    lines = [json.dumps(row) for row in _history()]
    path.write_text("\n".join(lines) + "\n\n" + '{"step": 13, "rew', encoding="utf-8")  # run still writing
    rows = w.load_history(path)
    assert len(rows) == 12 and math.isnan(rows[2]["kl"])
    assert w.load_history(tmp_path) == rows  # a run folder holding history.jsonl
    assert len(w.plot_training_history(path).axes) == 5
    path.write_text(lines[0] + "\nnot json\n" + lines[1], encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        w.load_history(path)

    live = w.LiveDashboard(every=5, display=False)
    for row in _history():
        live.update(row)
    assert live.output is None and len(live.history) == 12
    render(live.figure(), "dashboard_live")
    shown = w.LiveDashboard(every=2, keys=["reward"], display=True)  # widget path, no kernel needed
    shown.extend(_history()[:4])
    shown.update({"step": 5, "reward": 0.5})
    assert shown.output is not None
    with pytest.raises(ValueError, match="every"):
        w.LiveDashboard(every=0)


# ----------------------------------------------------------------------------- memory

def test_seed_memory_arithmetic():
    # 2 logits x 2 bytes x 8 generations x 20K context x 128,256 vocabulary: the seed's
    # 78.3 "GB" are GiB with 20K = 20,480 tokens.
    assert round(w.logits_memory_gb(8, 20 * 1024, 128_256), 1) == 78.3
    assert w.logits_memory_gb(8, 20 * 1024, 128_256) == 2 * 2 * 8 * 20480 * 128256 / 2**30
    assert round(w.logits_memory_gb(8, 20 * 1024, 128_256, unit="GB"), 1) == 84.1
    assert round(w.logits_memory_gb(8, 20 * 1024, 128_256) / 8, 1) == 9.8  # the seed's 8x saving
    assert w.kv_cache_gb(32, 1024, 20 * 1024) == 2.5
    assert w.kv_cache_gb(32, 1024, 20 * 1024, batch=8) == 20.0
    with pytest.raises(ValueError, match="unit"):
        w.kv_cache_gb(32, 1024, 20 * 1024, unit="MB")


def test_measured_memory_fused_below_full_logits(render):
    results = w.measure_logprob_memory((None, 64), n_tokens=1024, hidden=32, vocab=16_384, device="cpu")
    naive, fused = results
    full = 1024 * 16_384 * 4 / 2**20  # 64 MiB
    assert naive["full_logits_mib"] == fused["full_logits_mib"] == full
    assert naive["peak_mib"] >= full  # at least the (N, V) logits live at once
    assert fused["peak_mib"] < full / 2  # one (64, V) chunk instead
    fig = render(w.plot_memory_vs_chunk_size(results), "memory")
    assert len(fig.axes) == 2
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [fused["peak_mib"]])
    with pytest.raises(ValueError, match="no fused"):
        w.plot_memory_vs_chunk_size([naive])


# ----------------------------------------------------------------------------- rewards

def _has_answer(prompts, completions, **kwargs):
    return [1.0 if "<answer>" in c else None for c in completions]


def _matches(prompts, completions, answer, **kwargs):
    return [2.0 if a in c else 0.0 for c, a in zip(completions, answer)]


def test_reward_breakdown_table(render):
    completions = ["<answer>4</answer>", "it is 5", "<answer>5</answer>"]
    names, scores, total = w.reward_breakdown(completions, [_has_answer, _matches], reward_weights=[0.5, 1.0],
                                              answer="4")
    assert names == ["_has_answer", "_matches"]
    np.testing.assert_allclose(scores, [[1.0, 2.0], [np.nan, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(total, [0.5 + 2.0, 0.0, 0.5])  # None is skipped, not counted as 0
    fig = render(w.plot_reward_breakdown(completions, [_has_answer, _matches], reward_weights=[0.5, 1.0],
                                         answer="4"), "rewards")
    assert len(fig.axes) == 2
    assert [t.get_text() for t in fig.axes[0].texts] == ["1", "2", "None", "0", "1", "0"]
    assert [t.get_text() for t in fig.axes[1].texts] == ["2.5", "0", "0.5"]
    with pytest.raises(ValueError, match="column 'answer'"):
        w.reward_breakdown(completions, [_matches], answer=["4"])


def test_reward_breakdown_with_course_rewards():
    from course_lib.rewards import REWARD_FUNCTIONS

    funcs = [REWARD_FUNCTIONS["think_answer_format_reward"], REWARD_FUNCTIONS["correctness_reward"]]
    _, scores, _ = w.reward_breakdown(list(w.EXAMPLE_COMPLETIONS[:2]), funcs, answer="4")
    np.testing.assert_allclose(scores, [[1.0, 1.0], [0.5, 0.0]])


# ----------------------------------------------------------------------------- explorers

def test_explorers_build_and_redraw():
    pytest.importorskip("ipywidgets")
    explorers = [w.advantage_explorer(), w.clip_explorer(), w.schedule_explorer(), w.normalization_explorer(),
                 w.kl_explorer(), w.reward_playground()]
    for box in explorers:
        assert isinstance(box.figure, Figure)
    advantage = explorers[0]
    text = advantage.children[0].children[0]
    text.value = "1, 0, 1"  # 3 rewards for G = 4: an error message, not an exception
    assert advantage.figure is None
    text.value = "1, 0, 1, 1"
    assert len(advantage.figure.axes) == 2

    schedule = explorers[2]
    schedule.children[0].value = "Example 4"  # the preset dropdown sets every slider, one redraw
    np.testing.assert_array_equal(schedule.figure.axes[0].images[0].get_array(),
                                  np.array(SEED_TABLES["Example 4"]).T)


def _controls(box):
    """The controls of an explorer box (rows of controls, then the output)."""
    import ipywidgets as widgets

    found = []
    for child in box.children:
        found += list(child.children) if isinstance(child, widgets.HBox) else [child]
    return [c for c in found if not isinstance(c, widgets.Output)]


def _px(value) -> float:
    assert str(value).endswith("px"), f"expected a width in px, got {value!r}"
    return float(str(value)[:-2])


def test_reward_playground_bad_answer_is_one_line_and_recovers():
    pytest.importorskip("ipywidgets")
    box = w.reward_playground()
    answer = next(c for c in _controls(box) if c.description == "answer")
    for typed in ("four", "4 2"):
        answer.value = typed
        assert box.figure is None
        assert "\n" not in box.message
        assert box.message.startswith("Cannot draw: reward function 'proximity_reward' raised ValueError")
        assert repr(typed) in box.message and "Fix:" in box.message
    answer.value = "5"  # valid again: the table comes back, scored against 5
    assert box.message is None and isinstance(box.figure, Figure)
    names = [label.get_text().split("\n")[0] for label in box.figure.axes[0].get_xticklabels()]
    correctness = [t.get_text() for t in box.figure.axes[0].texts][names.index("correctness")::len(names)]
    # rows: the learner's completion (answer 4), then EXAMPLE_COMPLETIONS (4, 5, 4, "four")
    assert correctness == ["0", "0", "1", "0", "0"]


def test_explorer_labels_are_whole_and_slider_tracks_usable():
    """Every description fits its box (measured in DejaVu Sans at the widgets' 13 px, a
    wide font), and every slider keeps a track of at least 150 px."""
    pytest.importorskip("ipywidgets")
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, font = TextToPath(), FontProperties(family="DejaVu Sans", size=13)
    explorers = {"advantage": w.advantage_explorer(), "clip": w.clip_explorer(), "schedule": w.schedule_explorer(),
                 "normalization": w.normalization_explorer(), "kl": w.kl_explorer(),
                 "rewards": w.reward_playground()}
    for name, box in explorers.items():
        for control in _controls(box):
            if not control.description or type(control).__name__ == "Checkbox":
                continue
            text_px = measure.get_text_width_height_descent(control.description, font, ismath=False)[0]
            box_px = _px(control.style.description_width) if control.style.description_width else 80.0
            assert box_px >= text_px, f"{name}: label {control.description!r} ({text_px:.0f} px) cut at {box_px} px"
            if type(control).__name__.endswith("Slider"):
                track = _px(control.layout.width) - box_px - 96  # readout and margins
                assert track >= 150, f"{name}: slider {control.description!r} has a {track:.0f} px track"
    # the descriptions the default 80 px box cut
    clip = {c.description: c for c in _controls(explorers["clip"])}
    assert _px(clip["delta (0=off)"].style.description_width) > 80
    assert _px(clip["epsilon_high"].style.description_width) > 80


def test_figures_label_bars_and_count_whole_steps(render):
    fig = render(w.plot_advantages("1, 0, 0, 1", num_generations=2), "advantages_labels")
    rewards_ax, adv_ax = fig.axes
    # "P1:0" = prompt 1, completion 0: no tick reads as a decimal number
    assert [t.get_text() for t in rewards_ax.get_xticklabels()] == ["P0:0", "P0:1", "P1:0", "P1:1"]
    assert [t.get_text() for t in rewards_ax.texts] == ["1.00", "0.00", "0.00", "1.00"]
    assert [t.get_text() for t in adv_ax.texts if t.get_text() != "no signal"] == ["0.71", "-0.71", "-0.71", "0.71"]

    # 60 logged steps: a moving average over the faint raw points; the legend names ideas.
    history = [{"step": s, "reward": float(s % 7), "eval/reward": 0.1 * s} for s in range(1, 61)]
    fig = render(w.plot_training_history(history, keys=[("reward", "eval/reward")]), "dashboard_smoothed")
    ax = fig.axes[0]
    raw, smoothed = ax.lines[:2]
    np.testing.assert_allclose(raw.get_ydata(), [s % 7 for s in range(1, 61)])
    assert raw.get_alpha() < 0.5 and smoothed.get_ydata()[5] == pytest.approx(np.mean([s % 7 for s in range(1, 7)]))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["training reward", "held-out reward"]
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert ticks and all(float(t.replace("\u2212", "-")).is_integer() for t in ticks)
    # a short run is not smoothed
    assert len(w.plot_training_history(history[:8], keys=["reward"]).axes[0].lines) == 1


# ----------------------------------------------------------------------------- trajectories (lesson 12)

def test_trajectory_cells_follow_the_tool_mask(render):
    """A trajectory built by hand on the character-level tiny tokenizer: a call, a tool
    result with the next turn's header, an answer; every cell's colour is its mask's role."""
    from course_lib.models import load_policy

    _, tokenizer = load_policy("tiny")
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt = encode("6*7")
    call, result, answer = encode("<call>"), encode("\n42\n"), encode("42")
    completion = call + result + answer
    mask = [1] * len(call) + [0] * len(result) + [1] * len(answer)
    cells = w.token_cells(tokenizer, prompt, completion, mask)
    assert [role for _, role in cells] == ["prompt"] * 3 + ["trained"] * 6 + ["masked"] * 4 + ["trained"] * 2
    assert "".join(text for text, _ in cells) == "6*7<call>\\n42\\n42"
    fig = render(w.plot_trajectory_tokens(tokenizer, prompt, completion, mask, advantage=-0.5, per_line=5), "trajectory")
    ax = fig.axes[0]
    cells_drawn = [p for p in ax.patches if p.get_label() in w.trajectory.ROLE_COLORS]
    assert [p.get_label() for p in cells_drawn] == [role for _, role in cells]
    for patch in cells_drawn:
        assert patch.get_facecolor() == to_rgba(w.trajectory.ROLE_COLORS[patch.get_label()])
    assert "8 trained, 4 masked tokens" in ax.get_title() and "advantage -0.500" in ax.get_title()
    with pytest.raises(ValueError, match="one mask entry per trajectory token"):
        w.token_cells(tokenizer, prompt, completion, mask[:-1])
