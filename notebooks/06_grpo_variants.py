# %% [markdown]
# # Lesson 06 — GRPO variants: DAPO, Dr. GRPO, GSPO, two-sided clipping
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/06_grpo_variants.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 45 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# Within a year of GRPO, several papers found biases and instabilities in it and proposed
# fixes. TRL (and `course_lib`) expose each fix as a config field, so you can switch them
# on one at a time. This lesson goes through them field by field:
#
# | field | default | what it changes | from |
# |---|---|---|---|
# | `loss_type` | `"dapo"` | how per-token losses are averaged (length bias) | GRPO, BNPO, Dr. GRPO, DAPO |
# | `scale_rewards` | `"group"` | what the advantages are divided by (difficulty bias) | GRPO, PPO-Lite, Dr. GRPO |
# | `epsilon`, `epsilon_high` | 0.2, None | the clip range, asymmetric ("clip-higher") | PPO, DAPO |
# | `delta` | None | a cap on the ratio for negative advantages | dual-clip PPO, INTELLECT-2 |
# | `importance_sampling_level` | `"token"` | one ratio per token or per sequence | GSPO |
# | `mask_truncated_completions` | False | drop completions that hit the length limit | DAPO |
# | `num_iterations` | 1 | passes over each generation batch (μ) | GRPO / PPO epochs |
# | `beta` | 0.0 | KL penalty; 0 loads no reference model | GRPO |
#
# You will write three of them: the four loss aggregations, the two-sided clipped
# objective, and GSPO's sequence-level ratio. The losses that replace the clip itself
# (CISPO, SAPO, LUSPO, VESPO) and the levers on which tokens train (entropy masking and
# bonus, the off-policy mask) have their own lesson, 06b.

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
# ## 1. `loss_type`: how the tokens are averaged
#
# The clipped surrogate gives one loss value per token, $\ell_{i,t}$ (lesson 05). The batch
# has B completions of different lengths $L_i$. The four loss types differ only in how they
# turn the $\ell_{i,t}$ into one number:
#
# | `loss_type` | normaliser | per-token weight |
# |---|---|---|
# | `grpo` | each sequence by its own length, then the mean over sequences | $1 / (B \cdot L_i)$ |
# | `bnpo` | active (unmasked) tokens of the **local** batch | $1 / \sum_i L_i$ |
# | `dr_grpo` | a **global constant**, B × `max_completion_length` | $1 / (B \cdot L_{\max})$ |
# | `dapo` (default) | active tokens of the **global accumulated** batch | $1 / N_{\text{tokens}}$ |
#
# With `grpo`, every completion carries the same total weight, so each token of a short
# completion weighs more than each token of a long one. That is a **length bias**:
#
# - a short *correct* answer is reinforced more strongly, token for token, than a long one;
# - a long *wrong* answer is punished less per token than a short one, so an update that
#   makes wrong answers longer lowers the loss. Models trained this way tend to produce
#   ever longer wrong answers (the Dr. GRPO paper's diagnosis).
#
# For this reason `grpo` is **not recommended** any more. `dr_grpo` (Dr. GRPO) divides by a
# constant, about `max_completion_length`, so every token weighs the same and removes the
# bias. `dapo` (DAPO, TRL's default) divides by the number of active tokens in the whole
# accumulated batch, which also gives every token the same weight and keeps the loss on a
# natural scale. `bnpo` divides by the active tokens of the local micro-batch only: its
# scale then depends on the local batch size, and with `per_device_train_batch_size == 1`
# it is exactly `grpo`.
#
# The explorer shows the weight of one token (the gradient of the loss with respect to its
# log-prob) against the length of its completion, for a batch of completions of lengths
# 4 to 128 and advantage 1.

# %%
from IPython.display import display

from course_lib.widgets.normalization import normalization_explorer, plot_loss_normalization, per_token_weights

display(plot_loss_normalization([4, 8, 16, 32, 64, 128], max_completion_length=128))

# %%
try:
    import ipywidgets  # noqa: F401

    display(normalization_explorer())
except ImportError:
    print("ipywidgets is not installed: the explorer is skipped (pip install ipywidgets).")

# %% [markdown]
# Two of the claims above, checked with `course_lib.algos.grpo.policy_loss`: `bnpo` equals
# `grpo` when the micro-batch holds one completion, and with gradient accumulation `dapo`
# normalises by the tokens of the whole accumulated batch, so the micro-batch losses add
# up to the token mean of the full batch, whatever their sizes. `bnpo` instead gives each
# micro-batch the same weight, so the tokens of a small micro-batch count more.
#
# A check on fresh samples would prove nothing: on-policy every ratio is 1, each token's
# loss is just −A, and *any* average of a constant is that constant. So the check below
# moves the policy first (`old_logps` are the log-probs before a pretend update, as on a
# second pass with `num_iterations=2`): the ratios spread around 1, some tokens clip, and
# we compare the loss values **and** their gradients. The same comparison on the
# four-completion batch shows that it can fail.

