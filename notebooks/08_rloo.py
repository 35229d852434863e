# %% [markdown]
# # Lesson 08 — RLOO: REINFORCE with a leave-one-out baseline
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/08_rloo.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 30 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# GRPO (lesson 05) dropped PPO's value model by comparing the completions of one prompt
# with each other. **RLOO** — REINFORCE Leave-One-Out — does the same with an even simpler
# baseline, and it is the algorithm behind TRL's `RLOOTrainer`. This lesson reads that
# trainer's documentation closely: its vectorized advantage, its KL-in-the-reward, the
# Reinforce++ options, and the metrics it logs.
#
# In this lesson you will:
# 1. compute the **leave-one-out baseline**: K completions per prompt, each judged against
#    the mean of the *other* K − 1; no value function;
# 2. see why RLOO *chooses* to treat the **whole completion as one action** (PPO: one
#    action per token), and why PPO with **one epoch and one mini-batch** is REINFORCE
#    (with a learned critic and GAE: A2C);
# 3. translate the documentation's **generation-major** vectorized code into the course's
#    **prompt-major** layout, reproducing its worked numbers;
# 4. fold the **KL penalty into the reward** (`kl_coef`), sequence-level or token-level
#    (Reinforce++ eq. 1), and use the Reinforce++ options: reward clipping, reward
#    normalization, advantage normalization; and the **EOS trick**;
# 5. compare **Reinforce++'s batch-global advantage normalization** with GRPO's per-group
#    std, measured;
# 6. run RLOO on the tiny model with **TRL 1.16's defaults**, beside the older trainer's,
#    and **read its metrics** like a practitioner: which should rise, which should hover
#    near 1.0, and how to debug a `val/ratio` that leaves 1.

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
import os
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from transformers.utils import logging as hf_logging

from course_lib.machine import fast_mode, scaled

hf_logging.disable_progress_bar()  # no "Loading weights" bars each time a model loads
OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))
print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. The idea: K samples, each judged by the others
#
# For each prompt, sample **K completions** `y_1 … y_K` and score them: `r_1 … r_K`. The
# REINFORCE gradient pushes up `log π(y_i | x)` in proportion to an *advantage*: how much
# better `y_i` did than expected. PPO learns "expected" with a value model; GRPO uses the
# group mean (and divides by the group std). RLOO uses the mean of the **other** K − 1
# samples:
#
# $$A_i = r_i - \frac{1}{K-1}\sum_{j \ne i} r_j .$$
#
# Leaving `r_i` out of its own baseline keeps the baseline independent of `y_i`, so the
# gradient estimate stays **unbiased** while the variance drops (lesson 02). No value
# model means one network fewer to train and to hold in memory.
#
# Two more design choices of TRL's RLOO trainer:
#
# - **The whole completion is one action.** This is a modelling choice, not a fact about
#   language models: the same tokens can be modelled as T actions (PPO, lesson 04) or as
#   one. RLOO picks one action because the reward arrives once, for the whole completion,
#   and there is no value model to tell the tokens apart: its log-probability is the sum
#   of its token log-probs, `log π(y|x) = Σ_t log π(y_t | x, y_<t)`, and the ratio π/π_old
#   is taken per sequence. The price is credit assignment (every token gets the same
#   advantage) and a ratio that multiplies T token ratios (section 6 measures what that
#   does to clipping); the gain is no critic and an unbiased baseline.
# - **PPO with one epoch and one mini-batch is a plain policy gradient.** With one pass
#   over a freshly sampled batch, the policy that sampled it *is* the policy being
#   updated, the ratio is exactly 1 and the clipped surrogate's gradient is the plain
#   policy gradient. Which one depends on the advantage: with a sample baseline such as
#   RLOO's it is REINFORCE with a baseline; with a learned critic and GAE advantages (PPO's
#   own setting) it is A2C, which is the point of *A2C is a special case of PPO*.
#   The RLOO trainer of the source notes (TRL's older `RLOOTrainer`, now history) is built exactly so:
#   the PPO machinery, with `num_ppo_epochs` and `num_mini_batches` deciding how far it
#   strays from REINFORCE. (Its defaults, 4 epochs and 1 mini-batch, reuse every batch
#   four times; from the second pass on, the ratio moves away from 1 and the clip
#   matters.) TRL 1.16's rewritten trainer keeps the clipped sequence-level loss but
#   defaults to one pass (`num_iterations=1`): plain REINFORCE with the leave-one-out
#   baseline unless you ask for more (section 5 compares the two configs, section 6 runs
#   both).
#
# The papers behind it: *Back to Basics: Revisiting REINFORCE-Style Optimization for
# Learning from Human Feedback in LLMs* (Ahmadian et al., 2024); *A2C is a special case of
# PPO* (Huang et al., 2022); *Fine-Tuning Language Models from Human Preferences*
# (Ziegler et al., 2019); *Learning to Summarize from Human Feedback* (Stiennon et al.,
# 2020); *The N Implementation Details of RLHF with PPO* (Huang et al., 2023) and *The N+
# Implementation Details of RLHF with PPO: A Case Study on TL;DR Summarization* (Huang et
# al., 2024), on which the trainer's code is built.

# %% [markdown]
# The claim "one epoch + one mini-batch = REINFORCE" is checkable. `course_lib.algos.rloo.
# rloo_policy_loss` is the sequence-level clipped loss; on-policy (`old_logps=None`) its
# gradient equals the REINFORCE gradient `-(1/B) Σ_b A_b ∇ log π(y_b|x)`:

# %%
from course_lib.algos.rloo import rloo_policy_loss

generator = torch.Generator().manual_seed(0)
token_logps = (-torch.rand(4, 5, generator=generator) * 2).requires_grad_(True)  # (B, T)
mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.float32)
advantages = torch.tensor([1.0, -0.5, 0.25, -0.75])
mask_demo, advantages_demo = mask, advantages  # reused by exercise 4

