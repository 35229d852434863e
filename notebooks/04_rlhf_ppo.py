# %% [markdown]
# # Lesson 04 — RLHF with PPO on a language model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/04_rlhf_ppo.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 119 s of CPU time, measured on a
# 2-core CPU, three fifths of it the five PPO runs of sections 8 and 10 (90, 90 and 3 × 30
# steps, with their held-out evaluations) and a fifth the reward model of section 10; the
# wall time grows with the machine's load.*
#
# Lesson 03 built PPO's pieces on small tensors: the clipped ratio, the KL penalty, the
# value function and GAE. This lesson puts them on a language model, the way OpenAI's
# RLHF pipeline (InstructGPT, then ChatGPT) did, the way TRL's `PPOTrainer` did until TRL
# dropped it, and the way `course_lib`'s PPO mode still does.
#
# In this lesson you will:
# 1. map the RL vocabulary onto text generation: the **agent** is the language model, the
#    **state** is the prompt plus the tokens written so far, an **action** is one token;
# 2. count the **three-plus-one models** of PPO RLHF (policy, reference, value model,
#    reward model) and what they cost in memory;
# 3. build the **per-token reward**: a KL price on every token, the score of the whole
#    completion on its last token, and the **missing-EOS penalty**;
# 4. put a **value head** on the policy, run **GAE over tokens**, **whiten** the
#    advantages, and train the critic with the **clipped value loss**;
# 5. list the **implementation details** that make PPO for RLHF work in practice;
# 6. train the tiny model with PPO and read a **live dashboard** of its metrics;
# 7. put the **H** in RLHF: train a **Bradley-Terry reward model** on preference pairs,
#    use it as PPO's reward, and test for **reward over-optimisation** against two control
#    runs (a random reward and the true one).

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
import os
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from course_lib.machine import fast_mode, scaled

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))
print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. RLHF: the language model is the agent
#
# OpenAI popularised **RLHF**, reinforcement learning from human feedback: train an
# *agent* to answer a question (the *state*) with outputs that people rate as more
# useful. The feedback can be as light as the thumbs-up / thumbs-down ("likes") and the
# choice between two answers that ChatGPT asks its users for: such judgements are
# collected, a **reward model** is trained to predict them, and PPO then trains the
# language model to get high scores from that reward model.
#
# Read as an RL problem, generation is an episode:
#
# | RL word | in text generation |
# |---|---|
# | agent, policy π | the language model |
# | state s_t | the prompt plus the t tokens generated so far |
# | action a_t | the next token, sampled from π(· \| s_t) |
# | transition | append the token to the text (deterministic) |
# | episode end | the end-of-sequence token (EOS), or the length limit |
# | reward | a score for the *whole* completion, known only at the end |
#
# The cell below samples one answer from the tiny model and prints every (state, action)
# pair with the action's log-probability, the number PPO works with.

# %%
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.policy import completion_forward

policy, tokenizer = load_policy("tiny")
question = get_task("arithmetic", split="test", n=1, seed=3)[0]
text = tokenizer.apply_chat_template(question["prompt"], add_generation_prompt=True, tokenize=False)
prompt = tokenizer([text], return_tensors="pt", add_special_tokens=False)
torch.manual_seed(0)
sampled = policy.generate(**prompt, do_sample=True, temperature=1.0, max_new_tokens=8,
                          pad_token_id=tokenizer.pad_token_id)
completion_ids = sampled[:, prompt["input_ids"].shape[1]:]
completion_mask = torch.ones_like(completion_ids)
with torch.no_grad():
    logps, _, _ = completion_forward(policy, prompt["input_ids"], prompt["attention_mask"], completion_ids,
                                     completion_mask)
print(f"question: {question['question']}  (reference {question['answer']})")
for t, token in enumerate(completion_ids[0].tolist()):
    state = tokenizer.decode(completion_ids[0, :t]) if t else ""
    print(f"state s_{t} = prompt + {state!r:<10} action a_{t} = {tokenizer.decode([token])!r:<14} "
          f"log pi = {logps[0, t].item():7.3f}")

# %% [markdown]
# Only the last row knows whether the answer was right. That is the first thing PPO for
# language models has to deal with: a reward that comes once, at EOS, for a decision made
# of many tokens.

# %% [markdown]
# ## 2. Three models, plus one
#
# PPO for RLHF is made of three systems that run together, plus the judge:
#
# | model | what it is | trained? |
# |---|---|---|
# | **policy** | the language model being trained; it generates the completions | yes |
# | **reference policy** | a frozen copy of the starting model; the KL penalty (β > 0) keeps the policy near it | no |
# | **value model** (critic) | estimates the reward to expect from a state: the "average reward" PPO compares against | yes |
# | **reward model** | scores a finished completion (learned from human preferences); a **reward function** can replace it when answers are checkable | no |
#
# The value model is usually a language model of the same family with a scalar head in
# place of the vocabulary head. It can be a **separate** network (TRL's former
# `PPOTrainer` took a `value_model` of its own) or a **head on the policy's own hidden states**
# (shared body, cheaper; `course_lib.algos.ppo.ValueHead` does this). Memory, with a rough rule of thumb per
# parameter (trained, mixed-precision Adam: 2 bytes of bf16 weights + 2 of bf16 gradients
# + 4 of fp32 master weights + 8 of fp32 Adam moments = 16; frozen: 2 bytes of bf16
# weights; activations and the KV cache come on top):

# %%
from course_lib.models import count_parameters
from course_lib.algos.ppo import ValueHead

TRAINED, FROZEN = 2 + 2 + 4 + 8, 2  # bytes per parameter
value_head = ValueHead(policy.config.hidden_size)
print(f"tiny policy: {count_parameters(policy):,} parameters; its value head: {count_parameters(value_head):,}")
for billions, hidden in ((1.5, 1536), (7.0, 4096)):
    n = billions * 1e9
    separate = (2 * TRAINED + 2 * FROZEN) * n / 1e9  # policy + value model trained, reference + reward frozen
    shared = (TRAINED * (n + hidden + 1) + 2 * FROZEN * n) / 1e9
    print(f"{billions}B policy: separate value model {separate:6.1f} GB | value head on the policy {shared:6.1f} GB "
          f"| GRPO with a reward function and beta = 0: {TRAINED * n / 1e9:5.1f} GB")

