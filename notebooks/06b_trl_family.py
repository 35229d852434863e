# %% [markdown]
# # Lesson 06b — The TRL 1.16 family: CISPO, SAPO, LUSPO, VESPO, entropy, the off-policy mask
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/06b_trl_family.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 24 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# Lesson 06 kept PPO's clipped surrogate and changed what surrounds it: the averaging,
# the advantage scale, the clip range, the ratio's level. The losses of this lesson change
# the surrogate itself, or choose **which tokens and completions** train at all. TRL 1.16
# ships each of them behind a config field, and `course_lib` computes each one to 1e-6 of
# TRL's `_compute_loss` (`tests/lib/test_losses_trl_parity_modern.py`):
#
# | field | what it changes in the gradient | from |
# |---|---|---|
# | `loss_type="cispo"` | the weight of `∇log π` is the detached ratio, capped; never 0 | MiniMax-M1 (2025) |
# | `loss_type="sapo"` | a smooth gate instead of the hard clip | SAPO (2025) |
# | `loss_type="luspo"` | GSPO's sequence loss times the sequence's length | LUSPO (2026) |
# | `loss_type="vespo"` | a smooth, gamma-shaped weight of the whole sequence ratio | VESPO (2026) |
# | `top_entropy_quantile` | trains only the highest-entropy tokens | Wang et al. 2025 |
# | `entropy_coef`, `use_adaptive_entropy` | adds an entropy bonus, optionally steered to a target | classic bonus; the adaptive controller from Skywork-OR1 (2025) |
# | `off_policy_mask_threshold` | drops negative-advantage completions the policy drifted far from | DeepSeek-V3.2 |
#
# You will write CISPO's per-token loss and the high-entropy token mask.

# %%
# On Colab (or with COURSE_SETUP=1): clone the course, install what the runtime lacks, keep its torch.
# COURSE_REPO_URL and COURSE_DIR choose another repository or folder (README, "On Colab").
import importlib, importlib.util, os, subprocess, sys  # noqa: E401

if importlib.util.find_spec("course_lib") is None:
    on_colab = "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
    if not (on_colab or os.environ.get("COURSE_SETUP") == "1"):
        raise ModuleNotFoundError("course_lib is not installed for this kernel: run `make lab` in the course folder, "
                                  "or set COURSE_SETUP=1 to clone and install it into this Python.")
    course_dir = os.environ.get("COURSE_DIR", "/content/course")
    if not os.path.isdir(course_dir):
        url = os.environ.get("COURSE_REPO_URL", "https://github.com/rl-for-llms/course")
        subprocess.run(["git", "clone", "-q", "--depth", "1", url, course_dir], check=True)
    subprocess.run([sys.executable, "-m", "course_lib.colab"], cwd=course_dir, check=True)
    sys.path.insert(0, course_dir)
    importlib.invalidate_caches()