# %%
import torch

from course_lib.algos.grpo import policy_loss

generator = torch.Generator().manual_seed(0)
lengths = torch.tensor([3, 9, 2, 6])
mask = (torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (B=4, T=9), right-padded
old_logps = -torch.rand(4, 9, generator=generator)  # log-probs when the completions were sampled
logps = old_logps + 0.3 * torch.randn(4, 9, generator=generator)  # after an update: ratios spread around 1
advantages = torch.tensor([1.0, -0.5, 0.8, -1.2])
ratio = (logps - old_logps).exp()[mask.bool()]
print(f"ratios: {ratio.min():.2f} to {ratio.max():.2f}, {((ratio < 0.8) | (ratio > 1.2)).float().mean():.0%} "
      "of the tokens outside [0.8, 1.2]")


def loss_and_grad(rows: slice, loss_type: str) -> tuple[float, torch.Tensor]:
    """policy_loss on the rows, and its gradient with respect to their log-probs."""
    current = logps[rows].clone().requires_grad_(True)
    loss = policy_loss(current, old_logps[rows], advantages[rows], mask[rows], loss_type=loss_type).loss
    return loss.item(), torch.autograd.grad(loss, current)[0]


for rows, label in ((slice(1, 2), "B = 1"), (slice(0, 4), "B = 4")):
    (grpo_loss, grpo_grad), (bnpo_loss, bnpo_grad) = loss_and_grad(rows, "grpo"), loss_and_grad(rows, "bnpo")
    print(f"{label}: loss grpo {grpo_loss:+.4f}, bnpo {bnpo_loss:+.4f}; "
          f"largest gradient difference {(grpo_grad - bnpo_grad).abs().max():.1e}")

full = policy_loss(logps, old_logps, advantages, mask, loss_type="bnpo").loss  # the token mean of the whole batch
micro = [slice(0, 1), slice(1, 4)]  # two micro-batches of 1 and 3 completions, accumulated
tokens = int(mask.sum())
dapo = sum(policy_loss(logps[s], old_logps[s], advantages[s], mask[s], loss_type="dapo", num_items_in_batch=tokens,
                       gradient_accumulation_steps=2).loss for s in micro)
bnpo = sum(policy_loss(logps[s], old_logps[s], advantages[s], mask[s], loss_type="bnpo",
                       gradient_accumulation_steps=2).loss for s in micro)
print(f"token mean of the full batch: {full.item():+.4f}")
print(f"dapo, 2 micro-batches summed: {dapo.item():+.4f}   (same: one weight per token)")
print(f"bnpo, 2 micro-batches summed: {bnpo.item():+.4f}   (differs: the small micro-batch weighs as much as the big)")
print("per-token weights for lengths 3, 9, 2, 6:")
for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
    weights = per_token_weights([3, 9, 2, 6], loss_type, max_completion_length=16)
    print(f"  {loss_type:<8}", [round(float(w), 4) for w in weights])

# %% [markdown]
# ## Exercise 1 — the four aggregations
#
# Open `exercises/ex06_grpo_variants.py` and implement
# `aggregate_loss(per_token_loss, mask, loss_type, max_completion_length, num_items)`.
# The check compares it with `course_lib.algos.grpo.policy_loss` on a padded batch.

# %%
from course_lib.checks import ex06
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex06_grpo_variants")
feedback(ex06.check_aggregate_loss, ex.aggregate_loss);

# %% [markdown]
# ## 2. The length bias, measured
#
# The course's arithmetic answers take three or four tokens, which leaves no room for a
# length bias to show: on that task `grpo`, `dr_grpo` and `dapo` runs produce the same
# lengths. So we isolate it. `course_lib.toy.length_bias` is a policy whose only free
# choice is **when to stop**. A completion is `[answer, filler × n, EOS]`; the answer is
# correct or wrong with probability 1/2 (not learnable, so the reward cannot depend on the
# length), and after it every position emits EOS with probability `p = sigmoid(θ)`, one
# length logit `θ` for correct answers and one for wrong ones. The tokens' log-probs go
# into `course_lib.algos.grpo.policy_loss`, the same function the trainer calls, so the
# gradient on each length logit is exactly what each `loss_type` produces.
#
# First, one group by hand: two correct answers of 4 tokens and two wrong ones of 64,
# and the weight each token gets (`−∂loss/∂log π`, from autograd).

# %%
import math

from course_lib.algos.grpo import group_advantages

lengths = torch.tensor([4, 4, 64, 64])
mask = (torch.arange(64).unsqueeze(0) < lengths.unsqueeze(1)).double()  # (4, 64)
advantages = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), 4).double()  # correct +0.87, wrong -0.87
print(f"{'loss_type':<9} {'per token, correct (L=4)':>25} {'per token, wrong (L=64)':>24} {'whole wrong answer':>19}")
for loss_type in ("grpo", "dr_grpo", "dapo"):
    logps = torch.zeros_like(mask, requires_grad=True)
    loss = policy_loss(logps, None, advantages, mask, loss_type=loss_type, max_completion_length=64).loss
    (grad,) = torch.autograd.grad(loss, logps)
    print(f"{loss_type:<9} {-grad[0, 0].item():>+25.5f} {-grad[2, 0].item():>+24.5f} {-grad[2].sum().item():>+19.4f}")