# %% [markdown]
# This is the bill that GRPO (lesson 05) cuts: it drops the value model, and with a
# verifiable reward function (RLVR) the reward model as well.

# %% [markdown]
# ## 3. The per-token reward
#
# The reward model gives one **score** per completion. PPO wants a reward per action, so
# the RLHF implementations (Ziegler et al. 2019, *Fine-Tuning Language Models from Human
# Preferences*; Stiennon et al. 2020, *Learning to Summarize from Human Feedback*) build
# one:
#
# $$r_t = -\beta\,\big(\log\pi(a_t\mid s_t) - \log\pi_{\text{ref}}(a_t\mid s_t)\big)
#   \;+\; \mathbb{1}[t = \text{last token}]\cdot \text{score}$$
#
# - every token pays a **KL price**, −β times the k1 estimate of lesson 03: a token the
#   policy now likes more than the reference did costs reward, one it likes less earns a
#   little;
# - the **score** lands on the **last valid token** only. Completions in a batch have
#   different lengths and are right-padded, so "last" means index `mask.sum() − 1` of each
#   row, not the last column;
# - summed over the tokens, the rewards give `score − β · KL(sequence)`: TRL's former
#   `PPOTrainer` logged the two parts as `objective/scores` and
#   `objective/non_score_reward`, their sum as `objective/rlhf_reward`, and `course_lib`
#   keeps those names.
#
# **The missing-EOS penalty ("EOS trick").** A completion cut by `max_completion_length`
# never emitted EOS; its score judges an unfinished text. The RLHF implementations
# subtract a fixed penalty from the score of such completions (`missing_eos_penalty`,
# 1.0 in TRL's examples), which teaches the model to finish its answers. OpenAI's
# original code did the same thing by replacing the score of responses without the stop
# token by −1.

# %%
import numpy as np

from course_lib.algos import make_config
from course_lib.algos.ppo import ppo_advantages

# Two completions: 4 tokens ending with EOS, and 6 tokens cut at the length limit.
example_mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.float32)
example_logps = torch.tensor([[-0.2, -1.0, -0.1, -0.3, 0, 0], [-0.5, -0.2, -2.0, -0.1, -0.4, -0.3]])
example_ref = torch.tensor([[-0.6, -0.9, -0.4, -0.3, 0, 0], [-0.5, -0.6, -1.5, -0.8, -0.4, -0.9]])
example_scores = torch.tensor([1.0, 1.0])
example_is_eos = torch.tensor([True, False])


def plot_token_rewards(beta: float = 0.5, missing_eos_penalty: float = 1.0):
    """Bars of the KL part and the score part of each token's reward, per completion."""
    kl_part = -beta * (example_logps - example_ref) * example_mask
    scores = example_scores - missing_eos_penalty * (~example_is_eos).float()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
    for row, ax in enumerate(axes):
        length = int(example_mask[row].sum())
        tokens = np.arange(length)
        score_part = np.zeros(length)
        score_part[-1] = scores[row].item()
        ax.bar(tokens, kl_part[row, :length].numpy(), color="tab:purple", label="-beta * KL_t")
        ax.bar(tokens, score_part, bottom=np.where(score_part != 0, kl_part[row, :length].numpy(), 0),
               color="tab:green", label="score (last token)")
        ax.axhline(0, color="0.3", linewidth=0.8)
        ax.set_xticks(tokens)
        ax.set_xlabel("token t")
        ended = ("ends with EOS" if example_is_eos[row]
                 else f"no EOS: score {example_scores[row]:.0f} - {missing_eos_penalty:g}")
        ax.set_title(f"completion {row} ({ended})", fontsize=9)
    axes[0].set_ylabel("reward r_t")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Per-token rewards, beta = {beta}")
    fig.tight_layout()
    return fig


plot_token_rewards()
plt.show()

# %% [markdown]
# Try other values of β and of the penalty (needs ipywidgets; without it the cell only
# prints a note).

# %%
try:
    import ipywidgets as widgets

    def _show(beta, missing_eos_penalty):
        plot_token_rewards(beta, missing_eos_penalty)
        plt.show()

    # A label box wide enough for "missing_eos_penalty" (the default one cuts it).
    wide = dict(style={"description_width": "150px"}, layout=widgets.Layout(width="440px"))
    widgets.interact(_show, beta=widgets.FloatSlider(value=0.5, min=0.0, max=2.0, step=0.05, description="beta",
                                                     **wide),
                     missing_eos_penalty=widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.25,
                                                             description="missing_eos_penalty", **wide))
except ImportError:
    print("ipywidgets is not installed: the interactive version is skipped (pip install ipywidgets).")

# %% [markdown]
# ### Exercise 1 — `per_token_rewards(scores, logps, ref_logps, mask, beta, is_eos, missing_eos_penalty)`
#
# Open `exercises/ex04_rlhf_ppo.py` and build the per-token rewards: the KL shaping on
# every valid token, the score (minus the penalty when there is no EOS) on each row's last
# valid token, 0 on padding. Then run the next cell.

# %%
from course_lib.checks import ex04
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex04_rlhf_ppo")
feedback(ex04.check_per_token_rewards, ex.per_token_rewards);

# %% [markdown]
# ## 4. The value head and GAE over tokens
#
# The critic predicts, at every state s_t, the return still to come: V(s_t). With a value
# head on the policy, that is one linear layer on the hidden state that also predicts the
# next token, so one forward pass gives both the log-probs and the values. `course_lib`
# initialises the head at zero, so the first advantages are not polluted by random value
# estimates.
#
# GAE (lesson 03) then runs **right to left over the tokens** of each completion:
#
# $$\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t), \qquad A_t = \delta_t + \gamma\lambda A_{t+1}$$
#
# with V = 0 after the last valid token (the episode ends there). Text is episodic and
# short, so RLHF uses **γ = 1**; **λ = 0.95** is the usual default. The value targets are
# the **returns** `A_t + V(s_t)`. `course_lib.algos.ppo.ppo_advantages` does all of
# it: penalty, per-token rewards, GAE and whitening. Below, the values are made up: they
# rise toward the score along the completion, as a half-trained critic's would.