# %% [markdown]
# ## 1. The hard clip silences tokens: CISPO and SAPO
#
# PPO's clip (lesson 06, section 4) has a side effect: a token whose ratio left the range
# in the direction its advantage pushes **gets no gradient at all**. For reasoning models
# this silences exactly the rare tokens that matter: "However", "Wait", "Recheck" are
# improbable under the old policy, so once they are reinforced their ratio quickly
# exceeds `1 + epsilon_high` and they stop learning for the rest of the batch. Two losses
# keep every token in the gradient:
#
# - **CISPO** (MiniMax-M1, 2025): clip the importance *weight* instead of the objective,
#   and detach it: `loss_t = −sg(min(r_t, ε_max)) · A · log π(y_t)`. The gradient is
#   `−min(r, ε_max) · A · ∇log π`: a token past the cap still learns, with a bounded
#   weight. `ε_max` is TRL's `epsilon_high` under `loss_type="cispo"`; ScaleRL (arXiv
#   2510.13786) uses 5.0. Like DAPO, CISPO averages over the tokens of the whole
#   accumulated batch.
# - **SAPO** (Soft Adaptive Policy Optimization, arXiv 2511.20347): replace the clip by a
#   smooth gate, `loss_t = −σ(τ (r − 1)) · 4/τ · A`. Its gradient weight on `∇log π` is
#   `4 σ(1 − σ) · r`, with `σ = σ(τ (r − 1))`; `τ` is `sapo_temperature_pos` (1.0) for
#   A > 0 and `sapo_temperature_neg` (1.05) for A ≤ 0. SAPO averages like `grpo`, per
#   sequence.
#
# Read SAPO's weight carefully: it is the product of two factors. The **gate**
# `4 σ(1 − σ)` is 1 at r = 1 and fades on both sides. The factor **r** grows. Below r = 1
# both shrink and the weight fades; above r = 1 the growing r wins at first, so the weight
# *rises* above 1, peaks near r = 2, and only falls below 1 again well past the clip
# range. The plot compares the weight each loss puts on a token's `∇log π` against its
# ratio, and the cell below measures SAPO's curve through `policy_loss`.

# %%
import numpy as np
import torch
from IPython.display import display

from course_lib.widgets.clipping import loss_weight_curve, plot_loss_weights

display(plot_loss_weights(epsilon=0.2, epsilon_high=0.28, cispo_max=5.0))
ratios = np.linspace(0.01, 6.0, 5991)
for advantage, tau_name in ((1.0, "sapo_temperature_pos = 1.0"), (-1.0, "sapo_temperature_neg = 1.05")):
    weight = loss_weight_curve(ratios, advantage, "sapo")
    peak = weight.argmax()
    above_one = ratios[(weight >= 1.0) & (ratios >= 1.0)]
    at = {r: float(loss_weight_curve([r], advantage, "sapo")[0]) for r in (0.5, 1.0, 2.0, 3.0, 4.0)}
    print(f"A = {advantage:+g} ({tau_name}): weight " + ", ".join(f"{v:.2f} at r = {r:g}" for r, v in at.items())
          + f"; peak {weight[peak]:.2f} at r = {ratios[peak]:.2f}; >= 1 for r in [1, {above_one.max():.2f}]")

# %% [markdown]
# So with TRL's temperatures SAPO's weight is about 1.57 at r = 2 and stays at or above 1
# up to r ≈ 3.3 to 3.5 (the cell's numbers): SAPO does not damp a token that has gained
# probability, it pushes it *harder* than an on-policy token until the ratio is far out.
# What SAPO removes is the cliff, not the push: its weight changes smoothly where the
# hard clip jumps from r to 0. CISPO's weight is simply `min(r, 5)`.
#
# ## Exercise 1 — CISPO's per-token loss
#
# Open `exercises/ex06b_trl_family.py` and implement
# `cispo_per_token_loss(logps, old_logps, advantages, epsilon_max)`. The check compares
# values *and* gradients with `policy_loss(..., loss_type="cispo")`: the whole point is
# which part carries the gradient.

# %%
from course_lib.checks import ex06b
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex06b_trl_family")
feedback(ex06b.check_cispo_per_token_loss, ex.cispo_per_token_loss);

# %% [markdown]
# ## 2. Sequence-level weights: LUSPO and VESPO
#
# GSPO (lesson 06, section 5) gives each completion one ratio, the geometric mean of its
# token ratios, and its own objective averages each completion's tokens (`loss_type="grpo"`).
# Two refinements in TRL 1.16 change what multiplies that sequence:
#
# - **LUSPO** (Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261) notices that
#   the per-sequence average gives a long completion the same total push as a short one,
#   the length bias of lesson 06 at the sequence level. It **sums** each completion's
#   tokens instead, so the push grows with the length. Use it with
#   `importance_sampling_level="sequence"`.
# - **VESPO** (arXiv 2602.10693) replaces the clip on the sequence ratio `w` (the
#   *product* of the token ratios, times the sampler correction) by a smooth weight,
#   `φ(w) = e^{λ} w^{k} e^{−λw}`, detached, with `φ(1) = 1`: a gamma-shaped bump that
#   fades to 0 for very small and very large `w`. TRL's defaults are `k = 2, λ = 3` for
#   A > 0 and `k = 3, λ = 2` for A < 0, so the bump peaks at `w = k/λ`: below 1 for good
#   completions, above 1 for bad ones.
#
# The cell checks both: the total gradient each completion of two (2 and 8 tokens, same
# ratios) receives under GSPO and LUSPO, and VESPO's φ read from `policy_loss`'s metric
# against the formula.