# %% [markdown]
# Under `grpo` each wrong token of the long answers is pushed down 16 times less than a
# correct token of the short ones is pushed up (1/64 against 1/4 of the same |A|), while
# each whole answer gets the same total push. Under `dr_grpo` and `dapo` every token has
# the same |weight|, so a long wrong answer takes 16 times the total push of a short one.
#
# What does that do to the length? For one completion with n fillers, the sum over its
# tokens of `∂ log π / ∂θ` is `1 − (n + 1) p`, which is zero on average when n follows the
# policy's own geometric distribution. A loss that weighs every token alike therefore has
# no expected pull on the length. `grpo` multiplies each completion's sum by `A / L`, and
# short completions (where the sum is positive) get the larger factor, so the average is
# no longer zero: measured below over 400 sampled batches of 8 groups × 8 completions,
# starting at `p = 1/16` (17 tokens on average, limit 128).

# %%
from course_lib.toy.length_bias import CORRECT, WRONG, length_logit_gradient, sample_batch, train_length_policy

theta = torch.full((2,), math.log(1 / 15), dtype=torch.float64)  # p = 1/16 for both answers
length_generator = torch.Generator().manual_seed(0)
for loss_type in ("grpo", "dr_grpo", "dapo"):
    grads = torch.stack([length_logit_gradient(theta, sample_batch(theta, 8, 8, 128, length_generator), loss_type,
                                               max_completion_length=128, num_generations=8) for _ in range(400)])
    mean, stderr = grads.mean(0), grads.std(0) / math.sqrt(len(grads))
    print(f"{loss_type:<8} d loss / d theta_wrong {mean[WRONG]:+.5f} ± {stderr[WRONG]:.5f}   "
          f"d loss / d theta_correct {mean[CORRECT]:+.5f} ± {stderr[CORRECT]:.5f}   (mean ± standard error)")

# %% [markdown]
# Under `grpo` the gradient on the wrong answers' EOS logit is positive, tens of standard
# errors away from zero: gradient descent **lowers** their probability of stopping, so
# wrong answers get longer, and the correct ones get shorter (measured: +0.033 and
# −0.034, each about 60 standard errors from zero). Under `dr_grpo` both means are within
# two standard errors of zero. `dapo` divides by the batch's token count, which itself
# grows with the lengths; that leaves a trace (+0.0007 ± 0.0003 on the wrong answers,
# 2% of `grpo`'s pull).
#
# Now train: plain SGD on the two logits, 100 updates, 5 seeds per loss type. `dr_grpo`
# divides by `max_completion_length` = 128 instead of ~17 tokens, so its gradients are
# about 7.5 times smaller; its learning rate is scaled up by 128/17 so that all three take
# steps of the same size at the start.

# %%
import matplotlib.pyplot as plt

learning_rates = {"grpo": 0.5, "dr_grpo": 0.5 * 128 / 17, "dapo": 0.5}
length_runs = {loss_type: [train_length_policy(loss_type, steps=100, learning_rate=lr, seed=seed) for seed in range(5)]
               for loss_type, lr in learning_rates.items()}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
styles = {"grpo": dict(color="tab:red", label="grpo: mean per completion"),
          "dr_grpo": dict(color="tab:blue", label="dr_grpo: constant divisor"),
          "dapo": dict(color="tab:green", linestyle="--", label="dapo: mean over the batch's tokens")}
for ax, which in zip(axes, ("wrong_length", "correct_length")):
    for loss_type, runs in length_runs.items():
        for index, one in enumerate(runs):
            style = styles[loss_type] if index == 0 else {**styles[loss_type], "label": None}
            ax.plot(getattr(one, which), alpha=0.7, linewidth=1, **style)
    ax.set(title=f"expected length of {which.split('_')[0]} answers", xlabel="SGD update")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("tokens")
axes[0].legend(fontsize=8)
fig.suptitle("Reward independent of length; only the loss averaging differs (5 seeds each)", fontsize=10)
fig.tight_layout()
plt.show()
for loss_type, runs in length_runs.items():
    wrong = torch.tensor([one.wrong_length[-1] for one in runs])
    correct = torch.tensor([one.correct_length[-1] for one in runs])
    print(f"{loss_type:<8} after 100 updates: wrong answers {wrong.mean():5.1f} ± {wrong.std():.1f} tokens, "
          f"correct answers {correct.mean():5.1f} ± {correct.std():.1f} (started at 17.0)")