# %%
from course_lib.algos.ppo import gae
from course_lib.algos.onpolicy import last_token_index

config = make_config("ppo", beta=0.5, missing_eos_penalty=1.0, gamma=1.0, lam=0.95)
example_values = torch.tensor([[0.3, 0.4, 0.5, 0.7, 0, 0], [0.2, 0.2, 0.3, 0.3, 0.2, 0.1]])
advantages, returns, _ = ppo_advantages(example_scores, example_logps, example_ref, example_values, example_mask,
                                        example_is_eos, config)
# The per-token rewards, spelled out for the plot below (ppo_advantages builds the same ones inside).
penalised_scores = example_scores - config.missing_eos_penalty * (~example_is_eos).float()
token_rewards = -config.beta * (example_logps - example_ref) * example_mask
token_rewards[torch.arange(2), last_token_index(example_mask)] += penalised_scores
print("per-token rewards:\n", token_rewards.round(decimals=3))
print("whitened advantages:\n", advantages.round(decimals=3))
print("returns (value targets):\n", returns.round(decimals=3))

# %% [markdown]
# How λ shapes the credit assignment: with λ = 0 each token only sees its one-step TD
# error (the critic's opinion matters most); with λ = 1 each token gets the whole
# remaining reward minus its value (Monte Carlo: unbiased, noisier).

# %%
from matplotlib.ticker import MaxNLocator

fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for row, ax in enumerate(axes):
    length = int(example_mask[row].sum())
    for lam, color in ((0.0, "tab:orange"), (0.95, "tab:blue"), (1.0, "tab:green")):
        raw, _ = gae(token_rewards[row:row + 1], example_values[row:row + 1], example_mask[row:row + 1],
                     gamma=1.0, lam=lam)
        ax.plot(range(length), raw[0, :length], "o-", color=color, label=f"λ = {lam}")
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.set_xlabel("token t")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # tokens are whole positions
    ax.set_title(f"completion {row}: raw GAE advantages", fontsize=9)
axes[0].set_ylabel("A_t (before whitening)")
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Whitening
#
# Scores from a reward model have an arbitrary scale and offset. PPO for RLHF therefore
# **whitens the advantages**: subtract their mean and divide by their standard deviation,
# over all valid tokens of the batch at once (padding excluded). The update then has a
# stable size whatever the reward scale. Optionally the per-token **rewards** are whitened
# too before GAE (`whiten_rewards=True`, off by default); there the mean is added back
# after scaling, so the batch keeps its **mean** reward. It does not keep each reward's
# **sign**: the cell after the exercise whitens three rewards and one changes sign.
#
# ### Exercise 2 — `whiten(x, mask, shift_mean)`

# %%
ex = load_exercise("ex04_rlhf_ppo")
feedback(ex04.check_whiten, ex.whiten);

# %%
from course_lib.ops.masking import masked_whiten

three_rewards = torch.tensor([[-0.1, 0.1, 10.0]])
for shift_mean in (True, False):
    whitened = masked_whiten(three_rewards, torch.ones(1, 3), shift_mean)[0]
    print(f"shift_mean={shift_mean!s:<5} (whitening the {'advantages' if shift_mean else 'rewards'}): "
          f"[-0.1, 0.1, 10.0] -> [{', '.join(f'{v:+.2f}' for v in whitened.tolist())}]")
print(f"mean before {three_rewards.mean():.2f}, after reward whitening "
      f"{masked_whiten(three_rewards, torch.ones(1, 3), shift_mean=False).mean():.2f}")

# %% [markdown]
# Reward whitening rescales around the mean: −0.1, a bad token, came out positive,
# because the scale is set by the outlier 10. And advantage whitening does not push "half
# the tokens" up: it centres the *weights* at 0, so here one token goes up and two go
# down; how many go each way depends on the skew of the batch.

# %% [markdown]
# ## 6. The clipped value loss
#
# The policy loss is lesson 03's clipped surrogate, applied to every token with its own
# advantage A_t: the ratio π/π_old is clipped to [1 − ε, 1 + ε] (`cliprange`, 0.2), which
# removes the incentive to move a token's probability further within one batch (it
# enforces no limit: lesson 03's demo ended with ratios outside the range). The critic
# regresses V(s_t) on the returns. PPO's RLHF implementations clip that update
# the same way they clip the policy: the new value may not move further than
# `cliprange_value` (0.2) from the value at rollout time without the loss taking the
# worse of the two errors:
#
# $$L_V = \tfrac12\,\operatorname{mean}_t\Big[\max\big((V_t - R_t)^2,\ (\operatorname{clip}(V_t, V^{\text{old}}_t - c, V^{\text{old}}_t + c) - R_t)^2\big)\Big]$$
#
# The total loss is `policy loss + vf_coef · L_V` (`vf_coef = 0.1`). `course_lib` logs
# `loss/value_avg` and `val/clipfrac_avg`, the fraction of tokens where the clipped error
# was the larger one.
#
# ### Exercise 3 — `value_loss(values, old_values, returns, mask, cliprange_value)`
#
# Your function is compared with `course_lib.algos.ppo.value_loss`, values and gradient.

# %%
ex = load_exercise("ex04_rlhf_ppo")
feedback(ex04.check_value_loss, ex.value_loss);