# %%
import math

from course_lib.algos.grpo import policy_loss

lengths = torch.tensor([2, 8])
mask = (torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)).double()  # (B=2, T=8)
for loss_type in ("grpo", "luspo"):
    logps = torch.full((2, 8), -1.0, dtype=torch.float64, requires_grad=True)
    out = policy_loss(logps, logps.detach(), torch.tensor([1.0, 1.0], dtype=torch.float64), mask,
                      loss_type=loss_type, importance_sampling_level="sequence")
    (grad,) = torch.autograd.grad(out.loss, logps)
    totals = (-grad * mask).sum(1)
    print(f"{loss_type:<5} (sequence level): total push on the 2-token completion {totals[0]:.3f}, "
          f"on the 8-token one {totals[1]:.3f}")

for advantage, k, lam in ((1.0, 2.0, 3.0), (-1.0, 3.0, 2.0)):
    row = []
    for w in (0.25, 0.5, 1.0, 1.5, 2.0, 4.0):
        logps = torch.tensor([[math.log(w)]], dtype=torch.float64)
        out = policy_loss(logps, torch.zeros_like(logps), torch.tensor([advantage], dtype=torch.float64),
                          torch.ones_like(logps), loss_type="vespo")
        formula = math.exp(lam + k * math.log(w) - lam * w)
        row.append(f"w={w:g}: {out.metrics['vespo/phi_seq_mean']:.3f} ({formula:.3f})")
    print(f"VESPO phi, A = {advantage:+g}, k = {k:g}, lambda = {lam:g}, peak at w = {k / lam:.2f}: " + ", ".join(row))

# %% [markdown]
# Under GSPO's per-sequence mean both completions get the same total push (0.5 each: the
# mean over the two completions); LUSPO gives each token the same weight, so the 8-token completion
# gets four times the 2-token one. VESPO's φ, read from the loss (formula in brackets),
# is 1 at w = 1, and for a good completion it *shrinks* the weight as soon as the
# completion became more likely than when it was sampled (w > 1), softly, where a clip
# would cut.
#
# ## 3. Which tokens train: the high-entropy mask
#
# Wang et al. (2025, "Beyond the 80/20 Rule") measured that in chain-of-thought, most
# tokens are near-certain continuations and a minority, about 20%, are **forking tokens**
# where the model hesitates between paths ("so", "wait", "let", a choice of method), with
# high entropy. Training on those alone matched or beat training on all tokens in their
# runs. TRL's `top_entropy_quantile=ρ` keeps in the policy loss only the top-ρ fraction of
# tokens by entropy: the cut is the `1 − ρ` quantile of the valid tokens' entropies over
# the micro-batch, gathered across processes (so it varies with the micro-batch size: with
# `per_device_train_batch_size=1` the top 20% is taken within each completion), and ties
# at the cut are kept. The entropies come from
# the fused log-prob kernel (lesson 10), exactly, without a `(B, T, V)` tensor.
#
# **Where `course_lib` is stricter than TRL.** TRL documents the range as [0, 1] and
# accepts `top_entropy_quantile=0.0`: its cut is then the batch's largest entropy, so only
# the single most uncertain token (or the tokens tied with it) trains, out of the whole
# batch. `course_lib` refuses 0.0 with an error: a run that trains one token per batch is
# almost surely a typo for 0.2 or 1.0. The cell shows both on the same entropies.