out = rloo_policy_loss(token_logps, None, advantages, mask, cliprange=0.2)
out.loss.backward()
ppo_grad = token_logps.grad.clone()

token_logps.grad = None
sequence_logps = (token_logps * mask).sum(1)  # the whole completion is one action
reinforce = -(advantages * sequence_logps).mean()
reinforce.backward()
print("val/ratio on-policy:", out.metrics["val/ratio"], " clipped fraction:", out.metrics["policy/clipfrac_avg"])
print("PPO-clip gradient == REINFORCE gradient:", torch.allclose(ppo_grad, token_logps.grad))

# %% [markdown]
# ## 2. The vectorized advantage, and the layout it assumes
#
# TRL's documentation checks its vectorized RLOO advantage on 3 prompts with 4 completions
# each. Its rewards tensor is laid out **generation-major**: first completion of every
# prompt, then the second completion of every prompt, and so on.
#
# ```text
# index:   0  1  2 |  3  4  5 |  6  7  8 |  9 10 11
# reward:  1  2  3 |  2  3  4 |  5  6  7 |  8  9 10
#          ^ first completion of prompts 0, 1, 2; then the second completion; ...
# ```
#
# So prompt 0 got rewards 1, 2, 5, 8. The documentation's vectorized form reshapes to
# `(rloo_k, local_batch_size)` = `(4, 3)` — one *column* per prompt — and takes the
# leave-one-out mean down each column:
#
# ```text
# rlhf_reward = rlhf_reward.reshape(rloo_k, local_batch_size)
# baseline    = (rlhf_reward.sum(0) - rlhf_reward) / (rloo_k - 1)
# advantages  = rlhf_reward - baseline
# ```
#
# `(sum − r) / (K − 1)` is the mean of the others: the sum over the group minus the
# sample's own reward, divided by how many others there are. Its two asserts:
# `advantage[0] = 1 − (2 + 5 + 8)/3` (first completion of the first prompt) and
# `advantage[7] = 6 − (3 + 2 + 9)/3` (third completion of the second prompt).
#
# The course (like TRL's current trainers) is **prompt-major**: the K completions of a
# prompt are contiguous, and `rewards.view(-1, K)` has one prompt per *row*.
# `generation_major_to_prompt_major` translates; the same maths then runs along rows.

# %%
from course_lib.algos.rloo import generation_major_to_prompt_major, prompt_major_to_generation_major, rloo_advantages

K, num_prompts = 4, 3
generation_major = torch.tensor([1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=torch.float32)

# The documentation's vectorized computation, on its own layout.
by_column = generation_major.reshape(K, num_prompts)
doc_advantages = (by_column - (by_column.sum(0) - by_column) / (K - 1)).flatten()
print("documented asserts:", doc_advantages[0].item(), "==", 1 - (2 + 5 + 8) / 3, "|",
      doc_advantages[7].item(), "==", 6 - (3 + 2 + 9) / 3)

# The course's layout: one prompt per row.
prompt_major = generation_major_to_prompt_major(generation_major, K)
print("prompt-major rewards:\n", prompt_major.view(-1, K))
advantages = rloo_advantages(prompt_major, K)
print("prompt-major advantages:\n", advantages.view(-1, K))
print("same numbers, reordered:",
      torch.allclose(prompt_major_to_generation_major(advantages, K), doc_advantages))

# %% [markdown]
# The documentation's `advantage[7]` (generation 2 of prompt 1) lives at index `1 * K + 2 = 6` in
# prompt-major order. A handy identity: the leave-one-out advantage is the group-mean
# advantage stretched by `K / (K − 1)`, `A_i = K/(K−1) · (r_i − mean(r))`. So RLOO and an
# unscaled GRPO (`scale_rewards="none"`) point the same way; they differ by that factor
# and by GRPO's division by the std.

# %%
group = prompt_major.view(-1, K)
stretched = K / (K - 1) * (group - group.mean(1, keepdim=True))
print("K/(K-1) * (r - mean) == leave-one-out:", torch.allclose(stretched.flatten(), advantages))

# %% [markdown]
# ### Exercise 1 — `rloo_advantages(rewards, k)`
#
# Open `exercises/ex08_rloo.py` and implement the leave-one-out advantage for a
# **prompt-major** batch. The check runs the documentation's example (translated), random groups,
# and names the usual slips: the generation-major reshape, a baseline that includes the
# sample's own reward, dividing by K instead of K − 1.

# %%
from course_lib.checks import ex08
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex08_rloo")
feedback(ex08.check_rloo_advantages, ex.rloo_advantages);

# %% [markdown]
# ## 3. The KL penalty lives in the reward
#
# GRPO adds `β · KL` to the *loss*. RLOO, like the PPO-for-RLHF recipe of Ziegler et al.,
# subtracts it from the *reward* before computing advantages. With the per-token estimate
# `kl_t = log π(y_t) − log π_ref(y_t)` (the k1 estimator of lesson 03) on the completion's
# tokens:
#
# ```text
# non_score_reward = -kl_coef * kl.sum(1)          # one number per completion
# rlhf_reward      = score + non_score_reward      # = score - kl_coef * KL
# advantages       = leave-one-out(rlhf_reward)
# ```
#
# `kl_coef` is β (default 0.05 in the documented config). The documentation describes
# `objective/non_score_reward` as "basically `beta * kl.sum(1)`" and `objective/rlhf_reward`
# as "`score - non_score_reward`"; in the code the logged `non_score_reward` already carries
# the minus sign (it is a negative number when the policy drifted), and the reward is
# `score + non_score_reward`. Both descriptions give the same `rlhf_reward = score − β·KL`.
#
# `course_lib.algos.rloo.rloo_advantages_with_kl` is what the trainer calls. Here it
# is on two completions per prompt whose tokens drifted from the reference:

# %%
from course_lib.algos import make_config
from course_lib.algos.rloo import rloo_advantages_with_kl

scores = torch.tensor([1.0, 0.0, 1.0, 1.0])                      # (B,) two prompts, K = 2
logps = torch.tensor([[-0.2, -0.1, -0.3], [-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-0.1, -0.1, -9.0]])
ref_logps = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.5, -1.0], [-0.5, -0.5, -0.5], [-0.6, -0.6, -1.0]])
mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
is_eos = torch.tensor([True, True, True, True])