# %% [markdown]
# ## 7. The implementation details that matter
#
# A PPO paper is a page of maths; a PPO *implementation* that works on language models is
# a list of details. *The N Implementation Details of RLHF with PPO* (Huang, Liu and von
# Werra, 2023) reproduced OpenAI's original code and listed them; *The N+ Implementation
# Details of RLHF with PPO: A Case Study on TL;DR Summarization* (Huang et al. 2024)
# extended the list. A handful, with where they live in `course_lib`:
#
# | detail | what and why | here |
# |---|---|---|
# | reward at EOS only | the score of the whole text lands on its last token; the others get only the KL part | `algos.ppo.ppo_advantages` |
# | KL per token | −β·(log π − log π_ref) on every token keeps the policy near the reference | `beta` (alias `kl_coef`, 0.05) |
# | EOS handling / response truncation | text after EOS is masked out; completions without EOS get the penalty (TRL's example scripts: `--stop_token eos --missing_eos_penalty 1.0`) | `missing_eos_penalty` |
# | advantage whitening | mean 0, std 1 over the valid tokens of the batch | always on |
# | reward whitening | optional, keeps the mean | `whiten_rewards` |
# | value clipping | clipped value loss, `max` of the two errors | `cliprange_value` (0.2), `vf_coef` (0.1) |
# | value head initialised at 0 | no random values in the first advantages | `ValueHead.__init__` |
# | separate or shared value model | a separate critic network learns on its own but costs a whole model; a head on the policy shares its features | `course_lib` shares the body: `algos.ppo.ValueHead` |
# | PPO epochs and mini-batches | each rollout batch is reused for several passes | `num_ppo_epochs` (4), `num_mini_batches` (1) |
# | learning-rate annealing | the learning rate decays linearly to 0 over training | `lr_scheduler_type="linear"` |
# | sampling temperature | the same temperature in sampling and in the log-probs of the loss | `temperature` (0.7) |
# | no dropout | dropout would make π ≠ π_old even before any update | model in the same mode for both passes |
#
# One more from OpenAI's code that `course_lib` leaves out: an *adaptive* KL controller
# that adjusts β to hit a target KL; here β is constant.
#
# The defaults of `course_lib`'s PPO config, with their documentation:

# %%
import textwrap

from course_lib.algos import PPOConfig
from course_lib.config import field_docs

ppo_defaults = make_config("ppo")
docs = field_docs(PPOConfig)
for name in ("beta", "num_iterations", "num_mini_batches", "epsilon", "cliprange_value", "vf_coef", "gamma", "lam",
             "whiten_rewards", "missing_eos_penalty", "temperature", "lr_scheduler_type"):
    print(f"{name} = {getattr(ppo_defaults, name)!r}")
    print(textwrap.fill(" ".join(docs[name].split()), width=88, initial_indent="    ", subsequent_indent="    "))
print("aliases with the names of TRL's former PPOConfig:", {"kl_coef": ppo_defaults.kl_coef,
      "num_ppo_epochs": ppo_defaults.num_ppo_epochs, "cliprange": ppo_defaults.cliprange})

# %% [markdown]
# Those aliases are history. TRL's `PPOTrainer` and `PPOConfig` were moved out of the
# main package into `trl.experimental.ppo` in November 2025, the old import path
# (`from trl import PPOTrainer`) was removed in February 2026, and the trainer was
# deleted outright, value-head models included, in September 2026. In the TRL this course
# pins, both imports fail:

# %%
import importlib.metadata

print("TRL", importlib.metadata.version("trl"))
try:
    from trl import PPOTrainer  # noqa: F401
except ImportError as error:
    print("from trl import PPOTrainer ->", type(error).__name__)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # the experimental package warns on import
try:
    from trl.experimental.ppo import PPOTrainer  # noqa: F401, F811
except ImportError as error:
    print("from trl.experimental.ppo import PPOTrainer ->", type(error).__name__)

# %% [markdown]
# ## 8. PPO on the tiny model, with a live dashboard
#
# Now the whole loop. The policy is the tiny model, the prompts are two-digit additions,
# and instead of a learned reward model the score is the sum of two reward functions
# (lesson 09): 1 for a correct first number, and a proximity reward that gives partial
# credit to near misses. Each generation batch is used for 4 PPO epochs, so every fourth
# step is on-policy. The run is 200 steps; fast mode stops at 90 (the learning rate then
# anneals to 0 over those 90). On this seed 90 steps still move the accuracy beyond its
# noise; 80 do not (a lift of +1.0 point [−5.7, +7.7]).
#
# Before and after, the cell measures greedy accuracy on the same 200 held-out problems
# and prints each with its 95% interval, and the **lift** with a *paired* interval (the
# same problems before and after, so problem difficulty cancels). A lift is real when
# its interval excludes 0.
#
# In a notebook, `LiveDashboard` redraws the metrics every few steps while the trainer
# runs (it receives each logged row through the trainer's `on_step` callback); elsewhere
# it only collects the rows, and the cell after the run draws the same plot.

# %%
from course_lib.evaluation import format_accuracy, greedy_completions, is_correct, lift_interval
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer
from course_lib.widgets import LiveDashboard, plot_training_history

PPO_PANELS = ["objective/rlhf_reward", "objective/scores", "objective/kl", "objective/non_score_reward",
              "loss/value_avg", "val/value_mean", "val/return_mean", "val/ratio", "policy/approxkl_avg",
              "policy/clipfrac_avg", "val/clipfrac_avg", "val/num_eos_tokens", "learning_rate"]

model, tokenizer = load_policy("tiny")
train_prompts = get_task("arithmetic", n=256)
test_prompts = get_task("arithmetic", split="test", n=200, seed=0)
reward_funcs = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])


def held_out_correct(the_model) -> list[bool]:
    """Greedy answer to each held-out problem: right or wrong."""
    completions = greedy_completions(the_model, tokenizer, test_prompts["prompt"], max_new_tokens=8)
    return [is_correct(c, a) for c, a in zip(completions, test_prompts["answer"])]


correct_before = held_out_correct(model)

config = make_config(
    "ppo",
    output_dir=str(OUTPUT / "04_rlhf_ppo"),
    overwrite_output_dir=True,      # re-running the cell replaces the last run
    max_steps=scaled(90, 200),  # the learning rate anneals to 0 over whichever it is
    learning_rate=3e-5,
    lr_scheduler_type="linear",     # annealed to 0 over the run
    per_device_train_batch_size=16,  # 16 prompts, one completion each
    num_ppo_epochs=4,
    kl_coef=0.05,
    missing_eos_penalty=1.0,
    max_completion_length=8,
    save_steps=0,
    seed=0,
)
dashboard = LiveDashboard(keys=PPO_PANELS, every=scaled(30, 20), columns=4)  # 3 redraws in fast mode, 10 in full
trainer = Trainer(config, reward_funcs, train_prompts, model, tokenizer, progress=False, on_step=dashboard.update)
history = trainer.train()
correct_after = held_out_correct(trainer.model)
n_test = len(test_prompts)
lift, low, high = lift_interval(correct_before, correct_after)
print(f"{len(history)} optimizer steps; greedy accuracy on {n_test} held-out problems (95% intervals):")
print(f"  before {format_accuracy(sum(correct_before), n_test)}")
print(f"  after  {format_accuracy(sum(correct_after), n_test)}")
print(f"  lift   {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]")
clip_fractions = [row["policy/clipfrac_avg"] for row in history]
print(f"policy/clipfrac_avg: mean {sum(clip_fractions) / len(clip_fractions):.2%} over the run, "
      f"peak {max(clip_fractions):.1%}")