# %%
import warnings
from types import SimpleNamespace

import trl

from course_lib.algos import GRPOConfig
from course_lib.ops.entropy import high_entropy_mask

generator = torch.Generator().manual_seed(0)
entropies = torch.rand(4, 10, generator=generator) * 2.0  # (B, T) nats
lengths = torch.tensor([10, 7, 4, 9])
mask = (torch.arange(10).unsqueeze(0) < lengths.unsqueeze(1)).float()
one_process = SimpleNamespace(accelerator=SimpleNamespace(pad_across_processes=lambda t, **_: t, gather=lambda t: t))
for quantile in (1.0, 0.5, 0.2, 0.0):
    trl_mask = trl.GRPOTrainer.get_high_entropy_mask(one_process, entropies, mask, 1 - quantile)
    try:
        ours = high_entropy_mask(entropies, mask, quantile)
        same = "same mask" if torch.equal(ours, trl_mask) else "DIFFERENT mask"
    except ValueError:
        same = "course_lib refuses it"
    print(f"top_entropy_quantile={quantile}: TRL keeps {int(trl_mask.sum())} of {int(mask.sum())} tokens; {same}")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl.GRPOConfig(output_dir="unused", use_cpu=True, top_entropy_quantile=0.0)
print("trl.GRPOConfig(top_entropy_quantile=0.0): accepted")
try:
    GRPOConfig(top_entropy_quantile=0.0)
except ValueError as error:
    print("course_lib GRPOConfig(top_entropy_quantile=0.0): refused:", error)

# %% [markdown]
# ## Exercise 2 — the high-entropy token mask
#
# Implement `high_entropy_token_mask(entropies, mask, quantile)`: the tokens the loss keeps
# under `top_entropy_quantile=quantile`. The check compares it with TRL's rule on padded
# batches, with ties, and with an all-padded batch.

# %%
feedback(ex06b.check_high_entropy_token_mask, ex.high_entropy_token_mask);

# %% [markdown]
# ## 4. The entropy bonus, fixed or steered
#
# The oldest lever on exploration: subtract the mean entropy of the policy from the loss,
# `L = L_policy − c · H̄`, so that gradient descent also raises the entropy. TRL 1.16's
# `entropy_coef=c` does it with `H̄` a plain token mean (whatever the loss type's
# normaliser, so `c` means the same for every loss). With `use_adaptive_entropy=True`,
# `c` is steered toward `entropy_target` (0.2 nats per token by default): after each
# optimizer step it rises by `entropy_coef_delta` (0.005) if the step's entropy was at or
# below the target and falls by the same amount otherwise, within
# [`entropy_coef_min`, `entropy_coef_max`]; and the bonus is applied only while the last
# measured entropy is at or below the target. A bang-bang controller: it does nothing
# while the policy explores enough, and pushes back harder each step the entropy stays
# collapsed. The cell checks the bonus's effect on the loss, then runs the controller on a
# made-up entropy trace that collapses and recovers.

# %%
from course_lib.ops.entropy import AdaptiveEntropyCoef

logps = -torch.rand(4, 10, generator=generator, dtype=torch.float64)
mask64, entropies64 = mask.double(), entropies.double()
advantages = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
plain = policy_loss(logps, None, advantages, mask64, loss_type="dapo", entropies=entropies64).loss
bonus = policy_loss(logps, None, advantages, mask64, loss_type="dapo", entropies=entropies64, entropy_coef=0.01).loss
token_mean = (entropies64 * mask64).sum() / mask64.sum()
print(f"loss without bonus {plain.item():+.5f}, with entropy_coef=0.01 {bonus.item():+.5f}; "
      f"difference {(plain - bonus).item():.5f} = 0.01 x mean entropy {token_mean.item():.4f}")