# %% [markdown]
# Measured here (the cell above, 5 seeds): under `grpo` the wrong answers grow from 17 to
# about 47 tokens and the correct ones shrink to about 4, although the reward never looks
# at the length; under `dr_grpo` and `dapo` both stay at 17 ± 1. That is the Dr. GRPO
# paper's diagnosis in its smallest form: with per-sequence averaging, the cheapest way to
# lose less on a wrong answer is to make it longer. In a real run you watch
# `completions/mean_length` (and its split by reward, if you log it): a length that keeps
# growing while the reward stalls is the symptom.
#
# The scales differ too: `dr_grpo` divides by B × `max_completion_length`, so its
# gradient is smaller than `dapo`'s whenever completions are shorter than the limit, and
# `scale_rewards="none"` keeps the raw reward scale instead of unit-variance groups.
# Changing the loss type or the scaling can therefore call for a different learning rate,
# as it did above.

# %% [markdown]
# ## 3. `scale_rewards`: what the advantages are divided by
#
# GRPO divides each group's centred rewards by the group's standard deviation. The options:
#
# - `"group"` (or `True`, the default): the std of each group, so every group has unit
#   variance;
# - `"batch"`: one std over the whole batch (the mean stays per group), as in PPO-Lite
#   ("Tricks or Traps", Liu et al. 2025);
# - `"none"` (or `False`): no division at all, as Dr. GRPO recommends.
#
# Why not divide? A prompt that the model almost always gets right (or almost always
# wrong) has a small std, and dividing by it **inflates** its advantages: a group with one
# correct answer out of eight gives that answer an advantage of +2.47, while a 50/50 group
# gives its correct answers only +0.94. The prompts that are too easy or too hard end up
# weighing most — a **difficulty bias**. Without scaling, the advantage is simply "reward
# minus the group mean", the same scale for every prompt.

# %%
from course_lib.algos.grpo import group_advantages
from course_lib.widgets.advantage import plot_advantages

rewards = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0,  1, 1, 1, 1, 0, 0, 0, 0], dtype=torch.float32)
for scaling in ("group", "batch", "none"):
    adv = group_advantages(rewards, 8, scale_rewards=scaling)
    print(f"{scaling:<6} hard prompt, correct answer: {adv[0]:+.3f}   50/50 prompt, correct answer: {adv[8]:+.3f}")
display(plot_advantages(rewards, num_generations=8, compare=True))

# %% [markdown]
# ## 4. Clipping: `epsilon`, `epsilon_high`, `delta`
#
# **`epsilon`** (default 0.2) is PPO's clip range: the probability ratio
# $r = \pi_\theta / \pi_{\text{old}}$ of a token is clipped to $[1-\varepsilon, 1+\varepsilon]$, that is
# **[0.8, 1.2]** by default. (Some documentation writes this range as "≈ [−1.2, 1.2]"; a
# ratio of probabilities is always positive, so read it as 1 ± 0.2. In log space, the
# clipped log-ratio lies in [log 0.8, log 1.2] ≈ [−0.22, 0.18].) When the ratio has left
# the range on the side the advantage pushes toward (r > 1 + ε with A > 0, r < 1 − ε with
# A < 0), the min picks the clipped term, which is flat: the token's gradient is **zero in
# every direction**. The update neither pushes it further out nor pulls it back; only the
# other tokens, through the shared parameters, still move it. On the other side (r < 1 − ε
# with A > 0, say) the unclipped term wins and the gradient is the full `A`.
#
# **`epsilon_high`** sets the upper bound separately: DAPO's "clip-higher" recommends
# `epsilon_high=0.28` with `epsilon=0.2`, so the range becomes [0.8, 1.28]. The change is
# **one-sided**: it only lets good tokens (A > 0) gain more probability per step. A token
# with probability 0.01 can only reach 0.012 within [0.8, 1.2]; a higher ceiling lets
# rarely sampled good tokens grow faster, which keeps the policy exploring (its entropy
# from collapsing). When `epsilon_high` is None it equals `epsilon`.
#
# **`delta`** enables **two-sided** clipping. The idea is dual-clip PPO (Ye et al. 2020,
# *Mastering Complex Control in MOBA Games*, a lower bound `c·A` with `c = 3` for A < 0);
# INTELLECT-2 brought it to LLM RL as a cap on the ratio. Standard clipping never bounds
# the ratio from above when A < 0: the objective `min(r·A, clip(r)·A)` keeps the unclipped
# `r·A`, which can be huge if a bad token's probability went up a lot since sampling. With
# `delta` the unclipped ratio is capped at `delta` as well. It should be `> 1 + epsilon`,
# so that it only bites beyond the normal clip range: the INTELLECT-2 run used `delta = 4`
# (section 4.1 of its report), Unsloth's guide suggests 1.5 (the value plotted below).