# %%
display(plot_training_history(history, keys=PPO_PANELS, columns=4, smooth=10, title="PPO on the tiny model"))

# %% [markdown]
# How to read it (lesson 08 reads the same metrics for RLOO in more detail). What a run of
# this cell showed in fast mode (90 steps, seed 0, on a CPU):
#
# - **Accuracy** rose from 35.5% [29.2, 42.3] to 43.5% [36.8, 50.4] on the 200 held-out
#   problems: a lift of +8.0 points [+1.7, +14.3], an interval that excludes 0 (the 200
#   steps of full mode gave the same lift).
# - `objective/rlhf_reward` and `objective/scores` (score minus the KL price, and the
#   score alone) are **noisy**: 16 completions a step, rewards between 0 and 2. Read the
#   smoothed trend, not single steps; it is the held-out accuracy that shows the gain.
# - `objective/kl` is a sum of per-token k1 estimates, log π − log π_ref on the sampled
#   tokens. Its expectation is the KL (≥ 0), but a single token's k1 is negative whenever
#   the policy now likes that token *less* than the reference did, and with 16 short
#   completions the batch sum can dip **below 0** when the true KL is small (full mode's
#   run read −0.05 at its last step; fast mode's 90 steps stay above 0). A negative reading
#   is noise, not a bug, and so is a single jump: in fast mode it leaps from 0.16 to 0.79
#   at step 49 and is back at 0.14 one batch later. Read the smoothed curve (the
#   dashboard smooths over 10 steps); a trend that keeps rising over many steps is what to
#   watch.
# - `val/ratio` is exactly 1 on the first epoch of each batch (on-policy) and stays near 1
#   on the others. `policy/clipfrac_avg` (mean and peak printed under the run) averages
#   under 1%, with rare steps near 9% (11% in full mode): the learning rate of 3e-5 moves
#   the policy gently, and a few tokens of a small batch move far enough to be clipped.
# - **The critic barely learns here.** `val/value_mean` (the critic's prediction, at
#   rollout time) crawls from 0 to about 0.07 in 90 steps (0.14 in full mode's 200) while
#   `val/return_mean`, the target it regresses on, sits around 1.2; `loss/value_avg` hardly
#   falls. The value head starts at zero and is trained by Adam at the policy's learning
#   rate, 3e-5: Adam normalises each parameter's step, so `vf_coef` cannot speed it up, and
#   a head that moves ~3e-5 per weight per update needs thousands of updates to cover a
#   distance of 1.2. Because the value never moves more than `cliprange_value` (0.2)
#   within one batch, `val/clipfrac_avg` stays at 0: the value clip never binds.
# - With V ≈ 0 the advantages are just the whitened returns: this run learned the way
#   REINFORCE with a batch baseline does (lesson 02), which is enough on a task this short.
# - The correctness reward carries about 85% of the spread of the summed reward
#   (`rewards/<name>/std` over the run), so the proximity reward's partial credit barely
#   moves the advantages. Partial credit is in the sum, but at weight 1 it is a small voice.
#   The run doctor of lesson 13, which reads the metrics as they come, has a rule for one
#   reward function drowning the others (`dominant_reward_function`) and stays silent here
#   on purpose: a 0/1 correctness reward with a shaping bonus beside it is the usual design.
#   Where partial credit should be heard, the rule's fix applies: a larger weight for
#   proximity, or normalising each reward within its group before the sum (lesson 09 §7).
# - `val/num_eos_tokens` is 16, the batch size, from the very first step: the tiny model
#   always finishes within 8 tokens, so the missing-EOS penalty never fires in this run. In
#   a run where this count falls (answers cut at the length limit), the penalty is what
#   pushes back. `learning_rate` falls linearly to 0: the annealing of section 7.
# - `policy/approxkl_avg` is ½·mean((log π − log π_old)²) over the tokens: how far the
#   policy has moved from the one that sampled the batch, within the PPO epochs. It is 0
#   on each first epoch and grows over the next three; if its smoothed curve keeps rising
#   over the run, each batch moves the policy further than the last (lower the learning rate).
#
# The next cell gives the critic its own learning rate (`value_learning_rate`, a
# `course_lib` option: TRL's former `PPOConfig` had none) and compares the two critics.

# %%
from dataclasses import replace

critic_config = replace(config, value_learning_rate=3e-3, output_dir=str(OUTPUT / "04_rlhf_ppo_critic"))
critic_model, _ = load_policy("tiny")
critic_trainer = Trainer(critic_config, reward_funcs, train_prompts, critic_model, tokenizer, progress=False)
critic_history = critic_trainer.train()
critic_correct = held_out_correct(critic_trainer.model)
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, rows, title in ((axes[0], history, "value head at the policy's rate (3e-5)"),
                        (axes[1], critic_history, "value_learning_rate = 3e-3")):
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["val/return_mean"] for r in rows], color="tab:green", alpha=0.8, label="return (target)")
    ax.plot(steps, [r["val/value_mean"] for r in rows], color="tab:gray", label="value V (prediction)")
    ax.set(xlabel="optimizer step", title=title)
    ax.title.set_fontsize(9)
axes[0].set_ylabel("mean over tokens")
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()
for name, rows in (("policy's rate", history), ("own rate 3e-3", critic_history)):
    early = rows[min(len(rows), 25) - 1]
    print(f"{name:<14} step {early['step']:>3}: value {early['val/value_mean']:.2f} vs return "
          f"{early['val/return_mean']:.2f}, value loss {early['loss/value_avg']:.3f}; "
          f"largest val/clipfrac {max(r['val/clipfrac_avg'] for r in rows):.2f}")
for name, correct in (("policy's rate", correct_after), ("own rate 3e-3", critic_correct)):
    lift, low, high = lift_interval(correct_before, correct)
    print(f"{name:<14} held-out accuracy {format_accuracy(sum(correct), n_test)}, "
          f"lift {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]")

