# %% [markdown]
# # Lesson 02 — Policy gradients: REINFORCE and baselines
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/02_policy_gradients.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 20 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# Lesson 01 showed RL *moving probability* away from bad answers. This lesson opens the
# box: the update is a gradient, and one line of calculus — the log-derivative trick —
# turns "sample, score, repeat" into that gradient. Every algorithm in this course (PPO,
# GRPO, RLOO) is a refinement of what you build here.
#
# In this lesson you will:
# 1. derive the **policy gradient** and the **REINFORCE** estimator;
# 2. apply it to a **language model**: a completion is a sequence of token actions, and
#    its log-probability is a masked sum of token log-probs;
# 3. see why a **baseline** leaves the gradient unbiased but cuts its **variance**, and
#    measure it;
# 4. see why the samples must come from the **current** policy (on-policy);
# 5. compute **discounted returns** for episodes with many steps.

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
import numpy as np
import torch
from IPython.display import display

from course_lib.machine import fast_mode, scaled

print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. The policy gradient in four lines
#
# A policy `pi_theta(a)` gives each action `a` a probability; we want to maximise the
# expected reward
#
# $$J(\theta) = \mathbb{E}_{a \sim \pi_\theta}[R(a)] = \sum_a \pi_\theta(a) R(a).$$
#
# The trouble: the sampling itself depends on `theta`, and we cannot backpropagate
# through "draw a sample". The **log-derivative trick** uses
# $\nabla \pi = \pi \nabla \log \pi$ to put the gradient back inside an expectation:
#
# $$\nabla J = \sum_a \nabla \pi_\theta(a)\, R(a) = \sum_a \pi_\theta(a)\, \nabla \log \pi_\theta(a)\, R(a)
#   = \mathbb{E}_{a \sim \pi_\theta}\big[R(a)\, \nabla \log \pi_\theta(a)\big].$$
#
# An expectation can be estimated by sampling. With `N` samples this is **REINFORCE**
# (Williams, 1992):
#
# $$\hat g = \frac{1}{N} \sum_{i=1}^N R(a_i)\, \nabla \log \pi_\theta(a_i).$$
#
# In code we never write $\hat g$ by hand: we build the **surrogate loss**
# $L = -\frac1N \sum_i R(a_i) \log \pi_\theta(a_i)$, with the rewards as constants, and
# autograd's gradient of `L` is exactly $-\hat g$. Minimising `L` climbs `J`.
#
# Notice what is *not* needed: the gradient of the reward. The reward can be a verifier,
# a program run in a sandbox, a human's thumbs up — any black box.
#
# **Episodes with several steps.** For a trajectory `s0, a0, s1, a1, ...` the probability
# is a product of policy terms `pi(a_t | s_t)` and environment terms `P(s_{t+1} | s_t, a_t)`.
# The environment terms do not depend on `theta`, so their gradient vanishes:
# $\nabla \log p(\tau) = \sum_t \nabla \log \pi_\theta(a_t \mid s_t)$. We never need a model of
# the environment.
#
# Check it on lesson 01's answer policy, where the exact gradient is known in closed
# form, `pi * (r - E[r])` per logit: the average of many REINFORCE estimates lands on it.

# %%
from course_lib.toy import CANDIDATE_ANSWERS, AnswerPolicy, combined_reward, gradient_variance

policy = AnswerPolicy.uniform()
rewards_per_answer = [combined_reward(answer) for answer in CANDIDATE_ANSWERS]
estimate = gradient_variance(policy.logits, rewards_per_answer, n_samples=8, baseline=None, trials=scaled(2000, 20000))
print(f"{'answer':>7} {'exact':>8} {'mean of estimates':>18} {'one estimate':>13}")
for i, answer in enumerate(CANDIDATE_ANSWERS):
    print(f"{answer:>7} {estimate.exact_gradient[i]:>+8.4f} {estimate.mean_gradient[i]:>+18.4f} "
          f"{estimate.gradients[0, i]:>+13.4f}")