config = make_config("rloo", rloo_k=2, kl_coef=0.1)  # the documentation's names are accepted as aliases
advantages, metrics = rloo_advantages_with_kl(scores, logps, ref_logps, mask, is_eos, config)
print("KL per completion:", ((logps - ref_logps) * mask).sum(1).tolist())
print("advantages:", [round(a, 3) for a in advantages.tolist()])
print({k: round(v, 4) for k, v in metrics.items()})

# %% [markdown]
# The third and fourth completions both scored 1. Without the KL term their advantages
# would be 0; with it, the one that drifted further from the reference (KL = 1.0 vs 0)
# gets a negative advantage. That is the KL penalty at work: among equally good answers,
# prefer the one the reference model would also have written.
#
# ### Exercise 2 — `rloo_reward_with_kl(scores, logps, ref_logps, mask, kl_coef)`
#
# Return `(rlhf_reward, non_score_reward)`. Mind the padding: positions where `mask == 0`
# hold garbage log-probs after a real forward pass.

# %%
ex = load_exercise("ex08_rloo")
feedback(ex08.check_rloo_reward_with_kl, ex.rloo_reward_with_kl);

# %% [markdown]
# ## 4. Token-level or sequence-level KL (Reinforce++, eq. 1)
#
# The *Reinforce++* report (Jian Hu) writes the reward per token:
#
# $$r_t = \mathbb{1}[t = \text{EOS}]\, r(x, y) - \beta\, \mathrm{KL}_t ,$$
#
# the score on the last token, the KL penalty on every token. The sequence-level penalty
# (RLOO's default) adds the KL up first and subtracts it once. Summed over the completion,
# the two are the same number, so in an RLOO trainer — one action per completion, one
# advantage per completion — `token_level_kl` would change no advantage (check below), and
# the course's `RLOOConfig` refuses `token_level_kl=True` rather than accept a switch that
# does nothing. Where it matters is when every token gets its own return, the
# **reward-to-go** `G_t = Σ_{s ≥ t} r_s`, as in Reinforce++ proper and in PPO: then a token
# is charged only for the drift that comes *after* it.

# %%
per_token = -0.1 * (logps - ref_logps) * mask                  # eq. 1: KL on every token ...
last = mask.sum(1).long() - 1
per_token[torch.arange(4), last] += scores                     # ... and the score on the last one
sequence_level = scores - 0.1 * ((logps - ref_logps) * mask).sum(1)  # score - beta * summed KL
print("per-token rewards summed = sequence-level reward:", torch.allclose(per_token.sum(1), sequence_level))
try:
    make_config("rloo", rloo_k=2, kl_coef=0.1, token_level_kl=True)
except ValueError as error:
    print("refused:", error)

reward_to_go = per_token.flip(1).cumsum(1).flip(1) * mask      # G_t = sum of rewards from t on
print("per-token rewards:\n", per_token)
print("reward-to-go G_t (what a per-token advantage would start from):\n", reward_to_go)

# %% [markdown]
# ### Exercise 3 — `token_level_rewards(scores, logps, ref_logps, mask, kl_coef)`
#
# Build eq. 1's `(B, T)` rewards. With right padding the last valid token of a row is at
# `mask.sum(1) − 1`, not at the last column. The check also verifies that your rewards sum
# back to the sequence-level `rlhf_reward`.

# %%
ex = load_exercise("ex08_rloo")
feedback(ex08.check_token_level_rewards, ex.token_level_rewards);

# %% [markdown]
# ## 5. Reinforce++ options and the EOS trick
#
# The same report collects a few stabilising tricks. The RLOO trainer documented in the
# source notes, TRL's older on-policy `RLOOTrainer`, exposed them, and the course's config
# accepts those names (TRL 1.16's rewritten `RLOOConfig` renamed or removed most of them:
# see the table after this one):
#
# | option | what it does | why |
# |---|---|---|
# | `normalize_reward` | scores → mean 0, std 1 over the batch | stable scale across prompts and training time |
# | `reward_clip_range` (default 10) | clip the (normalized) scores to ±10 | one extreme score cannot dominate the update and blow up gradients |
# | `normalize_advantage` | advantages → mean 0, std 1 over the batch | stable step size |
# | `token_level_kl` | eq. 1 instead of a summed penalty | per-token credit for drift (section 4; only `False` here) |
#
# (The documentation's parameter list says `token_level_kl` defaults to True, while the signature it
# prints says False. The course follows the signature: False, the only value its RLOO accepts.) In the course's trainer, as
# in the older TRL `RLOOTrainer`, the clip acts on the normalized scores (TRL 1.16 changed
# the field's meaning: see the table below). A z-score beyond 10 needs a large batch and
# a wild outlier — exactly the case the clip is for:

# %%
from course_lib.algos.rloo import clip_rewards, normalize_advantages, normalize_rewards

batch_scores = torch.cat([torch.randn(199, generator=torch.Generator().manual_seed(1)), torch.tensor([400.0])])
normalized = normalize_rewards(batch_scores)
clipped = clip_rewards(normalized, 10.0)
print(f"outlier: raw {batch_scores[-1]:.0f} -> normalized {normalized[-1]:.2f} -> clipped {clipped[-1]:.2f}")
print(f"a typical score: raw {batch_scores[0]:.3f} -> normalized {normalized[0]:.3f}")
adv = normalize_advantages(rloo_advantages(clipped, 4))
print(f"normalized advantages: mean {adv.mean():.2e}, std {adv.std():.3f}")