# %% [markdown]
# With its own rate the critic reaches the returns within a few generation batches, its
# loss drops, and the value clip now binds on the first batch (`val/clipfrac_avg` well
# above 0 while V is far from the returns). A good critic is what lets GAE hand credit to
# the right tokens on long answers. On answers of at most 8 tokens with one score at the
# end there is little credit to assign: the last lines of the printout measure both runs
# (the same number of steps, otherwise the same) on the same held-out problems. The
# learned critic's lift has an interval that contains 0 (fast mode, 90 steps each: −3.0
# points [−9.4, +3.4]; full mode's 200 steps, same seed, on a CPU: +2.5 [−3.8, +8.8]), and
# it is no better than the lazy critic's +8.0. That is one seed each; the honest
# conclusion is that at this size the critic is not what limits learning.

# %% [markdown]
# ## 9. Inside the last batch
#
# The trainer keeps its last generation batch: the sampled tokens, the log-probs under
# the policy and the reference at sampling time, the values, the whitened advantages and
# the returns. Below, three of its completions token by token.

# %%
from course_lib.rewards import compute_rewards

batch = trainer.batch
rows = [0, 1, 2]
texts = tokenizer.batch_decode(batch.completion_ids[rows], skip_special_tokens=True)
sources = [train_prompts[batch.rows[i]] for i in rows]
_, scores = compute_rewards(reward_funcs, [s["prompt"] for s in sources], texts,
                            {"answer": [s["answer"] for s in sources]})
fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.2), sharey=True)
for ax, i, score, completion, source in zip(axes, rows, scores.tolist(), texts, sources):
    length = int(batch.completion_mask[i].sum())
    ids = batch.completion_ids[i, :length].tolist()
    if ids[-1] != tokenizer.eos_token_id:  # cut at the length limit: the EOS trick
        score -= config.missing_eos_penalty
    token_reward = -config.beta * (batch.old_logps[i, :length] - batch.ref_logps[i, :length])
    token_reward[-1] += score
    x = np.arange(length)
    ax.bar(x - 0.27, token_reward, width=0.27, label="reward r_t", color="tab:green")
    ax.bar(x, batch.old_values[i, :length], width=0.27, label="value V_t", color="tab:gray")
    ax.bar(x + 0.27, batch.advantages[i, :length], width=0.27, label="advantage (whitened)", color="tab:blue")
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.set_xticks(x, [tokenizer.decode([token]) for token in ids], fontsize=8)
    ax.set_title(f"{source['question']} -> {completion!r}\nscore {score:.2f}", fontsize=8)
axes[0].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 10. The "H": a reward model learned from preferences
#
# The reward model of section 2 is where the humans come in. People are bad at
# giving absolute scores ("is this answer a 6 or a 7?") and good at comparisons ("A is
# better than B"), so RLHF collects **preference pairs**: a prompt, two completions, and
# which one the labeller preferred. The **Bradley-Terry** model (Bradley and Terry 1952)
# explains such choices with a hidden score `s` per completion:
#
# $$P(\text{chosen} \succ \text{rejected}) = \sigma\big(s(\text{chosen}) - s(\text{rejected})\big).$$
#
# A reward model is a network that outputs `s`: a language model whose vocabulary head
# is replaced by a scalar head, read at the last token. It is trained by maximising the
# likelihood of the observed choices (InstructGPT, Ouyang et al. 2022, eq. 1; TRL's
# `RewardTrainer`):
#
# $$L = -\operatorname{mean}_{\text{pairs}} \log \sigma\big(s(\text{chosen}) - s(\text{rejected})\big).$$
#
# Only the *difference* of two scores enters, so a reward model's scores have an
# arbitrary offset. PPO's whitening (section 5) removes their scale from the size of the
# update, but with β > 0 the scale still matters: the per-token reward is
# `score − β·KL`, so doubling the scores halves the effective KL price. That is why
# implementations normalise a reward model's output before PPO.
# `course_lib.reward_model` has the whole piece: `bradley_terry_loss`, `RewardModel`
# (a copy of a policy's body plus a scalar head), `simulated_preferences` (a labeller
# that follows Bradley-Terry from a hidden true score), `train_reward_model`, and
# `reward_model_function`, which turns a trained model into a reward function with TRL's
# signature, ready for `Trainer`.
#
# ### Exercise 4 — `bradley_terry_loss(chosen_scores, rejected_scores)`

# %%
ex = load_exercise("ex04_rlhf_ppo")
feedback(ex04.check_bradley_terry_loss, ex.bradley_terry_loss);

# %% [markdown]
# A labeller is noisy. `simulated_preferences` labels a pair the way the Bradley-Terry
# model says a person with a hidden true score would: a clear difference is labelled
# right almost always, a small one is close to a coin flip. The cell measures it on
# 2,000 pairs per gap, against the formula.

# %%
import math

from course_lib.reward_model import simulated_preferences

print(f"{'true score gap':>15} {'labelled right':>15} {'sigmoid(gap / T)':>17}")
for gap in (0.05, 0.25, 1.0):
    labelled = simulated_preferences(["q"] * 2000, ["better"] * 2000, ["worse"] * 2000, [gap] * 2000, [0.0] * 2000,
                                     temperature=0.25, seed=0)
    share = sum(c == "better" for c in labelled.chosen) / len(labelled)
    print(f"{gap:>15} {share:>15.1%} {1 / (1 + math.exp(-gap / 0.25)):>17.1%}")

# %% [markdown]
# With the labeller's temperature `T = 0.25`, two answers whose true scores differ by
# 0.05 are ordered right only slightly more often than by chance: most of the information
# in preference data is about *large* differences. A reward model learns the ordering its
# labellers could see, and nothing tells it what they could not.
#
# ### A reward model for the additions, and PPO against it
#
# The whole pipeline on the tiny model. The labeller's hidden true score is the reward of
# section 8 (correct first number + proximity). The pairs are two answers of the tiny
# policy to each of 600 training questions, sampled at temperature 1.5 so that the
# labeller sees clean numbers and garbled ones. The reward model starts from a copy of
# the policy's body (as InstructGPT's started from the SFT model), gets a scalar head and
# is trained on 80% of the pairs; the other 20% measure it.

