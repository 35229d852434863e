# %% [markdown]
# # Lesson 03 — PPO: reusing samples without falling off a cliff
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/03_ppo.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 17 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# REINFORCE (lesson 02) uses every batch of samples for one gradient step, then throws
# it away. For a language model the samples are the expensive part: generating
# completions costs far more than one backward pass. **Proximal Policy Optimization**
# (PPO, Schulman et al. 2017) takes several gradient steps on each batch while keeping
# the policy close to the one that generated it. It is the algorithm behind classic
# RLHF, and GRPO (lesson 05) keeps its core.
#
# In this lesson you will:
# 1. reuse samples with the **importance ratio** `r = pi_theta / pi_old`;
# 2. remove the incentive to move far in one update with **`clip(r, 1 - eps, 1 + eps)`**
#    (it discourages large steps, it enforces no limit) and understand why PPO takes the
#    **min** (a pessimistic bound), with the clip explorer;
# 3. keep the model near its starting point with a **KL penalty** (coefficient `beta`)
#    against a frozen **reference** model, estimated per token with **k1** or **k3**;
# 4. name the **models of RLHF with PPO**: policy, reference, value model, reward model;
# 5. compute per-token advantages with **GAE** (`gamma`, `lambda`).

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

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from course_lib.machine import fast_mode, scaled

print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. Reusing samples: the importance ratio
#
# The samples in a batch were drawn from the policy as it was when we generated them —
# call it `pi_old`. After one gradient step the policy is `pi_theta != pi_old`, and the
# batch no longer represents it. **Importance sampling** fixes the expectation by
# reweighting each sample by how much more (or less) likely the new policy makes it:
#
# $$\mathbb{E}_{a\sim\pi_\theta}[A(a)\,\cdot] \;\to\; \mathbb{E}_{a\sim\pi_{old}}\Big[\frac{\pi_\theta(a)}{\pi_{old}(a)} A(a)\,\cdot\Big],
# \qquad r = \frac{\pi_\theta(a)}{\pi_{old}(a)} = \exp(\log\pi_\theta(a) - \log\pi_{old}(a)).$$
#
# The surrogate objective `E_old[r * A]` has, at `theta = theta_old` (where `r = 1`),
# exactly the REINFORCE gradient, because `d r / d theta = r * d log pi_theta / d theta`.
# For a language model the ratio is computed **per token** from the log-probs the model
# gave each sampled token at generation time (`old_logps`, stored, no gradient) and now
# (`logps`, with gradient).
#
# The catch: the reweighted estimate is only trustworthy while `pi_theta` stays close to
# `pi_old`. Maximise `E_old[r * A]` freely and the optimiser keeps raising the ratio of
# every good sample as far as it can go, on the strength of a handful of samples. For a
# softmax policy "as far as it can go" is finite, `r = pi_theta / pi_old <= 1 / pi_old`
# (a probability cannot exceed 1), but that ceiling is far away for any sample that was
# unlikely: the demo below measures how close an unclipped run gets to it.
#
# ## 2. The clip, and why the min
#
# PPO's clipped objective, per token:
#
# $$L^{CLIP} = \min\big(r\,A,\;\; \text{clip}(r, 1-\epsilon, 1+\epsilon)\,A\big), \qquad \epsilon = 0.2 \text{ typically.}$$
#
# Read it case by case:
#
# | | `r` below `1 - eps` | `r` inside | `r` above `1 + eps` |
# |---|---|---|---|
# | `A > 0` (good token) | `r A`: gradient flows, the token can recover | `r A` | **flat** at `(1 + eps) A`: no reason to push further |
# | `A < 0` (bad token) | **flat** at `(1 - eps) A`: pushed down enough | `r A` | `r A`: gradient flows, the mistake is undone |
#
# The `min` makes the objective a **pessimistic bound** on the unclipped `r A`: it never
# gives credit for moving further than the clip range in the direction the advantage
# wants, but it always charges for moving the wrong way. Once a token has moved enough,
# its gradient is zero: the clip **removes the incentive** to move it further. It does
# not *enforce* a limit: nothing pulls a ratio back inside the range, and the gradients
# of the other tokens (which share the parameters) can still carry it out. The demo
# below ends with ratios outside the range.
#
# The figure comes from `course_lib.algos.ppo.ppo_policy_loss`, the loss the trainer runs
# for PPO (`loss="ppo"`; the explorer below uses GRPO's, which adds the knobs of lesson 06):