# %% [markdown]
# ### Batch-global normalization (Reinforce++) against GRPO's per-group std
#
# `normalize_advantage` divides by **one** standard deviation, that of the whole batch.
# Reinforce++ argues for exactly this: GRPO divides each group by its *own* std, and a
# group whose prompt is nearly always solved (or nearly never) has a tiny std, so its rare
# odd answer gets a huge advantage (lesson 06's difficulty bias). A batch-global std keeps
# the scale of every prompt's advantages proportional to its real reward differences,
# while still giving the whole batch unit variance. Reinforce++ comes in two forms: the
# plain one has no per-prompt baseline at all (`(r − mean_batch) / std_batch`), the
# "baseline" variant first subtracts each group's mean, as RLOO with
# `normalize_advantage=True` does.
#
# Measured below: 2,000 simulated batches of 5 prompts × 8 completions with 0/1 rewards,
# the prompts solved with probability 0.05, 0.25, 0.5, 0.75 and 0.95. For each scheme, per
# prompt difficulty: the mean advantage a *correct* answer receives, the mean advantage a
# *wrong* one receives, and the net push on a prompt (the sum of its group's advantages).

# %%
from course_lib.algos.grpo import group_advantages

difficulty = torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95])
G, trials = 8, 2000
sim = torch.Generator().manual_seed(0)
schemes = {"GRPO, per-group std": lambda r: group_advantages(r, G, scale_rewards="group"),
           "RLOO + batch-global std": lambda r: normalize_advantages(rloo_advantages(r, G)),
           "Reinforce++ (no group baseline)": lambda r: (r - r.mean()) / r.std().clamp(min=1e-8)}
credit = {name: torch.zeros(len(difficulty)) for name in schemes}  # summed advantages of the correct answers
blame = {name: torch.zeros(len(difficulty)) for name in schemes}  # ... of the wrong answers
counts, wrong_counts, batches = torch.zeros(len(difficulty)), torch.zeros(len(difficulty)), 0
for _ in range(trials):
    rewards = (torch.rand(len(difficulty), G, generator=sim) < difficulty.unsqueeze(1)).float()  # (prompts, G)
    flat = rewards.flatten()
    if flat.std() == 0:
        continue
    counts, wrong_counts, batches = counts + rewards.sum(1), wrong_counts + (1 - rewards).sum(1), batches + 1
    for name, scheme in schemes.items():
        advantages = scheme(flat).view(-1, G)
        credit[name] += (advantages * rewards).sum(1)
        blame[name] += (advantages * (1 - rewards)).sum(1)
for title, table in (("mean advantage of a correct answer", lambda n: credit[n] / counts.clamp(min=1)),
                     ("mean advantage of a wrong answer", lambda n: blame[n] / wrong_counts.clamp(min=1)),
                     ("net push on the prompt (group sum)", lambda n: (credit[n] + blame[n]) / batches)):
    print(f"{title:<34}" + "".join(f"  p={p:<5.2f}" for p in difficulty.tolist()))
    for name in schemes:
        print(f"  {name:<32}" + "".join(f"  {v:+7.2f}" for v in table(name).tolist()))
grpo_row, batch_row = credit["GRPO, per-group std"] / counts, credit["RLOO + batch-global std"] / counts
print(f"hard prompt (p=0.05) over 50/50 prompt: GRPO {grpo_row[0] / grpo_row[2]:.2f}x, "
      f"batch-global {batch_row[0] / batch_row[2]:.2f}x")

# %% [markdown]
# Read the rows. Under GRPO's per-group std, a correct answer to the hardest prompt gets
# the largest multiple of a 50/50 prompt's advantage (the last line): a group with one
# success has a small std, and dividing by it inflates that one answer. With a single
# batch-global std the multiple shrinks to what the centring alone gives (a rare success
# is further from its group's mean), and the ranking of prompts follows their real reward
# differences. The wrong answers mirror it: with a group baseline (GRPO, RLOO) the rare
# failure of an easy prompt is pushed down hardest. Plain Reinforce++, with no per-prompt
# baseline, gives every correct answer, and every wrong one, nearly the same advantage
# whatever the prompt: it no longer singles out a hard prompt's rare success or an easy
# prompt's rare failure. Instead the prompt's difficulty leaks into the signal (the third
# table): a hard prompt's group is pushed down as a whole, an easy prompt's up, while the
# group baselines give every prompt a net push of 0. Which
# weighting is right is the question of lesson 06's `scale_rewards`: "group" (GRPO),
# "batch" (the batch-global std, as here) or "none" (Dr. GRPO).

# %% [markdown]
# **The same options in TRL 1.16.** The source notes document TRL's older `RLOOTrainer`.
# TRL 1.16 rewrote it on the machinery of its `GRPOTrainer` and renamed or removed most of
# these options. The cell reads TRL 1.16's `RLOOConfig` itself, so the table stays true to
# the installed version:

# %%
import dataclasses

from trl import RLOOConfig as TRLRLOOConfig

trl_defaults = {field.name: field.default for field in dataclasses.fields(TRLRLOOConfig)}
course_config = make_config("rloo")  # the course's RLOOConfig, every field at its default
documented = [  # name in the source notes, its default there, TRL 1.16's counterpart (None: removed), note
    ("rloo_k", 2, "num_generations", "completions per prompt"),
    ("kl_coef", 0.05, "beta", "still a penalty on the reward, k1 summed over the completion"),
    ("num_ppo_epochs", 4, "num_iterations", "passes over each generation batch"),
    ("cliprange", 0.2, "epsilon", "epsilon_high (default None = epsilon) allows an asymmetric clip"),
    ("num_mini_batches", 1, "steps_per_generation", "None means gradient_accumulation_steps"),
    ("temperature", 0.7, "temperature", ""),
    ("normalize_advantage", False, "normalize_advantages", "over the generation batch"),
    ("reward_clip_range", 10.0, "reward_clip_range", "now a (min, max) pair on the raw rewards; None: no clip"),
    ("normalize_reward", False, None, "removed"),
    ("token_level_kl", False, None, "removed: the KL is always summed per completion"),
    ("missing_eos_penalty", None, None, "removed; mask_truncated_completions=True drops truncated ones from the loss"),
]
print(f"{'source notes':<20}{'default':>8}   {'TRL 1.16':<22}{'default':>8}   {'course_lib':>10}   note")
for name, default, new_name, note in documented:
    assert (name in trl_defaults) == (name == new_name), f"TRL's RLOOConfig changed around {name}"
    new_default = repr(trl_defaults[new_name]) if new_name else ""
    ours = repr(getattr(course_config, name)) if hasattr(course_config, name) else "—"
    print(f"{name:<20}{default!r:>8}   {new_name or '—':<22}{new_default:>8}   {ours:>10}   {note}")