# %%
from course_lib.evaluation import wilson_interval
from course_lib.reward_model import RewardModel, reward_model_function, score_texts, train_reward_model
from course_lib.rollout import SamplingConfig, make_engine

rm_policy, rm_tokenizer = load_policy("tiny")
pair_questions = get_task("arithmetic", n=600, seed=1)
two_answers = make_engine("hf", rm_policy, rm_tokenizer).generate(
    list(pair_questions["prompt"]), n=2, sampling=SamplingConfig(max_tokens=8, temperature=1.5, seed=0))
_, true_scores = compute_rewards(reward_funcs, [p for p in pair_questions["prompt"] for _ in range(2)], two_answers.texts,
                                 {"answer": [a for a in pair_questions["answer"] for _ in range(2)]})
pairs = simulated_preferences(list(pair_questions["prompt"]), two_answers.texts[0::2], two_answers.texts[1::2],
                              true_scores[0::2].tolist(), true_scores[1::2].tolist(), temperature=0.25, seed=0)
rm_train, rm_test = pairs.split(0.2, seed=0)
print(f"{len(pairs)} pairs (identical answers dropped): {len(rm_train)} to train, {len(rm_test)} to test; e.g. "
      f"{rm_train.chosen[0]!r} preferred to {rm_train.rejected[0]!r}")
reward_net = RewardModel.from_causal_lm(rm_policy, seed=1)  # the scalar head is drawn from seed 1: re-runs agree
for row in train_reward_model(reward_net, rm_tokenizer, rm_train, epochs=2, learning_rate=3e-4, test_pairs=rm_test,
                              train_accuracy=False):  # only the held-out accuracy is printed
    right = round(row["test_accuracy"] * len(rm_test))
    low, high = wilson_interval(right, len(rm_test))
    print(f"epoch {row['epoch']}: loss {row['loss']:.3f}, held-out pairs ordered right {row['test_accuracy']:.1%} "
          f"[{100 * low:.1f}, {100 * high:.1f}]")
chosen_scores = score_texts(reward_net, rm_tokenizer, rm_test.prompts, rm_test.chosen)
rejected_scores = score_texts(reward_net, rm_tokenizer, rm_test.prompts, rm_test.rejected)
for kind, keep in (("both answers clean numbers", True), ("at least one garbled", False)):
    rows = [i for i in range(len(rm_test))
            if (rm_test.chosen[i].isdigit() and rm_test.rejected[i].isdigit()) == keep]
    right = int(sum(chosen_scores[i] > rejected_scores[i] for i in rows))
    low, high = wilson_interval(right, len(rows))
    print(f"  {kind:<27}: {right}/{len(rows)} ordered right, {right / len(rows):.1%} [{100 * low:.1f}, {100 * high:.1f}]")

# %% [markdown]
# The reward model is weak: overall it orders the held-out pairs right only slightly more
# often than a coin (our run: 56.2% [47.0, 65.1], an interval that does not exclude 50%).
# The split by kind of pair shows what it did learn: it orders pairs with a garbled answer
# well (70.5% [55.8, 81.8]), and pairs of two clean numbers, where the labeller was
# judging the sum, at chance. It has learned what is easy to see, not whether the sum is
# right. (The head is drawn from a fixed seed, so re-running the cell gives the same model;
# other seeds give other, similarly weak, reward models.)
#
# Now it becomes PPO's only reward (`reward_model_function` gives it TRL's reward-function
# signature), with no KL penalty (`kl_coef = beta = 0`), so that nothing holds the policy
# near its start, and a learning rate of 1e-4. A falling accuracy under a learned reward
# proves nothing by itself: the settings alone could be destroying the policy. So the
# cell trains **three** policies with the very same settings and seed, and changes only
# the reward:
#
# - the **learned** reward model;
# - a **random** reward, uniform noise in [0, 1) for every completion: a reward that knows
#   nothing, the control for "what do these settings do on their own?";
# - the **true** reward, the labeller's hidden score (section 8's correctness plus
#   proximity): what the reward model was meant to stand for.
#
# At each measurement the cell scores the greedy answers to the 200 held-out questions
# with the **learned** reward (mean with a 95% interval) and measures their **true**
# accuracy (95% Wilson interval).

# %%
import math

learned_reward = reward_model_function(reward_net, rm_tokenizer)
noise = torch.Generator().manual_seed(0)


def random_reward(completions, **kwargs):
    """The control: a score that knows nothing, uniform in [0, 1) per completion."""
    return torch.rand(len(completions), generator=noise).tolist()


eval_every, rlhf_steps = scaled(30, 50), scaled(30, 150)
rlhf_config = replace(config, max_steps=rlhf_steps, lr_scheduler_type="constant", learning_rate=1e-4, beta=0.0,
                      value_learning_rate=3e-3)


def measure(the_model, step: int) -> dict:
    answers = greedy_completions(the_model, tokenizer, test_prompts["prompt"], max_new_tokens=8)
    right = sum(is_correct(c, a) for c, a in zip(answers, test_prompts["answer"]))
    scores = torch.tensor(learned_reward(list(test_prompts["prompt"]), answers))
    return {"step": step, "accuracy": right / n_test, "accuracy_interval": wilson_interval(right, n_test),
            "reward": scores.mean().item(), "reward_half_width": 1.96 * scores.std().item() / math.sqrt(n_test),
            "answers": answers[:4]}


start = measure(load_policy("tiny")[0], 0)  # the three runs start from the same weights
curves = {}
for label, funcs in (("learned reward model", [learned_reward]), ("random reward (control)", [random_reward]),
                     ("true reward (control)", reward_funcs)):
    run_model, _ = load_policy("tiny")
    curve = curves[label] = [start]
    run_config = replace(rlhf_config, output_dir=str(OUTPUT / ("04_rlhf_" + label.split()[0])))
    Trainer(run_config, funcs, train_prompts, run_model, tokenizer, progress=False,
            on_step=lambda row: curve.append(measure(run_model, row["step"])) if row["step"] % eval_every == 0
            else None).train()

colours = {"learned reward model": "tab:purple", "random reward (control)": "tab:gray",
           "true reward (control)": "tab:green"}