# %%
from course_lib.widgets import clip_explorer, plot_clip_objective

display(plot_clip_objective(epsilon=0.2, loss="ppo"))

# %% [markdown]
# Play with the explorer: `epsilon` and `epsilon_high` (an asymmetric upper bound, used
# by DAPO in lesson 06), and `delta`, which caps the unclipped branch for negative
# advantages. That cap comes from **dual-clip PPO** (Ye et al. 2020, *Mastering Complex
# Control in MOBA Games with Deep Reinforcement Learning*): with `A < 0` and a ratio far
# above `1 + eps`, the min picks `r A`, a loss that grows without bound with `r`, so one
# stale sample can dominate a batch; dual-clip bounds that branch at `c A` with a constant
# `c > 1` (3 in the paper). INTELLECT-2 brought the same bound to LLM training, and TRL
# calls it `delta` (lesson 06).

# %%
try:
    import ipywidgets  # noqa: F401
except ImportError:  # no widgets here: the static figure above shows the same curves
    ipywidgets = None
if ipywidgets is not None:
    display(clip_explorer())

# %% [markdown]
# ### Exercise 1 — the clipped surrogate
#
# Implement `clipped_surrogate(ratio, advantages, epsilon)` in `exercises/ex03_ppo.py`.

# %%
from course_lib.checks import ex03
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex03_ppo")
feedback(ex03.check_clipped_surrogate, ex.clipped_surrogate);

# %% [markdown]
# ### The clip at work: many epochs on one batch
#
# Lesson 01's answer policy samples one batch of 16 answers, and we take 30 gradient
# steps on that same batch with `course_lib.algos.ppo.ppo_policy_loss` — once with
# `epsilon = 0.2`, once with the clip switched off (a huge epsilon). We track how far the
# policy moves from `pi_old`, measured by the exact `KL(pi_old || pi_theta)`, and the
# fraction of samples whose clip is active. `course_lib` logs that fraction as
# `policy/clipfrac_avg`, the name of TRL's former `PPOTrainer` (lesson 04 tells its
# history); TRL 1.16's GRPO and RLOO trainers log it split by side, as
# `clip_ratio/low_mean`, `clip_ratio/high_mean` and `clip_ratio/region_mean`.

# %%
from course_lib.algos.ppo import ppo_policy_loss
from course_lib.toy import CANDIDATE_ANSWERS, AnswerPolicy, combined_reward

reward_table = torch.tensor([combined_reward(a) for a in CANDIDATE_ANSWERS], dtype=torch.float64)
old_policy = AnswerPolicy.uniform()
samples = torch.as_tensor(old_policy.sample(16, np.random.default_rng(0)))  # (N,) one batch, reused
advantages = reward_table[samples] - reward_table[samples].mean()  # (N,) batch-mean baseline
old_logps = torch.log_softmax(old_policy.logits, 0)[samples].unsqueeze(1)  # (N, 1): one-token "completions"
print("batch:", [CANDIDATE_ANSWERS[i] for i in samples])


def epochs_on_one_batch(epsilon, epochs=30, lr=0.5):
    logits = old_policy.logits.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([logits], lr=lr)
    kl_from_old, clip_fraction = [], []
    for _ in range(epochs):
        logps = torch.log_softmax(logits, 0)[samples].unsqueeze(1)
        out = ppo_policy_loss(logps, old_logps, advantages, torch.ones_like(logps), cliprange=epsilon)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        with torch.no_grad():
            new = torch.log_softmax(logits, 0)
            kl_from_old.append(float((old_policy.probs * (np.log(old_policy.probs) - new.numpy())).sum()))
        clip_fraction.append(out.metrics["policy/clipfrac_avg"])
    with torch.no_grad():
        final_ratios = torch.exp(torch.log_softmax(logits, 0)[samples] - old_logps[:, 0])  # (N,)
    return kl_from_old, clip_fraction, torch.softmax(logits.detach(), 0).numpy(), final_ratios


runs = {"clip, epsilon = 0.2": epochs_on_one_batch(0.2), "no clip": epochs_on_one_batch(1e9)}
fig, (ax_kl, ax_clip) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
for label, (kl, clip_fraction, _, _) in runs.items():
    ax_kl.plot(range(1, 31), kl, label=label)
    ax_clip.plot(range(1, 31), clip_fraction, label=label)