# %% [markdown]
# Two defaults changed what a run does: TRL 1.16 samples at temperature 1.0 and makes one
# pass over each batch (`num_iterations=1`), so its RLOO is on-policy REINFORCE with a
# leave-one-out baseline unless you ask for more passes; the documented trainer made four
# at temperature 0.7. The last column shows the course's own defaults; the course accepts
# both spellings (`rloo_k` and `num_generations`, `kl_coef` and `beta`, ...), so the source
# notes' commands read the same here. Section 6 passes every value explicitly, so its
# runs do not depend on either library's defaults. The course's defaults match TRL 1.16's
# except `reward_clip_range`, which keeps the older trainer's meaning: ±10 on the
# *normalized* scores, inert unless `normalize_reward=True` (off by default, so a default
# run clips nothing, as TRL's default None). TRL 1.16's `(min, max)` pair on the raw
# rewards is refused with a message that says so. With that one field aside, switching a
# GRPO run to RLOO changes the advantage and nothing else; the older trainer's defaults
# are one argument away: `make_config("rloo", preset="older_trl_rloo")`.
#
# **The EOS trick** (`missing_eos_penalty`): subtract a fixed penalty from the score of
# every completion that did not end with an EOS token — it ran into `max_completion_length`
# instead. The model learns to finish its answers, which makes completions more coherent;
# the documentation's example uses 1.0.

# %%
config = make_config("rloo", rloo_k=2, kl_coef=0.0, missing_eos_penalty=1.0)
truncated = torch.tensor([True, False, True, True])  # completion 1 never emitted EOS
_, metrics = rloo_advantages_with_kl(scores, logps, ref_logps, mask, truncated, config)
print("scores before:", scores.tolist(), " mean after the EOS trick:", metrics["objective/scores"])

# %% [markdown]
# ## 6. A real run, and how to read its metrics
#
# Now the whole loop on the tiny model: the `arithmetic` task, reward 1 when the first
# number of the answer is right plus a proximity reward (lesson 09) that gives near misses
# partial credit, so that almost every group has something to learn from. The run uses
# **TRL 1.16's `RLOOConfig` defaults**, written out below and checked against the installed
# TRL: K = 2 completions per prompt, `beta = 0.05` (k1 summed per completion, in the
# reward), one pass per batch (`num_iterations = 1`), clip 0.2, temperature 1.0, no
# advantage normalization, no reward clipping. Only the learning rate and the batch are
# the tiny model's (TRL's default learning rate, 1e-6, is tuned for billions of
# parameters and barely moves a 1M-parameter model). A second run replays the **older
# trainer's** defaults from the source notes, as history: 4 PPO epochs per batch,
# temperature 0.7, plus the EOS trick of the documentation's example command
# (`missing_eos_penalty=1.0`; the trainer's own default was None).
#
# `log_completions=True` prints a sample table every `logging_steps`: the course's
# version of the documentation's "what is my model actually doing?" table (query, model
# response, score), here with the advantage each completion received. TRL's older RLOO
# trainer printed such a table `num_sample_generations` times per run (default 10).
#
# In fast mode the runs are a dozen optimizer steps: enough to read every metric, far too
# few to learn (expect a flat, noisy reward; real tasks take hundreds of steps). Without
# fast mode they run 200 steps.

# %%
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

dataset = get_task("arithmetic", n=256)
reward_funcs = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])

# TRL 1.16's RLOOConfig defaults, passed explicitly (the course's own defaults may differ).
TRL_RLOO_DEFAULTS = dict(num_generations=2, beta=0.05, num_iterations=1, epsilon=0.2, epsilon_high=None,
                         temperature=1.0, normalize_advantages=False, steps_per_generation=None)
mismatched = {name: (value, trl_defaults[name]) for name, value in TRL_RLOO_DEFAULTS.items()
              if trl_defaults[name] != value}
assert not mismatched, f"TRL's RLOOConfig defaults changed: {mismatched}"
assert trl_defaults["reward_clip_range"] is None  # TRL 1.16 clips no reward by default
# The older RLOOTrainer of the source notes (history): its defaults, plus the example command's EOS penalty.
OLDER_RLOO_DEFAULTS = dict(num_generations=2, beta=0.05, num_iterations=4, epsilon=0.2, temperature=0.7,
                           normalize_advantages=False, missing_eos_penalty=1.0)


def rloo_run(defaults: dict, learning_rate: float, steps: int, name: str, **overrides) -> list[dict]:
    model, tokenizer = load_policy("tiny")
    config = make_config("rloo", **defaults, normalize_reward=False,  # no reward normalization, so no clip
                         per_device_train_batch_size=scaled(16, 64), max_completion_length=8,
                         learning_rate=learning_rate, lr_scheduler_type="constant", max_steps=steps,
                         output_dir=str(OUTPUT / name), overwrite_output_dir=True, report_to="none", **overrides)
    return Trainer(config, reward_funcs, dataset, model, tokenizer, progress=False).train()


healthy = rloo_run(TRL_RLOO_DEFAULTS, 3e-5, scaled(12, 200), "lesson08_rloo", log_completions=True,
                   logging_steps=scaled(6, 50), num_completions_to_print=4)