# %%
from course_lib.widgets.clipping import clip_explorer, plot_clip_objective

display(plot_clip_objective(epsilon=0.2, epsilon_high=0.28, delta=1.5))

# %%
try:
    import ipywidgets  # noqa: F401

    display(clip_explorer())
except ImportError:
    print("ipywidgets is not installed: the explorer is skipped (pip install ipywidgets).")

# %% [markdown]
# ## Exercise 2 — the two-sided clipped objective
#
# Implement `two_sided_clip_objective(ratio, advantages, epsilon, epsilon_high, delta)`:
# the per-token objective with clip-higher and the `delta` cap.

# %%
ex = load_exercise("ex06_grpo_variants")
feedback(ex06.check_two_sided_clip_objective, ex.two_sided_clip_objective);

# %% [markdown]
# ## 5. `importance_sampling_level`: token or sequence (GSPO)
#
# - `"token"` (default): one ratio per token, $r_{i,t}$, each clipped on its own;
# - `"sequence"`: one ratio per completion, the **geometric mean** of its token ratios,
#   $s_i = \exp\big(\frac{1}{L_i}\sum_t (\log\pi_\theta - \log\pi_{\text{old}})\big)$, applied to all
#   its tokens (GSPO, Zheng et al. 2025).
#
# The reward is given to the whole sequence, not to each token, so weighting the whole
# sequence by one importance ratio matches the unit that is rewarded. GSPO reports that
# this is often more stable, especially for long completions and mixture-of-experts
# models, where token ratios are noisy. Because each sequence already has one weight, TRL
# warns when the sequence level is combined with a loss type that sums over tokens: GSPO's
# own objective is `loss_type="grpo"`.
#
# **The clip range changes scale.** The log of the sequence ratio is the *mean* of the
# token log-ratios, so the deviations of the tokens largely average out: if the token
# log-ratios of a 1,000-token completion deviated independently by ±0.05, their mean would
# deviate by about 0.05 / √1000 ≈ 0.0016. A range of ±0.2 would almost never bind. GSPO
# therefore clips the sequence ratio to **[1 − 3·10⁻⁴, 1 + 4·10⁻⁴]** (GSPO paper, v2,
# section 5.1), and TRL's documented recipe for reproducing it is
#
# ```python
# GRPOConfig(importance_sampling_level="sequence", loss_type="grpo", beta=0.0,
#            epsilon=3e-4, epsilon_high=4e-4,
#            gradient_accumulation_steps=1, steps_per_generation=4)
# ```
#
# (four optimizer steps per generation batch, so that the ratio leaves 1 at all: on
# fresh samples every ratio is exactly 1 and the level makes no difference). Keeping
# TRL's default `epsilon=0.2` with `importance_sampling_level="sequence"` silently turns
# GSPO's clip off. The figure uses GSPO's range: a two-token completion, drawn over token
# ratios within ±0.0012 of 1. Below it, two completions checked with `policy_loss`: at the
# token level with ±0.2 only the token at 1.5 is clipped; at the sequence level ±0.2
# clips nothing (the geometric means are 1.004 and 1.16), while GSPO's range clips both.

# %%
from course_lib.widgets.clipping import plot_sequence_ratio

display(plot_sequence_ratio(epsilon=3e-4, epsilon_high=4e-4))
# Two completions of two tokens, A = +1: token ratios (1.05, 0.96) and (1.5, 0.9).
ratios = torch.tensor([[1.05, 0.96], [1.5, 0.9]])
print("sequence ratios (geometric means):", [round(v, 4) for v in ratios.log().mean(-1).exp().tolist()])
for level, eps, eps_high in (("token", 0.2, 0.2), ("sequence", 0.2, 0.2), ("sequence", 3e-4, 4e-4)):
    out = policy_loss(ratios.log(), torch.zeros_like(ratios), torch.ones(2), torch.ones_like(ratios),
                      loss_type="grpo", epsilon=eps, epsilon_high=eps_high, importance_sampling_level=level)
    print(f"{level:>8} level, clip [{1 - eps:g}, {1 + eps_high:g}]: "
          f"{out.metrics['clip_ratio/region_mean']:.0%} of the tokens clipped")
from course_lib.algos import GRPOConfig

gspo = GRPOConfig(importance_sampling_level="sequence", loss_type="grpo", beta=0.0, epsilon=3e-4, epsilon_high=4e-4,
                  gradient_accumulation_steps=1, steps_per_generation=4, per_device_train_batch_size=8, num_generations=8)
print("GSPO's recipe in course_lib:", {name: getattr(gspo, name) for name in
                                       ("importance_sampling_level", "epsilon", "epsilon_high", "steps_per_generation")})