ax_kl.set(title="How far one batch moves the policy", xlabel="gradient step on the same batch",
          ylabel="KL(pi_old || pi_theta)")
ax_clip.set(title="Fraction of samples with the clip active", xlabel="gradient step on the same batch",
            ylabel="fraction of tokens clipped", ylim=(-0.05, 1.05))
for ax in (ax_kl, ax_clip):
    ax.grid(alpha=0.3)
    ax.legend()
plt.show()
ceiling = 1 / old_policy.probs[samples.numpy()]  # r = pi / pi_old <= 1 / pi_old
for label, (kl, _, probs, ratios) in runs.items():
    outside = ((ratios < 0.8) | (ratios > 1.2)).float().mean().item()
    print(f"{label:<20} final KL {kl[-1]:.3f}, P('4') {probs[-1]:.3f} (it was {old_policy.prob_of('4'):.3f}); "
          f"final ratios from {ratios.min():.2f} to {ratios.max():.2f} (ceiling 1/pi_old = {ceiling.max():.0f}), "
          f"{outside:.0%} of samples outside [0.8, 1.2]")

# %% [markdown]
# With the clip, the policy stops moving once every sample's ratio has left the trust
# region: the batch has said what it can. Read the printed ratios: the clipped run ends
# with its samples *outside* `[0.8, 1.2]`. The clip did not hold them in; it only stopped
# rewarding further moves, so each step overshoots the edge a little and then the
# gradient is zero. Without the clip, the same 16 samples keep pushing, their ratios grow
# toward their ceiling, and `P('4')` even *falls* — `4` was not in the batch, so nothing defends it while the
# sampled numbers soak up all the probability.
#
# ## 3. Staying near the start: the KL penalty and the reference model
#
# The clip discourages large updates relative to the *previous* policy. It says nothing about
# the sum of many small updates: after thousands of steps the model can drift far from
# where it started — forgetting how to write fluent text, or finding odd outputs that a
# learned reward model happens to score highly (**reward hacking**). So RLHF keeps a
# frozen copy of the starting model, the **reference** `pi_ref`, and penalises the
# divergence from it with a coefficient `beta > 0`:
#
# $$\text{maximise}\;\; \mathbb{E}[\text{reward}] \;-\; \beta\, \mathrm{KL}(\pi_\theta \,\|\, \pi_{ref}).$$
#
# The KL is not symmetric, and the course names its two directions once, here:
# `KL(pi_theta || pi_ref)`, an average over the **policy's** samples, is the **reverse**
# KL (mode-seeking: the policy is charged for putting mass where the reference has
# little); it is the one this objective states. `KL(pi_ref || pi_theta)`, an average over
# the **reference's** samples, is the **forward** KL (mass-covering: the policy is charged
# for leaving out what the reference likes).
#
# Two forces, two jobs: the clip removes the incentive to move far in *one step* (it
# enforces no limit: the demo of section 2 ends with ratios outside the range); the KL
# term keeps the *whole journey* short. (GRPO's default in TRL is `beta = 0`: no reference model at all, lesson 06.)
#
# ### Estimating KL from the sampled tokens
#
# The exact KL sums over the whole vocabulary at every position; we only have the tokens
# that were sampled. John Schulman's note "Approximating KL Divergence" (2020) compares
# single-sample estimators. With `u = log pi_ref(x) - log pi_theta(x)` for a token `x`
# sampled from `pi_theta`:
#
# | estimator | formula | unbiased? | can be negative? | noise |
# |---|---|---|---|---|
# | **k1** | `-u = log pi_theta - log pi_ref` | yes | yes | high |
# | k2 | `u^2 / 2` | no (low bias when close) | no | low when close |
# | **k3** | `exp(u) - u - 1` | yes | no | low when close |
#
# k1 is the plain log-ratio; RLHF with PPO subtracts `beta * k1` from each token's
# reward (lesson 04). k3 adds `exp(u) - 1`, which has mean zero under `pi_theta`, so it
# stays unbiased while cancelling much of k1's noise, and `exp(u) >= 1 + u` makes it
# non-negative. GRPO adds `beta * k3` to its loss.
#
# The table is about each estimator's **value**: how well its average over sampled
# tokens estimates the number `KL(pi_theta || pi_ref)`. Used in a *loss*, what matters
# is its **gradient**, and that is a different question (the check after Exercise 2
# shows it).

# %%
from course_lib.widgets import plot_kl_estimators