# %% [markdown]
# On average the estimate is right; any *single* estimate (last column) is far off. That
# noise is the central practical problem of policy gradients, and section 4 attacks it.
#
# ## 2. From answers to tokens: REINFORCE for a language model
#
# A language model writes a completion `y = (y_1, ..., y_T)` for a prompt `x` one token at
# a time. In RL words: the **state** is the prompt plus the tokens so far, each **action**
# is one token, and the policy is the model's next-token distribution. The probability
# of the whole completion is the product of its token probabilities, so its
# log-probability is a **sum**:
#
# $$\log \pi_\theta(y \mid x) = \sum_{t=1}^{T} \log \pi_\theta(y_t \mid x, y_{<t}).$$
#
# Completions in a batch have different lengths, so they are padded to a common width
# and a **mask** (1 = real token, 0 = padding) says which positions count. With one
# reward per completion, the REINFORCE loss is
#
# $$L = -\frac{1}{B} \sum_{b=1}^{B} R_b \sum_t \text{mask}_{b,t} \log \pi_\theta(y_{b,t} \mid \cdot).$$
#
# Every token of a completion shares that completion's reward: a good answer's tokens
# all get a positive weight in the gradient, a bad answer's all a negative one. Whether
# each of them then becomes more likely is another question, because they all share the
# model's parameters: the REINFORCE steps on a real transformer below measure it.
#
# ### Exercise 1 — the REINFORCE loss
#
# Implement `reinforce_loss(logps, rewards, mask)` in `exercises/ex02_policy_gradients.py`.

# %%
from course_lib.checks import ex02
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex02_policy_gradients")
feedback(ex02.check_reinforce_loss, ex.reinforce_loss);

# %% [markdown]
# ### The mask, on a hand-made batch
#
# Before the real model, the padding. `assemble_batch` (the function the rollout engines
# end with) pads hand-written completions: the second one emits the end-of-turn token
# `<|im_end|>` after two characters, so its row is cut there and the rest is padding.

# %%
from course_lib.rollout.base import assemble_batch, eos_token_ids
from course_lib.tiny import TinyRecipe, build_char_tokenizer, build_tiny_model

tokenizer = build_char_tokenizer()
hand_made = [tokenizer.encode("2+2=4", add_special_tokens=False),
             tokenizer.encode("4.", add_special_tokens=False) + [tokenizer.eos_token_id] + [tokenizer.pad_token_id] * 3,
             tokenizer.encode("four", add_special_tokens=False)]
padded = assemble_batch(tokenizer, [tokenizer.encode("Q", add_special_tokens=False)], hand_made, n=3,
                        eos_ids=eos_token_ids(tokenizer), logps=None)
print("completion ids (right-padded):\n", padded.completion_ids)
print("mask (1 = real token, counted in the loss; the eos token itself counts):\n", padded.completion_mask)
print("texts:", padded.texts, "| ended with eos:", padded.is_eos.tolist())

# %% [markdown]
# The second row stops at its `<|im_end|>` (the last 1 of its mask); the padding after it
# is 0 and drops out of every masked sum. The third row is shorter than the first: padded too.
#
# ### REINFORCE steps on a real (untrained) transformer
#
# Here is the loss at work on a Llama with the architecture of the course's `tiny` model
# but random weights — the "untrained model" of lesson 01, which answers "What is 2 + 2?"
# with gibberish. We sample 8 completions, reward each with lesson 01's number reward
# (+1 if it contains a number, -1 if not), subtract the batch mean, and take a few small
# SGD steps on this one batch, measuring every completion's log-probability after each.

# %%
from course_lib.ops.masking import masked_sum
from course_lib.policy import completion_forward
from course_lib.rewards import number_reward
from course_lib.rollout import HFEngine, SamplingConfig

model = build_tiny_model(tokenizer, TinyRecipe())  # random weights, seeded
prompt = [{"role": "user", "content": "What is 2 + 2?"}]
batch = HFEngine(model, tokenizer).generate([prompt], n=8, sampling=SamplingConfig(max_tokens=8, seed=0))
print("mask of the sampled batch (no row emitted <|im_end|> within 8 characters, so no padding):")
print(batch.completion_mask)


def sequence_logps():
    logps, _, _ = completion_forward(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                     batch.completion_mask)  # (B, T) token log-probs
    return masked_sum(logps, batch.completion_mask, dim=-1)  # (B,) one log-prob per completion


rewards = torch.tensor(number_reward(completions=batch.texts))  # (B,)
advantages = rewards - rewards.mean()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # a small step: larger ones overshoot here
logps_per_step = []
for step in range(5):
    logps = sequence_logps()
    logps_per_step.append(logps.detach())
    loss = -(advantages * logps).mean()  # the REINFORCE loss of Exercise 1
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with torch.no_grad():
    logps_per_step.append(sequence_logps())
history = torch.stack(logps_per_step)  # (steps + 1, B)
changes = history - history[0]  # (steps + 1, B) change of each completion's log-prob since the start