# %% [markdown]
# ## Exercise 3 — the sequence-level ratio
#
# Implement `sequence_level_ratio(logps, old_logps, mask)`: one ratio per completion.

# %%
ex = load_exercise("ex06_grpo_variants")
feedback(ex06.check_sequence_level_ratio, ex.sequence_level_ratio);

# %% [markdown]
# ## 6. `mask_truncated_completions` and the NaN pitfall
#
# A completion that hits `max_completion_length` before its end-of-sequence token is
# **truncated**: its reward is often meaningless (the answer was cut off). DAPO recommends
# excluding such completions from the loss for stability ("overlong filtering"); with
# `mask_truncated_completions=True` every token of a completion without EOS gets mask 0.
#
# The pitfall is a division by zero, and it does not wait for a whole batch to be cut off.
# Every place that averages **per completion** divides by that completion's own count of
# valid tokens: the `grpo` (and `sapo`) loss, GSPO's sequence ratio (the mean log-ratio
# of the row), per-sequence statistics such as `clip_ratio/low_min`. A masked row makes
# that count 0, so **one** truncated completion in the batch gives 0 / 0 = NaN in its row,
# and the mean over rows is NaN for the whole batch. Only the batch-level averages
# (`bnpo`, `dapo`, the logged KL) need *every* completion truncated before they divide
# 0 by 0. (DAPO's two other fixes for long answers, the *soft overlong punishment*, a
# reward that falls as an answer nears the limit, and *dynamic sampling*, which refills
# the batch with groups whose rewards differ, are taught in lesson 13 §6, where the
# symptoms they cure appear; `course_lib.rewards.overlong` ships the first,
# `dynamic_sampling=True` the second.) And a row that is only **partly** masked (an ordinary padded completion) has its
# own trap: if a padded position holds `-inf` (the log-prob of a token the model gives
# probability 0, or a fill value), `-inf × 0` is NaN, so multiplying by the mask does not
# remove it. Worse, NaN reaches the gradient even when the forward value is repaired after
# the fact with `torch.where`: the backward pass of `x / 0` still computes 0 / 0. One NaN in
# a gradient poisons the optimizer state for good, which is why some guides advise
# leaving the flag off.
#
# That advice dates from older TRL versions. **TRL 1.16 clamps these denominators**
# (`mask.sum(...).clamp(min=1.0)` in its loss, for `grpo`/`sapo`, `bnpo`, GSPO's sequence
# ratio and the KL), so a masked row averages to 0 there too; the next cell reads the
# clamps out of TRL's installed source. `course_lib` does the same, and also overwrites
# padded positions with 0 before any exponential or product, which removes the `-inf`
# trap. (TRL's per-sequence *statistics*, `clip_ratio/low_min` and `high_max`, are not
# clamped: an empty row gives NaN there, and `nanmin`/`nanmax` skip it.) Below, one truncated completion out of four (the naive versions first), and one
# padded position holding `-inf`:

# %%
import inspect
import warnings

with warnings.catch_warnings():  # TRL 1.16 warns about the newer vLLM the course pins; not this lesson's topic
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
    import trl

    trl_loss_source = inspect.getsource(trl.GRPOTrainer._compute_loss)
print("`.clamp(min=1.0)` in TRL 1.16's _compute_loss:", trl_loss_source.count(".clamp(min=1.0)"),
      "times; those on a mask count:")
for line in trl_loss_source.splitlines():
    if "mask.sum(" in line and "clamp(min=1.0)" in line:
        print("   ", line.strip())

# %%
from course_lib.ops.masking import masked_mean

per_token_logps = torch.log(torch.rand(4, 6, generator=generator))
per_token_loss = torch.rand(4, 6, generator=generator)
is_eos = torch.tensor([True, True, True, False])  # the last completion hit the limit
completion_mask = torch.ones(4, 6) * is_eos.unsqueeze(1).float()  # mask_truncated_completions=True
completion_mask[0, 4:] = 0  # completion 0 is shorter: two padded positions
loss_rows = per_token_loss.clone().requires_grad_(True)
per_sequence = (loss_rows * completion_mask).sum(-1) / completion_mask.sum(-1)  # grpo's average, naively
print("naive per-sequence means:", [round(v, 3) for v in per_sequence.tolist()], "-> grpo loss", per_sequence.mean().item())
repaired = torch.where(completion_mask.sum(-1) > 0, per_sequence, torch.zeros_like(per_sequence)).mean()
repaired.backward()  # the backward of x / 0 is 0 / 0 = NaN, whatever torch.where kept
print(f"repaired with torch.where: loss {repaired.item():.4f}, but NaN gradients: {torch.isnan(loss_rows.grad).sum().item()}")
print("naive token mean (bnpo, KL metric):", round(((per_token_loss * completion_mask).sum() / completion_mask.sum()).item(), 4),
      "  finite: only an all-truncated batch breaks it;",
      "course_lib masked_mean of an all-zero mask:", masked_mean(per_token_loss, torch.zeros(4, 6)).item())