older = rloo_run(OLDER_RLOO_DEFAULTS, 3e-5, scaled(12, 200), "lesson08_rloo_older")

# %% [markdown]
# Each row of the history is one optimizer step. The documentation's metrics (the older
# trainer's names), their nearest counterpart in TRL 1.16's `RLOOTrainer` (— where it logs
# none), what they mean, and what healthy looks like. A learner moving to TRL 1.16 reads
# the second column:
#
# | metric (older trainer) | TRL 1.16 `RLOOTrainer` | meaning | healthy |
# |---|---|---|---|
# | `eps` | — | episodes (completions) per second | throughput; drops when generation slows |
# | `objective/kl` | `kl` (per-token mean, only when β ≠ 0) | mean KL(π ‖ π_ref) per completion, summed over tokens | grows slowly from 0; a k1 estimate, so a batch can even read slightly negative |
# | `objective/entropy` | `entropy` (per-token mean) | mean over completions of −Σ_t log π(y_t), a sampled estimate of the policy's entropy summed over the completion: how random it is | falls as the policy sharpens; a crash to 0 means it stopped exploring |
# | `objective/non_score_reward` | — | −β · KL summed per completion | small and negative |
# | `objective/rlhf_reward` | — | score + non_score_reward: **the objective** | **keeps rising** |
# | `objective/scores` | `reward`, `rewards/<name>/mean` | mean score from the reward function / model (after the EOS penalty) | rising |
# | `policy/approxkl_avg` | — | ½·mean((log π − log π_old)²) between the current policy and the one that sampled the batch (it grows over the PPO epochs) | small; **not** the same as `objective/kl` (that one is against the reference) |
# | `policy/clipfrac_avg` | `clip_ratio/region_mean` (share of completions clipped) | fraction of completions whose update was clipped | 0 on the first pass over a batch; on later passes RLOO's can be large (see below); values near 1, or a rise from one batch to the next, mean steps too large |
# | `loss/policy_avg` | `loss` | the clipped policy loss | hard to read alone; noisy around 0 |
# | `val/clipfrac_avg` | — | clipped fraction of *value-function* updates | RLOO has no value function, so the course logs it for PPO only (lesson 04) |
# | `policy/entropy_avg` | `entropy` | entropy of the policy during the updates (course name: `entropy`, per token) | like `objective/entropy` |
# | `val/ratio` | — | mean of π / π_old | **hovers around 1.0**; clipped by `cliprange` 0.2 |
# | `val/ratio_var` | — | variance of that ratio | small |
# | `val/num_eos_tokens` | `completions/clipped_ratio` (share cut at the limit: the other side) | completions that ended with EOS | near the batch size; low means truncation |
# | `lr`, `episode` | `learning_rate`, `num_tokens` | learning rate; completions generated so far | bookkeeping |
#
# The metric the documentation singles out for debugging is `val/ratio`: if it reads 2.0 or
# 1000.0, or 0.1, the policy being trained is far further from the one that sampled the
# batch than the clip range allows. A
# recipe for reading it:
#
# 1. **On the first pass over a fresh batch it must be exactly 1.0** (the policy that
#    sampled is the policy being trained). With TRL 1.16's `num_iterations=1` every step
#    is such a pass. If it is not 1 there, the log-probs of sampling and training disagree
#    for the *same* weights: a sampler/trainer mismatch (another engine or precision,
#    lesson 10), dropout left on during training, or padding that differs between the two
#    forward passes. Fix that before tuning anything.
# 2. **On later passes** (`num_iterations > 1`) it may drift, inside the clip band
#    `[1 − ε, 1 + ε]`. Leaving the band means the update was too drastic: lower the
#    learning rate, make fewer passes, and check the reward scale (an exploding reward
#    makes exploding advantages) and the gradient norm.
# 3. **Confirm with its companions**: `policy/approxkl_avg` (should stay small) and
#    `policy/clipfrac_avg` (a rise from one batch to the next means the steps grow).

# %%
from course_lib.widgets import plot_training_history

RLOO_PANELS = ["objective/rlhf_reward", "objective/scores", "objective/kl", "objective/non_score_reward",
               "objective/entropy", "entropy", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg",
               "val/ratio", "val/ratio_var", "val/num_eos_tokens"]
figure = plot_training_history(healthy, keys=RLOO_PANELS, columns=4,
                               title="RLOO on the tiny model, TRL 1.16's defaults, lr 3e-5")
figure.axes[RLOO_PANELS.index("val/ratio")].axhspan(0.8, 1.2, color="tab:green", alpha=0.12)  # the clip band
display(figure)
last = healthy[-1]
print(f"bookkeeping at step {last['step']}: episode {last['episode']}, eps {last['eps']:.0f} completions/s, "
      f"lr {last['lr']:.2e}")
for label, history in (("TRL 1.16 defaults (1 pass)", healthy), ("older trainer (4 passes)", older)):
    ratios = [row["val/ratio"] for row in history]
    clipped = [row["policy/clipfrac_avg"] for row in history]
    print(f"{label:<27}: val/ratio {min(ratios):.3f} to {max(ratios):.3f}, "
          f"policy/clipfrac_avg max {max(clipped):.2f}, approxkl max {max(r['policy/approxkl_avg'] for r in history):.4f}")
peak = max(older, key=lambda row: row["policy/clipfrac_avg"])
older_ratio = sum(row["val/ratio"] for row in older) / len(older)
print(f"older trainer: clipped fraction peaks at {peak['policy/clipfrac_avg']:.2f} (step {peak['step']}), "
      f"while val/ratio averages {older_ratio:.2f}")