display(plot_kl_estimators(gap=1.0, distribution="gaussian", num_samples=scaled(5000, 20000)))

# %% [markdown]
# Left: k1 and k3 both average to the true KL, k2 overshoots as the distributions move
# apart. Middle: near `gap = 0`, the regime a KL penalty keeps training in, k3's spread
# is far below k1's; far apart, k3's spread grows faster and can exceed it. Right: k1's
# single-token values are often negative, k3's never.
#
# Move `gap` in the explorer to see where k3's spread stays below k1's, and switch the
# family to a categorical distribution over tokens, as in a language model.

# %%
try:
    import ipywidgets  # noqa: F401
except ImportError:  # no widgets here: the static figure above shows the same panels
    ipywidgets = None
if ipywidgets is not None:
    from course_lib.widgets import kl_explorer

    display(kl_explorer())

# %% [markdown]
# ### Exercise 2 — k1 and k3
#
# Implement `kl_k1(logps, ref_logps)` and `kl_k3(logps, ref_logps)`, per token.

# %%
ex = load_exercise("ex03_ppo")
feedback(ex03.check_kl_k1, ex.kl_k1);
feedback(ex03.check_kl_k3, ex.kl_k3);

# %% [markdown]
# The estimators on tokens sampled from the answer policy after the no-clip run above,
# against the starting (reference) policy, using `course_lib.ops.kl`:

# %%
from course_lib.ops.kl import kl_k1, kl_k3

drifted = torch.as_tensor(runs["no clip"][2])
reference = torch.as_tensor(old_policy.probs)
tokens = torch.multinomial(drifted, scaled(2000, 20000), replacement=True, generator=torch.Generator().manual_seed(0))
logps, ref_logps = drifted.log()[tokens].unsqueeze(0), reference.log()[tokens].unsqueeze(0)  # (1, N)
exact = float((drifted * (drifted.log() - reference.log())).sum())
for name, values in [("k1", kl_k1(logps, ref_logps)), ("k3", kl_k3(logps, ref_logps))]:
    print(f"{name}: mean {values.mean():.4f} (exact KL {exact:.4f}), std {values.std():.4f}, "
          f"negative samples {(values < 0).float().mean():.0%}")

# %% [markdown]
# ### An estimator's value is not its gradient
#
# GRPO adds `beta * k3` to the loss: the tokens were sampled from the policy, they are
# held fixed, and backpropagation differentiates k3's formula. Does that follow the
# gradient of `KL(pi_theta || pi_ref)`, the quantity k3 estimates? Check it on a
# 5-token policy `pi = softmax(theta)`: the true gradients of both KL directions by
# autograd through the exact sums, against each estimator used as a loss on 200,000
# sampled tokens.

# %%
from course_lib.ops.kl import kl_k2

ref = torch.tensor([0.40, 0.25, 0.15, 0.12, 0.08], dtype=torch.float64)
theta = torch.tensor([-0.5, 1.0, 0.0, 0.3, 1.2], dtype=torch.float64, requires_grad=True)
pi = torch.softmax(theta, 0)


def gradient(value):
    return torch.autograd.grad(value, theta, retain_graph=True)[0].numpy().round(3) + 0.0  # + 0.0 prints 0 rather than -0


exact_kls = {"KL(pi||ref)": (pi * (pi.log() - ref.log())).sum(),
             "KL(ref||pi)": (ref * (ref.log() - pi.log())).sum()}