print(f"\n{'completion':<14}{'advantage':>10}{'log-prob before':>17}" + "".join(f"{f'Δ after {k}':>11}" for k in (1, 5)))
for i, text in enumerate(batch.texts):
    print(f"{text!r:<14}{advantages[i]:>+10.2f}{history[0, i]:>17.2f}{changes[1, i]:>+11.2f}{changes[5, i]:>+11.2f}")
weighted = (advantages * history).sum(dim=1)  # what the loss maximises: sum_b A_b log pi(y_b)
print("\nsum of A_b * log pi(y_b) after each step:", [round(w, 2) for w in weighted.tolist()])
positive = advantages > 0
for k in (1, 5):
    print(f"after {k} step(s): {int((changes[k][positive] > 0).sum())} of {int(positive.sum())} positive-advantage "
          f"completions more likely, {int((changes[k][~positive] < 0).sum())} of {int((~positive).sum())} "
          f"negative ones less likely")

# %% [markdown]
# Read the printed counts. One SGD step raises the **weighted sum** `sum_b A_b log pi(y_b)`
# (that is what gradient ascent on the REINFORCE objective promises, for a small enough
# step), not each term of it: after the first step some completions with a positive
# advantage became *less* likely. The 8 completions share every parameter of the model,
# so the step taken for one row moves the log-probs of all the others too, and nothing
# forces each row's change to have its advantage's sign. Only the sum is guaranteed to
# rise. Over several steps on the same batch the rows separate by the sign of their
# advantage, as the last column shows. (A random model spreads its probability over ~100
# characters, hence
# log-probs near `8 * log(1/100) = -37`.)
#
# **REINFORCE is the simplest member of the PPO family.** `course_lib`'s RLOO loss
# (lesson 08) is a clipped objective on the ratio `pi / pi_old`. Sampled from the
# current policy and used once, the ratio is exactly 1, the clip never acts, and its
# gradient is the REINFORCE gradient:

# %%
from course_lib.algos.rloo import rloo_policy_loss

logps = torch.randn(4, 5, dtype=torch.float64).requires_grad_(True)
mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
adv = torch.tensor([1.0, -0.5, 2.0, -2.5], dtype=torch.float64)
(grad_reinforce,) = torch.autograd.grad(-(adv * masked_sum(logps, mask, dim=-1)).mean(), logps)
(grad_rloo,) = torch.autograd.grad(rloo_policy_loss(logps, None, adv, mask).loss, logps)
print("largest gradient difference:", (grad_reinforce - grad_rloo).abs().max().item())

# %% [markdown]
# ## 3. Baselines: same mean, less noise
#
# Subtract any number `b` that does not depend on the sampled action from the reward:
#
# $$\mathbb{E}_{a\sim\pi}\big[b\, \nabla \log \pi(a)\big] = b \sum_a \nabla \pi(a) = b\, \nabla \sum_a \pi(a) = b\, \nabla 1 = 0.$$
#
# So `(R - b)` gives the same expected gradient as `R`, but it can be much less noisy.
# Intuition: if every reward is positive, plain REINFORCE pushes *every* sampled answer
# up and relies on the lucky ones being pushed a bit more; with a baseline, answers
# better than usual go up and worse ones go down. `R - b` is called the **advantage**.
#
# Common baselines for language models, all computed from the `G` completions sampled
# for the same prompt:
#
# - **mean**: `b = mean of the group`, every completion included (GRPO, lesson 05). It
#   contains the completion's own reward, which shrinks the expected gradient by
#   `(G - 1) / G` — harmless, the direction is unchanged.
# - **leave-one-out**: `b_i = mean of the other G - 1 rewards` (RLOO, lesson 08),
#   exactly unbiased. It equals `G / (G - 1)` times the mean-centred reward.
# - a learned **value** `V(s)` that predicts the reward (PPO, lesson 03).
#
# ### Exercise 2 — baselines
#
# Implement `baseline_subtract(rewards, kind)` for `(prompts, G)` reward tables.

# %%
ex = load_exercise("ex02_policy_gradients")
feedback(ex02.check_baseline_subtract, ex.baseline_subtract);

# %% [markdown]
# ## 4. Measuring the variance
#
# `gradient_variance` repeats the REINFORCE estimate thousands of times with 8 samples
# each and measures how much the estimates scatter. Every baseline is fed the same
# samples, so differences come from the baseline alone. Right panel: the averages all
# land on the exact gradient (the batch-mean one at 7/8 of its length, as predicted).