# %% [markdown]
# With TRL 1.16's defaults every step is a first pass: `val/ratio` is 1 and nothing is
# clipped, as step 1 of the recipe says. The older trainer's four passes show the
# ratio move on passes 2 to 4, and its clipped fraction (printed above) can reach tens
# of percent while `val/ratio` stays near 1: a healthy run with a high clipped fraction.
#
# **Why RLOO's clipped fraction runs high.** For PPO with per-token ratios such fractions
# would be unusually high; in RLOO the ratio is taken per **sequence**,
#
# $$\frac{\pi(y \mid x)}{\pi_{old}(y \mid x)} = \prod_t \frac{\pi(y_t \mid \cdot)}{\pi_{old}(y_t \mid \cdot)}
#   = \exp\Big(\sum_t \log r_t\Big),$$
#
# a product of token ratios. Small per-token moves add up in the exponent: independent
# ones grow like √T, and moves in a shared direction (one advantage pushes every token of
# a completion the same way) grow like T. So the sequence ratio leaves `[1 − ε, 1 + ε]`
# far more often than any token ratio does. The cell draws per-token log-ratios with a
# spread of 0.05, far inside the clip range, and counts how often the ratio falls outside
# `[0.8, 1.2]`, per token and per sequence, without and with a shared drift of 0.02 per
# token:

# %%
generator = torch.Generator().manual_seed(0)
epsilon, spread, drift, n = 0.2, 0.05, 0.02, 100_000


def outside(log_ratios):
    ratios = log_ratios.exp()
    return ((ratios < 1 - epsilon) | (ratios > 1 + epsilon)).float().mean().item()


print(f"{'tokens T':>8} {'token ratios outside':>21} {'sequence ratios outside':>24} {'... with a shared drift':>24}")
for T in (1, 4, 8, 32):
    token_log_ratios = spread * torch.randn(n, T, generator=generator)  # (n, T)
    print(f"{T:>8} {outside(token_log_ratios):>21.1%} {outside(token_log_ratios.sum(1)):>24.1%} "
          f"{outside((token_log_ratios + drift).sum(1)):>24.1%}")

# %% [markdown]
# Not one token ratio leaves the range, yet at the 8 tokens of this lesson's completions
# 16% of sequence ratios do (44% with the drift), and at 32 tokens about half. The clip
# only binds on the side that matches the advantage's sign, which is why the clipped
# fraction stays below the fraction outside. Read RLOO's clipped fraction against the
# completion length and compare it across training rather than against PPO's usual
# "a few percent"; `val/ratio` and `policy/approxkl_avg` say whether the steps are too
# large. (GSPO, lesson 06, uses a sequence ratio too and normalises it by the length for
# this reason.)

# %% [markdown]
# Now the older trainer's run with a learning rate 100 times larger. Watch `val/ratio`
# and `policy/approxkl_avg` from the second step on, then the KL to the reference and the
# score once the policy has been pushed off a cliff.

# %%
drastic = rloo_run(OLDER_RLOO_DEFAULTS, 3e-3, scaled(8, 40), "lesson08_rloo_drastic")
figure = plot_training_history(drastic, keys=["val/ratio", "policy/approxkl_avg", "objective/kl", "objective/scores"],
                               columns=4, title="The same run at lr 3e-3")
figure.axes[0].axhspan(0.8, 1.2, color="tab:green", alpha=0.12)  # the clip band [1 - 0.2, 1 + 0.2]
display(figure)
for label, history in (("lr 3e-5", older), ("lr 3e-3", drastic)):
    ratios = [round(row["val/ratio"], 2) for row in history[:8]]
    outside = [row["step"] for row in history if not 0.8 <= row["val/ratio"] <= 1.2]
    print(f"{label}, 4 passes: val/ratio over the first 8 steps {ratios}; steps outside [0.8, 1.2]: {outside}")

# %% [markdown]
# ### Exercise 4 — `rloo_sequence_clipped_loss(logps, old_logps, advantages, mask, cliprange)`
#
# The loss behind every number above: PPO's clipped surrogate with **one ratio per
# completion**, `exp(Σ_t (log π − log π_old))`, averaged over completions. The check
# compares values and gradients with `course_lib.algos.rloo.rloo_policy_loss` (itself
# checked against TRL 1.16's `RLOOTrainer._compute_loss`) on padded completions.

# %%
ex = load_exercise("ex08_rloo")
if feedback(ex08.check_rloo_sequence_clipped_loss, ex.rloo_sequence_clipped_loss):
    # Your loss on the section 1 batch after a pretend update: each completion's tokens moved by 0.1.
    moved = token_logps.detach() + 0.1
    ours = ex.rloo_sequence_clipped_loss(moved, token_logps.detach(), advantages_demo, mask_demo, 0.2)
    library = rloo_policy_loss(moved, token_logps.detach(), advantages_demo, mask_demo, cliprange=0.2).loss
    print(f"every token moved by +0.1: your loss {ours.item():+.4f}, the library's {library.item():+.4f}")

# %% [markdown]
# ## 7. From the documentation: commands, memory, and a benchmark
#
# The documentation's smoke test trains a 14M-parameter Pythia against a dummy reward
# model of the same size:
#
# ```text
# python examples/scripts/rloo/rloo.py --learning_rate 3e-6 --output_dir models/minimal/rloo \
#     --per_device_train_batch_size 64 --gradient_accumulation_steps 1 --total_episodes 10000 \
#     --model_name_or_path EleutherAI/pythia-14m --reward_model_path EleutherAI/pythia-14m \
#     --missing_eos_penalty 1.0
# ```
#
# Its config names map onto the course's (`rloo_k` → `num_generations`, `kl_coef` → `beta`,
# `num_ppo_epochs` → `num_iterations`, `cliprange` → `epsilon`). `total_episodes` counts
# **completions**, and three counts must be kept apart:
#
# - a **rollout** generates one batch of `per_device_train_batch_size ×
#   gradient_accumulation_steps × num_mini_batches × processes` = 64 × 1 × 1 × 1 = 64
#   completions; the documented trainer runs ⌈10,000 / 64⌉ = **157 rollouts** (so it
#   generates 157 × 64 = 10,048 episodes, slightly more than asked);
# - each rollout is trained on for `num_ppo_epochs` = 4 passes of `num_mini_batches` = 1
#   mini-batch, one optimizer update each: 157 × 4 = **628 optimizer updates**;
# - the course's `max_steps` counts optimizer updates, and its `episode` column counts
#   completions generated so far. The runs of section 6 show the relation (printed
#   below): with 4 passes per rollout, the older trainer's last step is rollout
#   steps / 4, and its episode count is that many rollouts times the batch; with TRL
#   1.16's single pass, every step is a rollout.
#
# The same run with the course's config, every documented default passed explicitly:

# %%
import math

rollouts = math.ceil(10_000 / 64)
for label, history in (("older trainer", older), ("TRL 1.16 defaults", healthy)):
    print(f"{label}: optimizer step {history[-1]['step']} = episode {history[-1]['episode']}")
documented_config = make_config("rloo", learning_rate=3e-6, per_device_train_batch_size=64,
                                gradient_accumulation_steps=1, missing_eos_penalty=1.0, rloo_k=2, kl_coef=0.05,
                                num_ppo_epochs=4, num_mini_batches=1, cliprange=0.2, temperature=0.7,
                                max_steps=rollouts * 4)  # num_ppo_epochs 4 x num_mini_batches 1
updates_per_rollout = documented_config.optimizer_steps_per_generation
assert rollouts * updates_per_rollout == documented_config.max_steps
print(f"{rollouts} rollouts x {documented_config.effective_generation_batch_size} completions = "
      f"{rollouts * documented_config.effective_generation_batch_size} episodes; "
      f"{rollouts} rollouts x {updates_per_rollout:.0f} updates = {documented_config.max_steps} optimizer steps")
print({name: getattr(documented_config, name) for name in
       ("rloo_k", "kl_coef", "num_ppo_epochs", "cliprange", "temperature", "missing_eos_penalty", "max_steps")})

# %% [markdown]
# **Memory tips** from the same page: out of memory? Lower `per_device_train_batch_size`
# and raise `gradient_accumulation_steps` — the effective batch stays the same, the
# activations held at once shrink (lesson 07). With several GPUs, DeepSpeed ZeRO stage 3
# shards parameters, gradients and optimizer state across them
# (`accelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml ...`).
# Under ZeRO-3, TRL's `ds3_gather_for_generation` (default True) gathers the sharded
# policy weights for generation, which is faster; turning it off lets you train a model
# larger than one GPU's memory, at the price of slower generation.
#
# **The benchmark.** To validate the trainer, TRL trained Pythia-1B (`EleutherAI/pythia-
# 1b-deduped`, with the SFT and reward models of the N+ implementation details study) on
# TL;DR summarization: DeepSpeed ZeRO-2, `num_ppo_epochs 2`, `num_mini_batches 2`,
# learning rate 3e-6, per-device batch 8 with 8 accumulation steps (16 and 16 in a later
# version of the page), `local_rollout_forward_batch_size 16`, `kl_coef 0.03`,
# `missing_eos_penalty 1.0`, `stop_token eos`, 1,000,000 episodes. Judged by GPT-4o mini
# against the reference summaries on 1,000 examples (the checkpoints served with vLLM for
# the evaluation), the RLOO checkpoint won **51.2%** of comparisons, the SFT starting
# point **33.0%** — a sign that the RLOO training works as intended. These are the
# documentation's numbers, not measured here: nothing in this course runs a 1B model or
# an LLM judge.

# %% [markdown]
# ## Explore
#
# The dashboard below updates live while a run trains (in Jupyter with ipywidgets). Change
# the learning rate, `num_ppo_epochs` or `kl_coef` and watch `val/ratio` and
# `objective/rlhf_reward`.

# %%
try:
    import ipywidgets  # noqa: F401
except ImportError:
    ipywidgets = None
if ipywidgets is not None and not fast_mode():
    from course_lib.widgets import LiveDashboard

    dashboard = LiveDashboard(keys=["objective/rlhf_reward", "objective/kl", "val/ratio", "policy/approxkl_avg"],
                              every=5, columns=4)
    model, tokenizer = load_policy("tiny")
    config = make_config("rloo", rloo_k=4, per_device_train_batch_size=32, max_completion_length=8,
                         learning_rate=1e-4, num_ppo_epochs=2, max_steps=100, output_dir=str(OUTPUT / "lesson08_live"),
                         overwrite_output_dir=True, report_to="none")
    Trainer(config, reward_funcs, dataset, model, tokenizer, progress=False, on_step=dashboard.update).train()
else:
    print("Live dashboard skipped (fast mode or no ipywidgets); the figures above show the same metrics.")

# %% [markdown]
# ## Questions
#
# 1. The leave-one-out baseline excludes the sample's own reward. What would go wrong — in
#    expectation, not just in value — if it were included without the `K/(K−1)` factor?
#    And with K = 2, what is each advantage?
# 2. RLOO gives every token of a completion the same advantage; PPO gives each token its
#    own. When would per-token credit help, and what does PPO pay for it?
# 3. Sequence-level and token-level KL give the same RLOO advantages, and with the
#    lesson's γ = 1 the same reward-to-go at the first token (why?). Construct a case where
#    their reward-to-go differs at a later token, and say which token the token-level
#    version "blames" for the drift.
# 4. In the lr 3e-3 run, `val/ratio` left the band [0.8, 1.2] although the loss clips
#    there. How can the mean ratio leave the clip band? (Hint: for which samples does the
#    clipped term remove the gradient, and can those samples still move?)
# 5. `objective/rlhf_reward` should keep rising. Name two ways it can rise while the model
#    gets *worse* at the task, and the metric that would reveal each.

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("08", k)`
# prints the answer to question k (`show_answer("08")` prints them all). They are also in
# `notebooks/answers/08_rloo.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("08", 1)