control = AdaptiveEntropyCoef(coef=0.0, adaptive=True, delta=0.005, target=0.2)
trace = [0.5, 0.3, 0.18, 0.15, 0.12, 0.14, 0.19, 0.25, 0.4]  # the mean entropy of each optimizer step
for step, entropy in enumerate(trace, start=1):
    applied = control.coef_to_apply()
    control.observe(torch.tensor([[entropy]]), torch.ones(1, 1), end_of_step=True)
    print(f"step {step}: entropy {entropy:.2f} -> bonus applied this step {applied:.3f}, coefficient now {control.coef:.3f}")

# %% [markdown]
# ## 5. The off-policy mask
#
# DeepSeek-V3.2 (2025) drops from the loss a completion whose advantage is **negative**
# and whose sampler has drifted far from the current policy: the mean over its tokens of
# `log π_sampler − log π_θ`, an estimate of KL(sampler ‖ current), above
# `off_policy_mask_threshold`. Pushing down a sample the current policy would hardly
# produce any more mostly adds noise, and a large negative step on an unlikely sequence
# is exactly what destabilises long off-policy training. Positive-advantage completions
# are always kept: learning from a good sample stays useful even when it is stale. The
# cell builds four completions, two good and two bad, one of each drifted.

# %%
from course_lib.ops.importance import off_policy_sequence_mask

tokens = torch.ones(4, 5, dtype=torch.float64)
sampling_logps = torch.full((4, 5), -1.0, dtype=torch.float64)
drift = torch.tensor([0.05, 1.0, 0.05, 1.0], dtype=torch.float64).unsqueeze(1)  # mean KL per token
current_logps = sampling_logps - drift  # the policy now finds rows 1 and 3 much less likely
advantages = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
keep = off_policy_sequence_mask(advantages.unsqueeze(1), current_logps, sampling_logps, tokens, threshold=0.5)
for row in range(4):
    print(f"completion {row}: advantage {advantages[row]:+.0f}, drift {drift[row, 0]:.2f} -> "
          f"{'kept' if keep[row, 0] else 'dropped'}")
logps = current_logps.clone().requires_grad_(True)
out = policy_loss(logps, None, advantages, tokens, loss_type="dapo", sampling_logps=sampling_logps,
                  off_policy_mask_threshold=0.5)
(grad,) = torch.autograd.grad(out.loss, logps)
print("gradient per completion through policy_loss:", [round(v, 3) for v in grad.abs().sum(1).tolist()])

# %% [markdown]
# ## 6. All of them in one config
#
# They combine: a CISPO run on the forking tokens with a small entropy bonus and the
# off-policy mask is one `GRPOConfig` (the same field names work in TRL), validated like
# any other setting:

# %%
recipe = dict(loss_type="cispo", epsilon_high=5.0, top_entropy_quantile=0.2, entropy_coef=0.001,
              off_policy_mask_threshold=0.5)
print({name: getattr(GRPOConfig(**recipe), name) for name in recipe})

# %% [markdown]
# ## Questions
#
# 1. A good token's ratio reached 2.0 in the second pass over a batch (`num_iterations=2`).
#    How much gradient does it get under `dapo` (epsilon_high 0.28), `cispo` (5.0) and
#    `sapo`? Read the answers off the weight plot, then say which loss would keep pushing
#    it up and why that can be both the point and a risk.
# 2. The off-policy mask drops only negative-advantage completions. What could go wrong if
#    it dropped drifted positive-advantage completions too?
# 3. With `top_entropy_quantile=0.2`, 80% of the tokens get no policy gradient. Do they
#    still change during training? (Think of shared parameters, and of the KL term when
#    `beta > 0`.)

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("06b", k)`
# prints the answer to question k (`show_answer("06b")` prints them all). They are also in
# `notebooks/answers/06b_trl_family.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("06b", 1)