# %%
from course_lib.toy.plots import plot_gradient_variance

trials = scaled(2000, 20000)
expected_reward = float(policy.probs @ np.asarray(rewards_per_answer))
baselines = {"none": None, f"constant E[r]={expected_reward:.2f}": expected_reward, "batch mean": "mean",
             "leave-one-out": "leave_one_out"}
results = {name: gradient_variance(policy.logits, rewards_per_answer, n_samples=8, baseline=b, trials=trials)
           for name, b in baselines.items()}
display(plot_gradient_variance(results, action_labels=CANDIDATE_ANSWERS))

# %% [markdown]
# Rewards far from 0 make it worse. Add a constant to every reward — which changes
# *nothing* about which answer is best — and watch plain REINFORCE change its noise while
# the baselines do not notice. The shifts are 0, the one that centres the rewards near 0,
# +5 and +20:

# %%
mean_reward = float(np.mean(rewards_per_answer))
print(f"mean of the rewards: {mean_reward:+.3f}")
print(f"{'shift':>6} {'no baseline':>12} {'leave-one-out':>14}")
for shift in [0, round(-mean_reward, 1), 5, 20]:
    shifted = [r + shift for r in rewards_per_answer]
    plain = gradient_variance(policy.logits, shifted, n_samples=8, baseline=None, trials=trials).total_variance
    loo = gradient_variance(policy.logits, shifted, n_samples=8, baseline="leave_one_out", trials=trials).total_variance
    print(f"{shift:>+6} {plain:>12.3f} {loo:>14.3f}")

# %% [markdown]
# What drives the variance without a baseline is the **offset** of the rewards from 0, not
# their sign: the rewards here average below 0, so centring them (the second row) gives
# the least noise, +5 moves their mean about as far above 0 as it was below and barely
# changes the variance, and +20 is far off. A baseline removes the offset, whatever it is.
#
# Less variance means faster learning. The gradient bandit of Sutton & Barto (section
# 2.8) is REINFORCE on a bandit; on a testbed whose arm means sit around +4 (all rewards
# positive), the version with a running-average baseline finds the best arm far more
# often than the one without.

# %%
from course_lib.toy import GradientBandit, compare_agents, make_testbed
from course_lib.toy.plots import plot_bandit_comparison

comparison = compare_agents(
    {"REINFORCE with baseline": lambda k: GradientBandit(k, step_size=0.1, baseline=True),
     "REINFORCE without baseline": lambda k: GradientBandit(k, step_size=0.1, baseline=False)},
    lambda seed: make_testbed(seed, offset=4.0), steps=scaled(300, 1000), seeds=range(scaled(20, 200)))
display(plot_bandit_comparison(comparison, title="Gradient bandit, arm means around +4"))

# %% [markdown]
# ### Explore: shift the rewards, change the number of samples
#
# More samples per estimate also reduce the variance (roughly as `1 / n`), but samples
# cost generation time; a baseline is free.

# %%
def variance_figure(shift=0.0, n_samples=8):
    shifted = [r + shift for r in rewards_per_answer]
    runs = {name: gradient_variance(policy.logits, shifted, n_samples=n_samples,
                                    baseline=(b + shift if isinstance(b, float) else b), trials=2000)
            for name, b in baselines.items()}
    return plot_gradient_variance(runs, action_labels=CANDIDATE_ANSWERS,
                                  title=f"rewards shifted by {shift:+g}, {n_samples} samples per estimate")


try:
    import ipywidgets as widgets
except ImportError:  # no widgets here: the figures above show the idea
    widgets = None
if widgets is not None:
    display(widgets.interactive(
        lambda shift, n_samples: display(variance_figure(shift, n_samples)),
        shift=widgets.FloatSlider(value=0.0, min=-10, max=30, step=1, description="reward shift",
                                  continuous_update=False),
        n_samples=widgets.IntSlider(value=8, min=2, max=64, description="samples", continuous_update=False)))

# %% [markdown]
# ## 5. On-policy: the samples must come from the current policy
#
# The estimator is an expectation **under `pi_theta`**: the samples must be drawn from
# the policy being differentiated. After one update the policy has changed, and the old
# samples describe the *old* policy. Reusing them as if nothing happened is tempting —
# generating is the expensive part — but the gradient is then wrong.
#
# Below, two learners start from the uniform answer policy. One draws a fresh batch of 8
# answers every step (on-policy); the other draws one batch at the start and keeps
# training on it. The stale learner can only reinforce what happened to be in that one
# batch: it never learns that `4` exists if `4` was not in it.