fig, (ax_reward, ax_accuracy) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
for label, curve in curves.items():
    steps = [point["step"] for point in curve]
    ax_reward.errorbar(steps, [p["reward"] for p in curve], yerr=[p["reward_half_width"] for p in curve], marker="o",
                       capsize=3, color=colours[label], label=label)
    accuracy = [100 * p["accuracy"] for p in curve]
    ax_accuracy.errorbar(steps, accuracy, marker="o", capsize=3, color=colours[label], label=label,
                         yerr=[[a - 100 * p["accuracy_interval"][0] for a, p in zip(accuracy, curve)],
                               [100 * p["accuracy_interval"][1] - a for a, p in zip(accuracy, curve)]])
ax_reward.set(title="learned reward of the greedy answers", xlabel="PPO step", ylabel="mean score, 95% interval")
ax_accuracy.set(title="true accuracy (greedy, 200 held-out questions)", xlabel="PPO step",
                ylabel="% correct, 95% Wilson interval")
for ax in (ax_reward, ax_accuracy):
    ax.grid(alpha=0.3)
ax_accuracy.legend(fontsize=8)
fig.suptitle("PPO (lr 1e-4, beta = 0) against a learned reward, and two controls")
plt.show()
for label, curve in curves.items():
    print(label)
    for point in curve:
        low, high = point["accuracy_interval"]
        print(f"  step {point['step']:>3}: learned reward {point['reward']:.3f} ± {point['reward_half_width']:.3f}, "
              f"accuracy {100 * point['accuracy']:.1f}% [{100 * low:.1f}, {100 * high:.1f}], first answers "
              f"{point['answers']}")
print("references:", list(test_prompts["answer"][:4]))

# %% [markdown]
# Read the three runs together; in fast mode (30 steps) ours printed:
#
# - **The true reward** (green) does not improve the accuracy either: it slips from 35.5%
#   to 30.5% (overlapping intervals), where section 8's gentler settings lifted it. These
#   settings are too aggressive even for the right reward. The doctor (lesson 13 explains
#   it) says so at step 10 of the learned-reward run: `[doctor error] policy_moves_too_fast`.
#   Each batch's 4 PPO epochs at a learning rate of 1e-4 move the policy an approximate KL
#   of 0.098 away from the one that sampled it (`policy/approxkl_avg`, the rule's limit is
#   0.05), and about 10% of the tokens are clipped (`clip_ratio/region_mean`). The two
#   controls clip tokens at a similar rate on the later epochs of each batch and stayed
#   under the rule's limits. The doctor's fixes are a lower learning rate, fewer epochs, or
#   β > 0.
# - **The random reward** (gray) collapses the accuracy on its own, to 13.0% at step 30,
#   while the learned reward of its answers stays within its noise (0.90 ± 0.13 → 1.01 ±
#   0.13). With β = 0 nothing anchors the policy, and whitening (section 5) turns any
#   reward, even noise, into unit-size advantages: PPO then pushes the policy around at full
#   strength in random directions. **Most of the collapse is the settings, not the reward
#   model.**
# - **The learned reward** (purple) does what the controls cannot explain: its score rises
#   well beyond its interval (0.90 ± 0.13 → 1.23 ± 0.10), and at step 30 its accuracy
#   (6.0% [3.5, 10.2]) is below the random run's (13.0% [9.0, 18.4]), intervals apart. PPO
#   climbed the proxy, toward answers the reward model rates higher (look at the first
#   answers: clean numbers, drifting away from the sums), and that direction is worse than
#   a random one. Run on to step 60 (`rlhf_steps = 60`; the learning rate is constant, so
#   the first 30 steps are the same), both runs sit near the floor (3.0% and 6.5%,
#   overlapping intervals).
#
# That gap between the learned-reward curve and the random-reward curve, not the fall of
# the accuracy by itself, is the evidence of **reward over-optimisation** (Gao, Schulman
# and Hilton 2022, *Scaling Laws for Reward Model Overoptimization*): optimising a learned
# proxy harder makes the true objective worse. Here the evidence is thin, and honest about
# it. The reward model is weak (its held-out interval does not exclude a coin), and the
# result depends on it: with the head drawn from seed 0 instead of 1, the same cell gave
# 21.5% for the learned reward and 13.0% for the random one at step 30, the learned reward
# no longer the worse of the two, and its score not rising beyond its interval (0.57 ±
# 0.06 → 0.59 ± 0.05). Gao et al. measured the effect cleanly with reward models of up to
# 3B parameters: the true score rising first, then falling, as the policy moves away from
# its start. The habit to keep:
# **before blaming a reward, run a control with the same settings and a reward that knows
# nothing.** The guards are the ones this lesson built: the KL penalty to the reference
# (β, section 3) and a gentler learning rate (section 8's run, β = 0.05 and 3e-5, lifted
# the accuracy with the true reward), early stopping on a held-out true measure, a larger
# and fresher preference set, and, where answers can be checked, a verifier instead of a
# learned reward (RLVR, lesson 05).

# %% [markdown]
# ## Questions
#
# 1. The score is placed on the last token and every other token only pays the KL price.
#    With γ = 1 and λ = 0.95, how does the first token of a correct answer still get
#    credit for it? What changes if λ = 0?
# 2. Why is the KL penalty put *in the reward* (per token) rather than in the loss, as
#    GRPO does with β? What does each choice let the value model see?
# 3. A run shows `val/num_eos_tokens` falling toward 0 while `objective/scores` rises.
#    What is the model probably doing, and which setting addresses it?
# 4. Advantage whitening makes the update size independent of the reward scale. Which
#    information does it throw away, and when could that hurt?
# 5. Four models sit in memory for PPO RLHF. Which of them could you drop, share or
#    replace for a task whose answers can be checked by a program, and what would each
#    change cost you?
# 6. The reward model of section 10 orders barely more than half of the held-out pairs
#    right, yet PPO raised its score far beyond its noise while the accuracy fell. How can
#    both happen at once? Why is the accuracy drop alone no evidence of over-optimisation,
#    and what would you change first to make the learned reward safer to optimise?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("04", k)`
# prints the answer to question k (`show_answer("04")` prints them all). They are also in
# `notebooks/answers/04_rlhf_ppo.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("04", 1)
