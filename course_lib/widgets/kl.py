"""KL-estimator explorer (lessons 03 and 06): bias and variance of k1, k2 and k3.

The policy `pi` and the reference `ref` are two known distributions, so the true
`KL(pi || ref)` is exact (`torch.distributions.kl_divergence`). Samples are drawn from
`pi`, as the tokens of a completion are, and each sample gives one estimate per
estimator from `course_lib.ops.kl.kl_k1 / kl_k2 / kl_k3` (Schulman 2020, "Approximating
KL Divergence"): k1 and k3 are unbiased, k2 is biased upwards as the gap grows, and
k1 has the largest spread and takes negative values.

Two families, both with one "gap" parameter:
- `"gaussian"`: `pi = N(0, 1)`, `ref = N(gap, 1)`; true KL `gap^2 / 2`;
- `"categorical"`: a fixed 10-token softmax `pi` and `ref` whose logits move by
  `gap` times a fixed direction (the setting of a language model's next token).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch.distributions import Categorical, Distribution, Normal, kl_divergence

from course_lib.ops.kl import kl_k1, kl_k2, kl_k3

from ..common.figures import build_explorer, new_figure

__all__ = ["kl_estimator_samples", "kl_estimator_stats", "kl_explorer", "plot_kl_estimators"]

ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
_COLORS = {"k1": "tab:blue", "k2": "tab:orange", "k3": "tab:green"}
_VOCAB = 10


def _distributions(gap: float, distribution: str) -> tuple[Distribution, Distribution]:
    if distribution == "gaussian":
        mean = torch.tensor(0.0, dtype=torch.float64)
        return Normal(mean, 1.0), Normal(mean + float(gap), 1.0)
    if distribution == "categorical":
        generator = torch.Generator().manual_seed(1234)  # the same two distributions at every call
        logits = torch.randn(_VOCAB, generator=generator, dtype=torch.float64)
        direction = torch.randn(_VOCAB, generator=generator, dtype=torch.float64)
        return Categorical(logits=logits), Categorical(logits=logits + gap * direction)
    raise ValueError(f"distribution={distribution!r} is unknown. Fix: use 'gaussian' or 'categorical'.")


def kl_estimator_samples(gap: float, distribution: str = "gaussian", num_samples: int = 20_000,
                         seed: int = 0) -> tuple[float, dict[str, np.ndarray]]:
    """Per-sample values of each estimator for samples drawn from `pi`.

    Returns:
        `(true_kl, {"k1": (num_samples,), "k2": ..., "k3": ...})`.
    """
    policy, reference = _distributions(gap, distribution)
    torch.manual_seed(seed)
    samples = policy.sample((1, num_samples))  # (1, N): one "completion" of N tokens
    logps, ref_logps = policy.log_prob(samples), reference.log_prob(samples)
    values = {name: estimator(logps, ref_logps)[0].numpy() for name, estimator in ESTIMATORS.items()}
    return float(kl_divergence(policy, reference)), values


def kl_estimator_stats(gaps: Sequence[float], distribution: str = "gaussian", num_samples: int = 20_000,
                       seed: int = 0) -> dict[str, np.ndarray]:
    """True KL and each estimator's mean and std over samples, for every gap.

    Returns:
        `"gap"`, `"true_kl"`: `(G,)`; `"<k>_mean"`, `"<k>_std"` for k in k1, k2, k3: `(G,)`.
    """
    stats: dict[str, list[float]] = {"gap": [], "true_kl": []}
    for gap in gaps:
        true_kl, values = kl_estimator_samples(gap, distribution, num_samples, seed)
        stats["gap"].append(float(gap))
        stats["true_kl"].append(true_kl)
        for name, samples in values.items():
            stats.setdefault(f"{name}_mean", []).append(float(samples.mean()))
            stats.setdefault(f"{name}_std", []).append(float(samples.std()))
    return {key: np.asarray(value) for key, value in stats.items()}


def plot_kl_estimators(gap: float = 1.0, distribution: str = "gaussian", max_gap: float = 2.0,
                       num_samples: int = 20_000, seed: int = 0) -> Figure:
    """Mean (bias) and std (variance) of k1/k2/k3 vs the gap, and their histograms at `gap`.

    Args:
        gap: the distance drawn in the histogram panel (a vertical line on the others).
        distribution: `"gaussian"` or `"categorical"`.
        max_gap: right end of the gap axis (25 gaps from 0).
        num_samples: samples per gap.
        seed: sampling seed.

    Returns:
        A Figure with 3 axes: means vs gap (lines k1, k2, k3, then the true KL),
        stds vs gap (k1, k2, k3), and histograms of the per-sample values at `gap`.
    """
    gaps = np.linspace(0.0, max_gap, 25)
    stats = kl_estimator_stats(gaps, distribution, num_samples, seed)
    true_kl, samples = kl_estimator_samples(gap, distribution, num_samples, seed)
    fig = new_figure(13, 4.2)
    mean_ax, std_ax, hist_ax = fig.subplots(1, 3)
    for name in ESTIMATORS:
        mean_ax.plot(gaps, stats[f"{name}_mean"], color=_COLORS[name], label=f"E[{name}]")
        std_ax.plot(gaps, stats[f"{name}_std"], color=_COLORS[name], label=name)
    mean_ax.plot(gaps, stats["true_kl"], color="black", linestyle="--", label="true KL")
    for ax in (mean_ax, std_ax):
        ax.axvline(gap, color="0.5", linestyle=":")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xlabel("gap between pi and ref")
    mean_ax.set(title="Bias: mean of the estimate", ylabel="KL(pi || ref)")
    std_ax.set(title="Variance: std of one-sample estimates", ylabel="std")
    low, high = np.percentile(np.concatenate(list(samples.values())), [0.5, 99.5])
    bins = np.linspace(low, high, 60)
    for name, values in samples.items():
        hist_ax.hist(values, bins=bins, color=_COLORS[name], alpha=0.45, density=True,
                     label=f"{name}: mean {values.mean():.3f}, std {values.std():.3f}")
    hist_ax.axvline(true_kl, color="black", linestyle="--", label=f"true KL {true_kl:.3f}")
    hist_ax.set(title=f"One-sample estimates at gap = {gap:g}", xlabel="estimate", ylabel="density")
    hist_ax.legend(fontsize=7)
    family = "pi = N(0,1), ref = N(gap,1)" if distribution == "gaussian" else \
        f"categorical over {_VOCAB} tokens, ref logits shifted by gap"
    fig.suptitle(f"KL estimators from samples of pi ({family}, {num_samples} samples per gap)", fontsize=11)
    return fig


def kl_explorer() -> object:
    """Widget: a gap slider and the distribution family (`plot_kl_estimators`)."""
    import ipywidgets as widgets

    controls = {
        "gap": widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.05, description="gap",
                                   continuous_update=False),
        "distribution": widgets.Dropdown(options=["gaussian", "categorical"], value="gaussian",
                                         description="family"),
    }
    return build_explorer(lambda gap, distribution: plot_kl_estimators(gap, distribution, num_samples=5_000),
                          controls, columns=2)