# %%
from course_lib.toy import reinforce_step

rng = np.random.default_rng(0)
reward_table = np.asarray(rewards_per_answer)
stale_batch = policy.sample(8, rng)
print("the one stale batch:", [CANDIDATE_ANSWERS[i] for i in stale_batch])
fresh_logits, stale_logits = policy.logits.clone(), policy.logits.clone()
for step in range(scaled(60, 150)):
    fresh_batch = rng.choice(len(CANDIDATE_ANSWERS), size=8, p=torch.softmax(fresh_logits, 0).numpy())
    fresh_logits = reinforce_step(fresh_logits, fresh_batch, reward_table[fresh_batch], lr=0.5, baseline="mean")
    stale_logits = reinforce_step(stale_logits, stale_batch, reward_table[stale_batch], lr=0.5, baseline="mean")
for name, logits in [("on-policy", fresh_logits), ("stale batch", stale_logits)]:
    probs = torch.softmax(logits, 0).numpy()
    top = np.argsort(probs)[::-1][:3]
    print(f"{name:<12} most likely answers: " + ", ".join(f"{CANDIDATE_ANSWERS[i]!r} {probs[i]:.2f}" for i in top))

# %% [markdown]
# Reusing samples *safely* needs a correction for the change of policy — the importance
# ratio `pi_new / pi_old` — and a limit on how far one batch may move the policy. That is
# exactly PPO, next lesson.
#
# ## 6. Episodes with many rewards: discounted returns
#
# In the grid of lesson 01 rewards arrive along the way. An action cannot influence
# rewards received *before* it, so each action is credited only with the **return**
# from its step onward (the "reward-to-go"), usually discounted by `gamma` per step:
#
# $$G_t = r_t + \gamma r_{t+1} + \gamma^2 r_{t+2} + \dots = r_t + \gamma\, G_{t+1}.$$
#
# Dropping the rewards that came before is another free variance reduction: they are
# noise as far as action `t` is concerned. For language models the common setting is a
# single reward at the end of the completion and `gamma = 1`, so every token's return is
# simply the completion's reward — which is what Exercise 1 used.
#
# ### Exercise 3 — discounted returns

# %%
ex = load_exercise("ex02_policy_gradients")
feedback(ex02.check_discounted_returns, ex.discounted_returns);

# %% [markdown]
# The grid-world REINFORCE agent of `course_lib` uses these returns, with and without a
# learned state-value baseline `V(s)`:

# %%
from course_lib.toy import train_gridworld
from course_lib.toy.plots import plot_learning_curves

grid_seeds, episodes = range(scaled(4, 20)), scaled(250, 600)
curves = {m: [train_gridworld(m, episodes=episodes, seed=s).returns for s in grid_seeds]
          for m in ["reinforce", "reinforce_baseline"]}
optimal = train_gridworld("random", episodes=1, seed=0).optimal_score
display(plot_learning_curves(list(curves.values()), ["REINFORCE", "REINFORCE with baseline V(s)"],
                             title="Beans and ghosts", ylabel="score of the episode", smooth=20,
                             optimal=optimal, optimal_label="optimal (value iteration)"))

# %% [markdown]
# Here the two curves stay close. The grid's returns are small and already of both signs
# (ghosts cost, beans pay), so there is little common offset for a baseline to remove.
# The shift experiment of section 4 showed when baselines matter most: when every reward
# carries a large shared offset, as the bandit with arm means around +4 did.
#
# ## Questions
#
# 1. The log-derivative trick never differentiates the reward. Name two rewards from
#    lesson 01 that could not be differentiated at all, and explain why REINFORCE still
#    works with them.
# 2. In the transformer steps above, which tokens of a completion with a positive
#    advantage does the loss push up — only the digits that earned the reward, or all of
#    them? What problem does that cause for long completions, and what would help?
# 3. The batch-mean baseline shrinks the expected gradient by `(G - 1) / G`. For `G = 2`
#    that is a factor 1/2. Why is it still a reasonable choice in practice?
# 4. If all 8 completions of a prompt get the same reward, what do the mean and
#    leave-one-out advantages become, and what does the model learn from that prompt?
# 5. Why can't we simply take ten gradient steps on every batch to save generation time?
#    What would have to be added to make it safe?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("02", k)`
# prints the answer to question k (`show_answer("02")` prints them all). They are also in
# `notebooks/answers/02_policy_gradients.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("02", 1)