tokens = torch.multinomial(pi.detach(), 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
sampled_logps, sampled_ref = torch.log_softmax(theta, 0)[tokens].unsqueeze(0), ref.log()[tokens].unsqueeze(0)
print(f"{'':<24}{'value':>7}   gradient w.r.t. the 5 logits")
for name, value in exact_kls.items():
    print(f"exact {name:<18}{value.item():7.4f}   {gradient(value)}")
for name, estimator in (("k1", kl_k1), ("k2", kl_k2), ("k3", kl_k3)):
    loss = estimator(sampled_logps, sampled_ref).mean()  # tokens fixed: no gradient through sampling
    print(f"{name + ' used as a loss':<24}{loss.item():7.4f}   {gradient(loss)}")

# %% [markdown]
# Read the two columns separately.
#
# - **Values:** k1 and k3 both average to `KL(pi || ref)` (k2 overshoots): as estimators
#   of the number, k1 and k3 are right.
# - **Gradients:** k1 as a loss has gradient **zero** on average: its gradient is
#   `grad log pi(x)`, and `E_pi[grad log pi] = 0`. k3 as a loss follows the gradient of
#   the **other direction**, `KL(ref || pi)`: its gradient is `(1 - ref/pi) grad log pi`,
#   whose average is `-sum_x ref(x) grad log pi(x)`, the gradient of `KL(ref || pi)`.
#   Surprisingly, k2, the biased one, is the estimator whose gradient is that of
#   `KL(pi || ref)`: `E_pi[(log pi - log ref) grad log pi]`.
#
# The reason is that "sample from pi, then differentiate" drops the part of the
# gradient that comes from pi also choosing which tokens get sampled. The two KL
# directions agree to first order when pi is close to ref, the regime a KL penalty keeps
# training in, which is why `beta * k3` in GRPO's loss still works as a leash; far from
# the reference it pulls toward covering every token the reference likes (the forward
# direction, `KL(ref || pi)`) rather than the reverse KL `KL(pi || ref)` the objective states. `tests/lib/test_kl_gradients.py`
# checks these identities against their closed forms.
#
# PPO-style RLHF avoids the question by putting the KL in the **reward**:
# `r_t - beta * k1_t` goes through the advantages and multiplies `grad log pi`, exactly as
# any reward does. The policy gradient then accounts for the sampling, and its expected
# value is the gradient of `E[reward] - beta KL(pi || ref)`, the stated objective. Lesson
# 04 builds that per-token reward.

# %% [markdown]
# ## 4. The models of RLHF with PPO
#
# In RLHF the agent is the language model, and PPO juggles several networks:
#
# | model | role | trained? |
# |---|---|---|
# | **policy** | the model being trained; generates the completions | yes |
# | **reference policy** | a frozen copy of the starting model; anchors the KL penalty | no |
# | **value model** (critic) | estimates the reward to expect from each prefix — the "average reward" used as a baseline | yes |
# | **reward model** | scores each finished completion for the current prompt; the score PPO maximises | no (trained before RL) |
#
# The first three make up the PPO agent; the reward model plays the environment. The
# whole formula looks complicated because each piece buys stability. It also costs
# memory: four networks, two of them trained. A rough count for a 7B-parameter model,
# assuming all four have that size, bf16 weights (2 bytes per parameter) for the frozen
# ones and, for the trained ones, mixed-precision Adam: bf16 weights 2 + bf16 gradients 2
# + fp32 master weights 4 + fp32 Adam moments m and v 8 = 16 bytes per parameter (the
# same count as lessons 04 and 05; activations and the generation cache not included):

# %%
params = 7e9
frozen, trained = 2, 2 + 2 + 4 + 8  # bytes per parameter
setups = {
    "PPO: policy + value (trained), reference + reward model (frozen)": 2 * trained + 2 * frozen,
    "GRPO with beta > 0: policy (trained) + reference (frozen), rewards from functions": trained + frozen,
    "GRPO with beta = 0: policy only": trained,
}
for name, bytes_per_param in setups.items():
    print(f"{params * bytes_per_param / 1e9:>6.0f} GB  {name}")

# %% [markdown]
# Activations and the generation cache come on top. That arithmetic is why GRPO (lesson
# 05) drops the value model — it estimates the baseline from a group of samples instead —
# and why RLVR replaces the reward model with reward functions.
#
# ## 5. Per-token advantages: GAE
#
# The value model predicts `V(s_t)`, the reward still to come after the prefix `s_t`.
# Each token then gets an advantage that says whether it made things better than the
# value model expected. The **TD error** of step `t` is
#
# $$\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t),$$
#
# and **Generalized Advantage Estimation** (Schulman et al. 2016) blends them with a
# second discount `lambda`:
#
# $$A_t = \sum_{l \ge 0} (\gamma\lambda)^l\, \delta_{t+l} = \delta_t + \gamma\lambda A_{t+1}.$$
#
# - `lambda = 0`: `A_t = delta_t`, one step of real reward and then trust the value
#   model. Low variance, but biased wherever `V` is wrong.
# - `lambda = 1`: `A_t = G_t - V(s_t)`, the whole actual return minus the baseline.
#   Unbiased, but as noisy as REINFORCE.
# - In between trades one for the other. RLHF setups commonly use `gamma = 1` and
#   `lambda = 0.95` (the defaults of TRL's former `PPOTrainer`, lesson 04).
#
# For a language model the per-token rewards are typically `-beta * KL` on every token
# plus the reward model's score on the last one. An example with 8 tokens:

# %%
from course_lib.algos.ppo import gae

beta = 0.05
token_kl = torch.tensor([0.2, 0.1, 0.4, 0.0, 0.3, 0.1, 0.2, 0.1])  # k1 per token, policy vs reference
score = 1.0  # the reward model's score of the finished completion
token_rewards = -beta * token_kl
token_rewards[-1] += score
values = torch.tensor([0.30, 0.35, 0.30, 0.50, 0.60, 0.55, 0.80, 0.90])  # the value model's guesses V(s_t)
mask = torch.ones(1, 8)
fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
for lam in [0.0, 0.5, 0.95, 1.0]:
    adv, returns = gae(token_rewards[None], values[None], mask, gamma=1.0, lam=lam)
    ax.plot(range(1, 9), adv[0], marker="o", label=f"lambda = {lam:g}")
ax.axhline(0, color="gray", linewidth=0.8)
ax.set(title="GAE advantages of one completion (gamma = 1)", xlabel="token", ylabel="advantage A_t")
ax.grid(alpha=0.3)
ax.legend()
plt.show()
td_errors = gae(token_rewards[None], values[None], mask, gamma=1.0, lam=0.0)[0][0]  # lambda = 0: A_t = delta_t
print("TD errors delta_t:", td_errors.numpy().round(3))
order = td_errors.argsort()  # token numbers below count from 1, as on the plot
print("lowered the estimate:", ", ".join(f"token {t + 1} ({td_errors[t]:+.3f})" for t in order if td_errors[t] < 0))
print("raised it most:      ", ", ".join(f"token {t + 1} ({td_errors[t]:+.3f})" for t in order.flip(0)[:2]))

# %% [markdown]
# With `lambda = 0` each token is judged only by how much the value estimate moved at
# its step, plus its own reward (here its small KL price): the printout names the tokens
# with a negative TD error (token 5 lowered the estimate most, token 2 a little less)
# and the two that raised it most (6 and 3). With `lambda = 1` every
# token sees the same final score, minus its own baseline. The value model is trained to
# predict `returns = advantages + values` (lesson 04 builds its loss).
#
# ### Exercise 3 — GAE for one trajectory
#
# Implement `gae(rewards, values, gamma, lam)` for a single trajectory of shape `(T,)`.
# The check compares it with hand-worked cases and with `course_lib.algos.ppo.gae`.

# %%
ex = load_exercise("ex03_ppo")
feedback(ex03.check_gae, ex.gae);

# %% [markdown]
# ## 6. PPO for a language model, end to end
#
# Putting the pieces together, one PPO iteration of RLHF reads:
#
# 1. **generate** completions with the current policy; store their token log-probs
#    (`old_logps`);
# 2. **score** them: reward model at the end of each completion; reference log-probs;
#    per-token rewards `-beta * KL` plus the score on the last token; values `V(s_t)`;
# 3. **advantages** with GAE (and usually whitened over the batch);
# 4. **learn**: a few epochs over mini-batches, each step minimising the clipped policy
#    loss (minus Exercise 1's objective, averaged over tokens) plus a value loss;
# 5. repeat with the updated policy.
#
# Lesson 04 runs exactly this loop on a language model with `course_lib.trainer`.
#
# ## Questions
#
# 1. For a token with `A > 0` whose ratio has fallen to `0.5`, the clipped objective
#    still has a gradient. Why is it sensible to let that token recover, but not to let
#    one with ratio `1.5` climb further?
# 2. At the first gradient step on a fresh batch, what is the ratio of every token,
#    and what does PPO's loss reduce to? What does that tell you about PPO with one
#    epoch and one mini-batch?
# 3. k1 is an unbiased estimate of the KL, yet the gradient check in section 3 showed that `beta * k1` added
#    to the *loss* (sampled tokens held fixed) has zero expected gradient. What does it
#    do to the policy on any one batch, and where should k1 go instead to penalise the KL?
# 4. Which of the four models would you drop first if memory ran out, and what would
#    replace its job?
# 5. Your value model is badly wrong early in training. Which lambda would you pick
#    then, and why?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("03", k)`
# prints the answer to question k (`show_answer("03")` prints them all). They are also in
# `notebooks/answers/03_ppo.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("03", 1)