padded = per_token_logps.clone()
padded[0, 5] = -float("inf")  # a padded position of completion 0 holding -inf
print("naive masked sum of completion 0's log-probs:", (padded * completion_mask).sum(-1)[0].item(), "(-inf * 0 = nan)")
for loss_type, level in (("grpo", "token"), ("grpo", "sequence"), ("dapo", "token")):
    logps = padded.clone().requires_grad_(True)
    out = policy_loss(logps, per_token_logps.detach() - 0.1, torch.randn(4, generator=generator), completion_mask,
                      loss_type=loss_type, importance_sampling_level=level, beta=0.04,
                      ref_logps=torch.log(torch.rand(4, 6, generator=generator)))
    out.loss.backward()
    print(f"course_lib policy_loss ({loss_type}, {level}): loss {out.loss.item():+.4f}, kl {out.metrics['kl']:.4f}, "
          f"NaN gradients {torch.isnan(logps.grad).sum().item()}, gradient on the truncated row "
          f"{logps.grad[3].abs().sum().item():.1f}")

# %% [markdown]
# The same guard holds in a real run. With `max_completion_length=2` the tiny model never
# reaches its end-of-turn token (its answers take three tokens), so every completion is
# truncated and masked; the run still logs finite numbers and simply learns nothing.

# %%
import math
import os
from pathlib import Path

from course_lib.algos import GRPOConfig
from course_lib.data import get_task
from course_lib.machine import scaled
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))
reward_funcs = get_reward_functions(["correctness_first_number_reward"])
prompts = get_task("arithmetic", split="train", n=scaled(64, 2000), seed=0)


def run(name: str, **settings) -> tuple[Trainer, list[dict]]:
    """A short GRPO run on the tiny model; `settings` override the defaults below."""
    defaults = dict(output_dir=str(OUTPUT / "06" / name), overwrite_output_dir=True, num_generations=scaled(4, 8),
                    per_device_train_batch_size=scaled(8, 16),
                    max_completion_length=8, learning_rate=1e-4, logging_steps=1, save_steps=0, seed=0,
                    max_steps=scaled(4, 150))
    model, tokenizer = load_policy("tiny")
    trainer = Trainer(GRPOConfig(**{**defaults, **settings}), reward_funcs, prompts, model, tokenizer, progress=False)
    return trainer, trainer.train()


_, truncated = run("truncated", max_completion_length=2, mask_truncated_completions=True, beta=0.04,
                   max_steps=2)
for row in truncated:
    finite = all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    print(f"step {row['step']}: clipped_ratio {row['completions/clipped_ratio']:.2f}, loss {row['loss']:.3f}, "
          f"kl {row['kl']:.3f}, all metrics finite: {finite}")

# %% [markdown]
# ## 7. `num_iterations` (μ) and `beta`
#
# **`num_iterations`** is μ in the GRPO paper: how many times each generation batch is
# used, like PPO's epochs. With μ = 2 the **whole generation batch** is replayed: after
# the first pass over all its micro-batches (with its optimizer step or steps), a second
# full pass starts, again micro-batch by micro-batch, with optimizer steps of its own;
# only then are new completions generated. Each pass is its own set of updates, not a
# second forward of the same micro-batch inside one accumulation step. Generation is
# often the expensive part of a step (lesson 10 measures when), so reusing it is
# tempting; the price is that the second pass is **off-policy**: the policy has already
# moved, the ratio leaves 1, and the clip (section 4) can act. The table below (lesson 07
# explains it) shows the replay. In the short run below, with one optimizer step per
# pass, the odd steps train on fresh completions (every ratio exactly 1, so nothing can
# clip) and the even ones replay them after one update. A replayed token clips only if
# that single update moved its probability by more than 20%, so whether a replayed step
# shows clipping depends on the learning rate and the batch; the cell counts them rather
# than promising it.
#
# **`beta`** is the KL coefficient. With `beta=0.0` (the default in TRL and here) no
# reference model is loaded at all: less memory and one forward pass fewer per batch.
# A larger beta keeps the policy closer to the reference: safer, but slower to change.
#
# With `beta > 0` one more field matters: **`use_bias_correction_kl`** (default `True` in
# TRL 1.16 and here, from DeepSeek-V3.2) multiplies each token's k3 KL term by the
# importance ratio `r`. Its *value* on fresh samples is unchanged (r = 1), but `r` is
# differentiable, so the *gradient* gains a term `k3 · ∇log π` on every step, on-policy
# included: `∇(r · k3) = r ∇k3 + k3 ∇r`. The correction makes the KL gradient an unbiased
# estimate of the reverse KL's gradient. Turning it off (`False`) gives the older GRPO
# gradient. The second cell below measures the difference on a fresh batch.

# %%
from course_lib.schedule import format_schedule, schedule_table

print(format_schedule(schedule_table(per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                     num_generations=4, num_iterations=2, cycles=1)))
# A large learning rate, so that one update visibly moves the ratio of the replayed batch.
trainer, replayed = run("mu2", num_iterations=2, max_steps=scaled(4, 100), learning_rate=3e-4)
for row in replayed:
    kind = "fresh " if row["step"] % 2 == 1 else "replay"
    print(f"step {row['step']:>3} ({kind}): clip_ratio/region_mean {row['clip_ratio/region_mean']:.3f}")
fresh_clipped = [row["step"] for row in replayed if row["step"] % 2 == 1 and row["clip_ratio/region_mean"] > 0]
replay_clipped = [row["step"] for row in replayed if row["step"] % 2 == 0 and row["clip_ratio/region_mean"] > 0]
print(f"fresh steps with clipped tokens: {len(fresh_clipped)}; replayed steps with clipped tokens: "
      f"{len(replay_clipped)} of {len(replayed) // 2}")
print("reference model loaded with beta=0.0:", trainer.reference is not None)
trainer_kl, _ = run("beta", beta=0.04, max_steps=1)
print("reference model loaded with beta=0.04:", trainer_kl.reference is not None)

# %%
kl_generator = torch.Generator().manual_seed(1)
fresh_logps = -torch.rand(4, 6, generator=kl_generator, dtype=torch.float64)  # on-policy: old = current
reference_logps = fresh_logps - 0.3 * torch.rand(4, 6, generator=kl_generator, dtype=torch.float64)
kl_mask = torch.ones(4, 6, dtype=torch.float64)
kl_advantages = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
kl_results = {}
for corrected in (True, False):
    current = fresh_logps.clone().requires_grad_(True)
    out = policy_loss(current, None, kl_advantages, kl_mask, loss_type="dapo", beta=0.04, ref_logps=reference_logps,
                      use_bias_correction_kl=corrected)
    kl_results[corrected] = (out.loss.item(), torch.autograd.grad(out.loss, current)[0])
    print(f"use_bias_correction_kl={corrected!s:<5}: loss {kl_results[corrected][0]:+.6f}")
k3 = torch.exp(reference_logps - fresh_logps) - (reference_logps - fresh_logps) - 1  # per-token k3
gradient_gap = kl_results[True][1] - kl_results[False][1]
print(f"same value on fresh samples; gradients differ by up to {gradient_gap.abs().max():.2e}, "
      f"and the gap is beta * k3 / N tokens: {torch.allclose(gradient_gap, 0.04 * k3 / kl_mask.sum())}")

# %% [markdown]
# ## 8. The recommended settings together
#
# Unsloth's GRPO guide enables the newer techniques with these `GRPOConfig` arguments
# (they are TRL's names, so the same lines work in TRL and in `course_lib`):
#
# ```python
# epsilon=0.2,
# epsilon_high=0.28,              # one-sided: clip-higher (DAPO)
# delta=1.5,                      # two-sided clipping (INTELLECT-2)
# loss_type="bnpo",               # or "grpo", or "dr_grpo" (TRL's default is "dapo")
# mask_truncated_completions=True,
# ```
#
# `course_lib` validates them like any other setting (lesson 06b adds TRL 1.16's newer
# losses and token filters to the same config):

# %%
settings = dict(epsilon=0.2, epsilon_high=0.28, delta=1.5, loss_type="bnpo", mask_truncated_completions=True)
config = GRPOConfig(**settings, per_device_train_batch_size=8, num_generations=8)
print({name: getattr(config, name) for name in settings})

# %% [markdown]
# ## Questions
#
# 1. With `loss_type="grpo"`, a wrong answer of 200 tokens and a wrong answer of 20 tokens
#    get the same total push. Which one does the model find cheaper to keep producing, and
#    what would you see in `completions/mean_length`?
# 2. `dr_grpo` and `dapo` both give every token the same weight. When do they differ, and
#    which one keeps the loss scale stable when the completions get shorter?
# 3. Why is clip-higher one-sided? What would a lower `1 - epsilon` bound (more room to
#    push bad tokens *down*) do to the entropy of the policy?
# 4. With `num_iterations=1` and `steps_per_generation == gradient_accumulation_steps`,
#    which of `epsilon`, `epsilon_high`, `delta` and `importance_sampling_level` change the
#    gradient at all?
# 5. `mask_truncated_completions=True` removes truncated answers from the loss. Which kind
#    of prompt does this quietly drop from training, and how would you notice?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("06", k)`
# prints the answer to question k (`show_answer("06")` prints them all). They are also in
# `notebooks/answers/06_grpo_variants.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("06", 1)
