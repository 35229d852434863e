# %% [markdown]
# # Lesson 05 — GRPO: Group Relative Policy Optimization
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/05_grpo.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 28 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# PPO (lessons 03–04) needs a value model to know what reward to *expect* from a prompt.
# GRPO, introduced by DeepSeek (DeepSeekMath, then DeepSeek-R1), gets that expectation for
# free: sample several answers to the same prompt and compare them with each other.
#
# In this lesson you will:
# 1. see which models PPO keeps in memory and which ones GRPO (with verifiable rewards) drops;
# 2. compute **group-relative advantages**: the z-score of each reward inside its group;
# 3. understand why a group needs at least two completions, why four to sixteen are
#    recommended, and why a group whose rewards are all equal teaches nothing;
# 4. write the GRPO clipped loss;
# 5. run the GRPO recipe, first as you would write it with TRL, then with `course_lib` on
#    the tiny model, and read the metrics that tell you whether it is working.

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
# ## 1. From PPO to GRPO: fewer models
#
# RLHF with PPO trains a language model (the *policy*) against a score. In its classic
# form it keeps **four** networks around:
#
# | model | role | trained? |
# |---|---|---|
# | policy | the model we improve; it generates the completions | yes |
# | reference | a frozen copy of the starting policy; the KL penalty (β) keeps the policy near it | no |
# | value model | predicts the reward to expect from a state: PPO's baseline | yes |
# | reward model | scores completions (learned from human preferences) | no |
#
# GRPO changes two rows:
#
# - **The value model is gone.** Its job was to say "how good is this prompt, on
#   average?", so that an answer can be judged *better or worse than expected*. GRPO
#   estimates that average directly: it samples a **group** of G completions for the same
#   prompt, scores them all, and uses the group's mean (and spread) as the baseline.
# - **With RLVR, the reward model is gone too.** Reinforcement Learning with Verifiable
#   Rewards replaces the learned reward model by a function that checks the answer: a
#   maths result can be compared with the reference (2 + 2 = 4), code can be run against
#   tests. (Lesson 09 designs such functions.)
#
# What is left is the policy, plus the reference only when β > 0. The networks that go
# away are as large as the policy (the value model is usually a copy of it with a scalar
# head), so the saving is large. A rough count of the bytes per policy parameter, with
# mixed-precision AdamW as in lessons 03 and 04 (trained model: 2 bytes of bf16 weights
# + 2 of bf16 gradients + 4 of fp32 master weights + 8 of fp32 Adam moments = 16; frozen
# model: 2 bytes of bf16 weights):

# %%
TRAINED, FROZEN = 2 + 2 + 4 + 8, 2  # bytes per parameter, a rule of thumb (no activations, no KV cache)
setups = {
    "PPO (policy, value, reference, reward model)": 2 * TRAINED + 2 * FROZEN,
    "GRPO + reward model, beta > 0": TRAINED + 2 * FROZEN,
    "GRPO + verifiable reward, beta > 0": TRAINED + FROZEN,
    "GRPO + verifiable reward, beta = 0": TRAINED,
}
billions = 1.5
for name, per_parameter in setups.items():
    print(f"{name:<46} {per_parameter:>3} bytes/param -> {per_parameter * billions:5.1f} GB for a {billions}B policy")

# %% [markdown]
# Activations and the generated sequences come on top (lesson 10 counts them), but the
# ranking holds: GRPO with a verifiable reward and β = 0 holds a single model.

# %% [markdown]
# ## 2. Group-relative advantages
#
# Take the question "What is 2 + 2?" and sample it **four** times. A half-trained model
# might answer `4`, `3`, `D` and `C`. Score each answer with two small reward functions
# (the classic pair of lesson 09): +1 if the answer contains a number, −1 if not; +3 if it
# is correct, −3 if not. The totals are 4, −2, −4 and −4.
#
# Those four numbers alone do not say whether 4 is *good*: that depends on what the model
# usually gets on this prompt. GRPO takes the group's own statistics as the yardstick and
# z-scores each reward:
#
# $$A_i = \frac{r_i - \operatorname{mean}(r_1, \dots, r_G)}{\operatorname{std}(r_1, \dots, r_G) + 10^{-4}}$$
#
# The standard deviation is the *sample* one (divided by G − 1, as TRL computes it), and
# the small 1e-4 keeps a group with identical rewards at 0 instead of 0 / 0. Every
# completion's tokens share its advantage: a positive one pushes all of them up, a
# negative one pushes them down.

# %%
import torch

from course_lib.algos.grpo import group_advantages
from course_lib.rewards import compute_rewards, make_correctness_reward, number_reward

prompt = [{"role": "user", "content": "What is 2 + 2?"}]
answers = ["4", "3", "D", "C"]
correctness = make_correctness_reward("first_number", correct=3.0, incorrect=-3.0)
per_function, rewards = compute_rewards([number_reward, correctness], [prompt] * 4, answers,
                                        columns={"answer": ["4"] * 4})
advantages = group_advantages(rewards, num_generations=4)
print("per function:", per_function.tolist())
print("rewards     :", rewards.tolist())
print(f"group mean {rewards.mean():.3f}, sample std {rewards.std():.3f}")
print("advantages  :", [round(a, 3) for a in advantages.tolist()])

# %% [markdown]
# The correct answer gets a large positive advantage; `3` is only slightly below the mean
# (a number, at least); the two letters are pushed down hardest. The advantages of a
# group sum to zero: GRPO only ever says "more of this one, less of those".
#
# In a batch, rewards come **prompt-major**: the G completions of a prompt are contiguous,
# so `rewards.view(-1, G)` has one prompt per row. The plot below shows three prompts with
# four completions each. The second group has all rewards equal: its spread is zero, so
# every advantage is 0 and the group contributes **no learning signal** at all (TRL logs
# the fraction of such groups as `frac_reward_zero_std`).

# %%
import matplotlib.pyplot as plt
from IPython.display import display

from course_lib.widgets.advantage import advantage_explorer, plot_advantages

display(plot_advantages([1, 0, 0, 1, 1, 1, 1, 1, 0.5, 0, 0, 0], num_generations=4))

# %% [markdown]
# Read the third group too: its lone 0.5, a half-right answer, gets the largest advantage
# of the plot (+1.50), more than the full marks of the first group (+0.87 each, shared by
# two). The z-score says how much better than its own group a completion did, not how
# good it is: a partial success among failures is pushed up harder than a full success
# among equals.
#
# Try it yourself: type rewards, change G, compare the scalings (lesson 06 explains the
# `batch` and `none` options). The explorer needs ipywidgets; without it the cell only
# prints a note.

# %%
try:
    import ipywidgets  # noqa: F401

    display(advantage_explorer())
except ImportError:
    print("ipywidgets is not installed: the explorer is skipped (pip install ipywidgets).")

# %% [markdown]
# ## 3. How many completions per prompt?
#
# `num_generations` (G) is the group size. Two facts bound it from below:
#
# - **G = 1 teaches nothing.** A reward minus the mean of a group of one is always 0, and
#   the spread of one value is undefined. TRL and `course_lib` therefore require
#   `num_generations >= 2`.
# - **G = 2 is the bare minimum.** With two completions the z-scores are always ±0.707,
#   whatever the two rewards are: the group only says *which* answer was better, not by
#   how much. Some guides say G "must be > 2" for GRPO to work: read it as practical
#   advice, not as a rule of the maths.

# %%
from course_lib.algos import GRPOConfig

print("G=2, rewards (0, 1)  :", group_advantages(torch.tensor([0.0, 1.0]), 2).tolist())
print("G=2, rewards (0, 100):", group_advantages(torch.tensor([0.0, 100.0]), 2).tolist())
print("G=1                  :", group_advantages(torch.tensor([0.7, 0.2]), 1).tolist())
try:
    GRPOConfig(num_generations=1, per_device_train_batch_size=4)
except ValueError as error:
    print("GRPOConfig(num_generations=1) ->", error)

# %% [markdown]
# Small groups also run into **zero-spread groups**. With a reward of 1 for a correct
# answer and 0 otherwise, and a model that is right with probability p, a group of G
# answers is all-equal with probability $p^G + (1-p)^G$. With G = 2 that is at least one
# half: half the sampling is wasted even in the best case. The plot computes the same
# fraction by simulation with `group_advantages` (its `is_std_zero` statistic is what TRL
# averages into `frac_reward_zero_std`) and compares it with the formula.

# %%
from course_lib.machine import scaled

generator = torch.Generator().manual_seed(0)
group_sizes = [2, 3, 4, 6, 8, 12, 16]
num_prompts = scaled(400, 4000)
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for p, color in zip((0.05, 0.2, 0.5, 0.9), ("tab:red", "tab:orange", "tab:green", "tab:blue")):
    simulated = []
    for G in group_sizes:
        correct = (torch.rand(num_prompts * G, generator=generator) < p).float()
        _, stats = group_advantages(correct, G, return_stats=True)
        simulated.append(stats.is_std_zero.float().mean().item())
    ax.plot(group_sizes, [p ** G + (1 - p) ** G for G in group_sizes], color=color, label=f"p = {p}")
    ax.plot(group_sizes, simulated, "o", color=color, markersize=4)
ax.axvspan(4, 16, color="0.92", zorder=0, label="recommended G (4-16)")
ax.set(xlabel="num_generations G", ylabel="fraction of groups with no signal",
       title="Zero-std groups: formula (lines) vs simulation (dots)", xticks=group_sizes)
ax.legend(fontsize=8)
plt.show()
for p in (0.05, 0.5):
    print(f"p = {p}: silent fraction p^G + (1-p)^G = " + ", ".join(f"{p ** G + (1 - p) ** G:.2f} at G = {G}"
                                                                  for G in (4, 8, 16)))

# %% [markdown]
# Hence the usual advice:
#
# - **2–3** completions give too little diversity for meaningful comparisons;
# - **4–16** is the recommended range, a balance between diversity and compute;
#   **4–8** is often enough for simple tasks, **8–16** helps complex reasoning tasks;
# - more completions can improve learning but cost proportionally more generation
#   (each prompt's G answers are all generated and scored). A common default is 8,
#   raised to 16 when too many groups come back all-wrong.
#
# A hard prompt (p = 0.05) is still silent 44% of the time with G = 16 (the printout), and
# 81% of the time with G = 4: a larger group helps, slowly and at a price in generation,
# and no group size rescues a model that (almost) never finds the answer. RL sharpens what
# the model does *sometimes* (lesson 01).
#
# Diversity inside a group also comes from sampling. Keep the sampling `temperature`
# relatively high — 1.0 is the default — so that the G completions of a prompt differ: at
# low temperature they tend to be copies of each other, their rewards are equal, and the
# group is silent again.

# %% [markdown]
# ### The sampling parameters
#
# The generation side of a GRPO config has five knobs (TRL's names and defaults):
#
# | parameter | default | what it does |
# |---|---|---|
# | `temperature` | 1.0 | divides the logits before sampling; higher = more random, more diverse groups |
# | `top_p` | 1.0 | nucleus sampling: keep the smallest set of tokens holding this much probability; must lie in (0, 1], 1.0 keeps all |
# | `top_k` | 0 | keep only the k most likely tokens; 0 disables the filter |
# | `min_p` | None | drop tokens whose probability is below `min_p` x the top token's; typical values 0.01–0.2 |
# | `repetition_penalty` | 1.0 | > 1 discourages tokens already in the prompt or completion, < 1 encourages repeats |
#
# Every filter removes diversity, and diversity is what gives a group a learning signal.
# The cell below samples 8 answers to each of 32 prompts from the tiny model under
# several settings and counts how many distinct answers a group holds, how many groups
# would be silent (all rewards equal), and the accuracy of the samples. Its last column
# measures something else: how far the **sampler's** log-prob of each sampled token is
# from the **trainer's** (a forward pass at the same temperature, with no filter, which is
# what the loss computes).

# %%
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import compute_rewards, get_reward_functions
from course_lib.rollout import SamplingConfig, make_engine

sampling_model, sampling_tokenizer = load_policy("tiny")
sampling_task = get_task("arithmetic", split="test", n=32, seed=2)
engine = make_engine("hf", sampling_model, sampling_tokenizer)
correct = get_reward_functions(["correctness_first_number_reward"])
settings = {
    "temperature=1.0": SamplingConfig(temperature=1.0),
    "temperature=0.3": SamplingConfig(temperature=0.3),
    "top_k=2": SamplingConfig(top_k=2),
    "top_p=0.5": SamplingConfig(top_p=0.5),
    "min_p=0.2": SamplingConfig(min_p=0.2),
    "repetition_penalty=1.5": SamplingConfig(repetition_penalty=1.5),
}
from course_lib.ops.masking import masked_mean
from course_lib.policy import completion_forward

print(f"{'setting':<24} {'distinct answers / 8':>22} {'silent groups':>14} {'accuracy':>9} "
      f"{'sampler - trainer log-prob':>27}")
for label, sampling in settings.items():
    sampling.max_tokens, sampling.seed = 6, 0
    batch = engine.generate(list(sampling_task["prompt"]), n=8, sampling=sampling)
    groups = [batch.texts[i:i + 8] for i in range(0, len(batch.texts), 8)]
    answers = [a for a in sampling_task["answer"] for _ in range(8)]
    _, rewards = compute_rewards(correct, [None] * len(answers), batch.texts, {"answer": answers})
    grouped = rewards.view(-1, 8)
    silent = (grouped.max(1).values == grouped.min(1).values).float().mean().item()
    distinct = sum(len(set(g)) for g in groups) / len(groups)
    with torch.no_grad():
        trainer_logps, _, _ = completion_forward(sampling_model, batch.prompt_ids, batch.prompt_mask,
                                                 batch.completion_ids, batch.completion_mask,
                                                 temperature=sampling.temperature)  # (B, T)
    gap = round(masked_mean(batch.sampling_logps - trainer_logps, batch.completion_mask).item(), 3) + 0.0  # no -0
    print(f"{label:<24} {distinct:>22.1f} {silent:>14.0%} {rewards.mean().item():>9.1%} {gap:>+27.3f}")

# %% [markdown]
# Read the table row by row against the first, plain sampling at temperature 1.0:
#
# - `temperature=0.3`, `top_k=2` and `top_p=0.5` roughly halve the number of distinct
#   answers per group and raise the accuracy of the samples: they drop the unlikely
#   tokens, mostly wrong digits for this model. They also leave *more* groups silent:
#   with fewer distinct answers, more groups are all right or all wrong. `min_p=0.2`
#   removes less and changes less;
# - `repetition_penalty=1.5` is not a filter (no token is removed; the logits of tokens
#   already in the prompt or completion are rescaled). It keeps the groups diverse but
#   lowers the accuracy, and more groups come back all wrong;
# - the last column. At temperature 1.0 or 0.3 it is 0: the trainer computes its
#   log-probs at the sampling temperature, so it scores the distribution that was sampled.
#   With a filter the sampler drew from a **renormalised, truncated** distribution, so each
#   token was more likely under the sampler than under the trainer's full softmax (a
#   positive gap: minus the log of the probability mass the filter kept, averaged over
#   tokens); the repetition penalty shifts it too. **Filtered sampling is itself a
#   sampler/trainer mismatch**: the loss treats the samples as drawn from `pi_theta` when
#   they came from a modified copy of it, the same kind of gap lesson 10 measures between
#   vLLM and the trainer and corrects with importance sampling.

# %% [markdown]
# ## Exercise 1 — group advantages
#
# Open `exercises/ex05_grpo.py` and implement `group_advantages(rewards, num_generations)`:
# the z-score within each prompt's group, with the sample std and the + 1e-4. Then run the
# next cell.

# %%
from course_lib.checks import ex05
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex05_grpo")
feedback(ex05.check_group_advantages, ex.group_advantages);

# %% [markdown]
# ## 4. The GRPO loss
#
# GRPO keeps PPO's clipped surrogate (lesson 03). For completion i and its token t, with
# the probability ratio between the current policy and the one that sampled the batch,
#
# $$r_{i,t} = \frac{\pi_\theta(o_{i,t} \mid q, o_{i,<t})}{\pi_{\text{old}}(o_{i,t} \mid q, o_{i,<t})}
#   = \exp(\log\pi_\theta - \log\pi_{\text{old}}),$$
#
# the per-token loss is $-\min(r_{i,t} A_i,\ \operatorname{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon) A_i)$,
# plus $\beta \cdot \mathrm{KL}_{i,t}$ when β > 0 (the k3 estimator of lesson 03 against the
# reference model; as lesson 03 showed, its gradient as a loss term is that of the
# forward KL(π_ref ‖ π_θ), which matches the reverse KL(π_θ ‖ π_ref) the objective states
# only near the reference). The original GRPO averages the tokens of each completion, then the
# completions: $\frac{1}{G}\sum_i \frac{1}{|o_i|}\sum_t \ell_{i,t}$. TRL calls that
# `loss_type="grpo"`; lesson 06 shows why newer defaults aggregate differently.
#
# The per-token formula is `clipped_surrogate(ratio, advantages, epsilon)` near the top of
# `course_lib/algos/grpo.py`, right after `group_advantages`; `policy_loss`, used below,
# computes the ratio, calls it and averages the result by the loss type's rule.
#
# Two details matter in code:
#
# - the old log-probs are **constants**: they come from a forward pass without gradient,
#   and the gradient flows only through the current log-probs;
# - when a generation batch is used up inside **one optimizer step**, the policy has not
#   moved yet, so the old log-probs *equal* the current ones: the ratio is exactly 1 and
#   the clip never binds. A generation batch feeds `steps_per_generation x num_iterations`
#   micro-batches, so this holds when `gradient_accumulation_steps` is a multiple of that
#   product. TRL's defaults (`num_iterations=1`, `steps_per_generation =
#   gradient_accumulation_steps`) satisfy it; `num_iterations=2` with
#   `steps_per_generation = gradient_accumulation_steps`, for instance, does not, and the
#   ratio moves away from 1. The loss still has a gradient on-policy, the policy gradient
#   $-A_i \nabla \log \pi_\theta$ (because $\nabla r = r \nabla \log \pi$). TRL 1.16 then
#   skips the extra forward pass and uses `logps.detach()` as the old log-probs; it runs
#   that pass whenever the condition fails, and always when it generates with vLLM and
#   corrects for the vLLM/training mismatch (lesson 10).

# %%
from course_lib.algos.grpo import policy_loss

logps = torch.log(torch.tensor([[0.5, 0.4, 0.9], [0.2, 0.6, 0.1]])).requires_grad_(True)
mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the second completion has 2 tokens
advantages = torch.tensor([1.0, -1.0])
out = policy_loss(logps, None, advantages, mask, loss_type="grpo")  # None = on-policy
out.loss.backward()
print("loss:", round(out.loss.item(), 4), "(on-policy the ratio is 1, so the loss is -mean(A) = 0)")
print("d loss / d logps:\n", logps.grad)

# %% [markdown]
# The first completion (A = +1, 3 tokens) gets −1/(2·3) on each token: a gradient-descent
# step *raises* those log-probs. The second (A = −1, 2 tokens) gets +1/(2·2): its tokens
# are pushed down, and the padded third position gets nothing.
#
# ## Exercise 2 — the GRPO clipped loss
#
# Implement `grpo_clipped_loss(logps, old_logps, advantages, mask, epsilon)` in the same
# file: the token-level clipped surrogate, averaged per sequence, then over the batch.
# Mind the two details above.

# %%
ex = load_exercise("ex05_grpo")
feedback(ex05.check_grpo_clipped_loss, ex.grpo_clipped_loss);

# %% [markdown]
# ## 5. The GRPO recipe in TRL
#
# Implementing GRPO with TRL takes four steps:
#
# 1. a **dataset of prompts** (a `prompt` column, plain text or chat messages; any other
#    column is passed to the reward functions by name);
# 2. a **reward function** that takes the list of completions and returns one number per
#    completion: `f(completions, **kwargs) -> list[float]`;
# 3. a **`GRPOConfig`** with the training settings;
# 4. a **`GRPOTrainer`** that ties them together, then `trainer.train()`.
#
# ```python
# from datasets import load_dataset
# from trl import GRPOConfig, GRPOTrainer
#
# dataset = load_dataset("your-prompt-dataset", split="train")
#
# def reward_short(completions, **kwargs):
#     """Toy reward: prefer completions close to 20 characters."""
#     return [-abs(20 - len(completion)) for completion in completions]
#
# training_args = GRPOConfig(
#     output_dir="grpo-output",
#     num_train_epochs=3,
#     num_generations=4,               # group size G: completions sampled per prompt
#     per_device_train_batch_size=4,   # completions per device per micro-step
#     gradient_accumulation_steps=2,   # micro-steps per optimizer step
#     learning_rate=1e-5,
#     logging_steps=10,
#     use_vllm=True,                   # generate with vLLM: much faster rollouts
# )
# trainer = GRPOTrainer(model="Qwen/Qwen2-0.5B-Instruct", args=training_args,
#                       train_dataset=dataset, reward_funcs=reward_short)
# trainer.train()
# ```
#
# Notes on these settings:
#
# - The argument is `num_generations` (plural); a frequently copied snippet spells it
#   `num_generation`, which TRL rejects as an unknown argument.
# - With `per_device_train_batch_size=4`, `gradient_accumulation_steps=2` and
#   `num_generations=4`, one generation batch holds 4 × 2 = 8 completions, that is 2
#   prompts with 4 answers each (lesson 07 works through this arithmetic). TRL requires
#   the generation batch to be divisible by `num_generations`.
# - **Memory**: lower `per_device_train_batch_size` and raise `gradient_accumulation_steps`
#   to keep the same effective batch on a smaller GPU.
# - **Speed**: `use_vllm=True` generates with vLLM when the model is supported (lesson 10).
# - **Monitoring**: watch `reward` (the mean reward of the completions), `reward_std` (the
#   spread over the whole batch), `frac_reward_zero_std` (the share of groups whose rewards
#   are all equal, which teach nothing), `entropy`, `grad_norm` and `kl` (the divergence
#   from the reference model, logged when β > 0). `course_lib` also logs
#   `reward_std_in_groups`, the spread *within* groups that the advantages are made of;
#   TRL 1.16 does not log it.
#
# ## 6. The same recipe with `course_lib`
#
# `course_lib.trainer.Trainer` takes the same four ingredients, with TRL's names and
# defaults. Here the policy is the tiny model, the prompts are two-digit additions, and
# the reward function is a verifier with TRL's signature. Fast mode runs 8 steps; the
# full size runs 200 (about 30 s of CPU time for the training).

# %%
import os
from pathlib import Path

from course_lib.data import get_task
from course_lib.evaluation import format_accuracy, greedy_completions, is_correct, lift_interval, wilson_interval
from course_lib.models import load_policy
from course_lib.rewards import completion_text, extract_first_number, same_answer
from course_lib.trainer import Trainer

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))


def first_number_is_correct(completions, answer, **kwargs):
    """1.0 when the first number of the completion equals the reference answer."""
    return [1.0 if same_answer(extract_first_number(completion_text(c)), a) else 0.0
            for c, a in zip(completions, answer)]


model, tokenizer = load_policy("tiny")
train_prompts = get_task("arithmetic", split="train", n=scaled(64, 2000), seed=0)
test_prompts = get_task("arithmetic", split="test", n=scaled(48, 200), seed=0)
print(train_prompts[0])


def held_out_correct(the_model) -> list[bool]:
    """Greedy answer to each held-out problem: right or wrong (the same problems before and after)."""
    completions = greedy_completions(the_model, tokenizer, test_prompts["prompt"], max_new_tokens=6)
    return [is_correct(c, a) for c, a in zip(completions, test_prompts["answer"])]


correct_before = held_out_correct(model)

config = GRPOConfig(
    output_dir=str(OUTPUT / "05_grpo"),
    overwrite_output_dir=True,       # re-running the cell replaces the last run (else refused)
    loss_type="dapo",                # TRL 1.16's default, written out: not the "grpo" of Exercise 2 (below)
    num_generations=8,
    per_device_train_batch_size=32,  # 4 prompts x 8 completions per micro-step
    gradient_accumulation_steps=1,
    learning_rate=3e-5,              # TRL's default 1e-6 is meant for billion-parameter models
    lr_scheduler_type="constant",
    beta=0.04,                       # a small KL penalty, so that `kl` is logged
    max_completion_length=6,         # two digits and the end-of-turn token fit
    temperature=1.0,
    max_steps=scaled(8, 200),
    logging_steps=1,
    save_steps=0,
    seed=0,
)
trainer = Trainer(config, [first_number_is_correct], train_prompts, model, tokenizer, progress=False)
history = trainer.train()
correct_after = held_out_correct(model)
lift, low, high = lift_interval(correct_before, correct_after)
print(f"greedy accuracy on {len(test_prompts)} held-out problems after {config.max_steps} steps (95% intervals):")
print(f"  before {format_accuracy(sum(correct_before), len(test_prompts))}")
print(f"  after  {format_accuracy(sum(correct_after), len(test_prompts))}")
print(f"  lift   {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}] (paired: the same problems)")
(low_before, high_before), (low_after, high_after) = (wilson_interval(sum(c), len(c))
                                                      for c in (correct_before, correct_after))
overlap = low_after <= high_before and low_before <= high_after
print(f"  the two Wilson intervals {'overlap' if overlap else 'do not overlap'}; "
      f"the paired interval {'excludes 0' if low > 0 or high < 0 else 'contains 0'}")
for row in history[-3:]:
    print({key: round(row[key], 3) for key in ("step", "reward", "reward_std", "frac_reward_zero_std", "kl")})

# %% [markdown]
# The same 48 (or 200) problems are answered before and after, so the lift is judged
# with a **paired** interval, as in lesson 04: two separate Wilson intervals (printed
# beside each accuracy) count the problem-to-problem difficulty twice and overlap even
# when the lift is real. The line under the lift compares the two readings. In fast mode
# (8 steps, 48 held-out problems) our run printed exactly that case: the two intervals overlap, while the paired interval of the lift excludes 0 (29.2%
# → 43.8%, +14.6 points [+4.5, +24.7]); if yours reads otherwise, trust the paired line.
# Eight steps on 48 problems is still one seed and little data; real runs
# take hundreds of steps. The settings above are the ones the course's own learning
# test uses: four prompts a step and a small learning rate, for 200 steps. The tiny model
# has just learned to carry digits, and large, noisy updates (a learning rate ten times
# higher, two prompts a step) knock it back instead of improving it. One full-size run of
# this cell (200 steps, about 30 s of CPU time) took greedy accuracy on 200 held-out problems from
# 35.5% [29.2, 42.3] to 47.5% [40.7, 54.4], a paired lift of +12.0 points [+6.3, +17.7].
#
# About `loss_type`: the run trains with `loss_type="dapo"`, TRL 1.16's default, written
# out in the config so that it does not pass unnoticed right after Exercise 2's "grpo".
# Both use the same clipped per-token surrogate; they differ only in how the tokens are
# averaged (per sequence, then over sequences, for "grpo"; over all tokens of the
# generation batch for "dapo"), which changes how much each token of a long or short
# completion weighs. Lesson 06 measures that difference.
#
# The curves below are what to read during a run (section 8 says what each should do):
# the reward, its spread, the share of silent groups, the policy's entropy, the gradient
# norm before clipping, and the KL to the reference.

# %%
from course_lib.widgets import plot_training_history

display(plot_training_history(history, keys=["reward", "reward_std_in_groups", "frac_reward_zero_std", "entropy",
                                             "grad_norm", "kl"]))

# %% [markdown]
# ## 7. GRPO in forty lines: the loop you write
#
# `Trainer` hides the loop. Here you write it, on the same tiny model: generate a group
# per prompt, score it, turn rewards into group advantages (Exercise 1), compute per-token
# log-probs (Exercise 3 below shows what that step does inside), take the clipped loss
# (Exercise 2) and an optimizer step (Exercise 4). It runs with `beta = 0` and
# `loss_type="grpo"`, first on-policy (one optimizer step per generation batch), then with
# two optimizer steps on each batch, where the clip starts to act. The sampling is handed
# to you ready-made (`sample_batch(k)`, with `Trainer`'s prompts and seeds), so that the
# loop can be checked against `Trainer` run with the same settings.
#
# ### Exercise 3 — per-token log-probs and entropy
#
# First the step that every policy-gradient loss stands on. Implement
# `completion_logps_and_entropy(logits, input_ids, prompt_length, completion_mask, temperature)`
# in `exercises/ex05_grpo.py`: shift by one (the logits at position i predict token
# i + 1), divide by the sampling temperature, log-softmax, gather the sampled tokens,
# compute each position's entropy, and zero the padding.

# %%
ex = load_exercise("ex05_grpo")
feedback(ex05.check_completion_logps_and_entropy, ex.completion_logps_and_entropy);

# %% [markdown]
# `course_lib.policy.completion_forward` computes the same numbers without ever
# materialising the `(B, L, V)` logits (lesson 10). The two agree on the tiny model
# (checked here with the reference solution, so the cell runs before you finish yours):

# %%
from course_lib.grading import load_exercise as load_reference
from course_lib.policy import completion_forward
from course_lib.rollout import HFEngine

reference_solution = load_reference("ex05_grpo", impl="solutions")
check_model, check_tokenizer = load_policy("tiny")
check_batch = HFEngine(check_model, check_tokenizer).generate(list(test_prompts["prompt"][:4]), n=2,
                                                              sampling=SamplingConfig(max_tokens=6, seed=0))
input_ids = torch.cat([check_batch.prompt_ids, check_batch.completion_ids], dim=1)
attention = torch.cat([check_batch.prompt_mask, check_batch.completion_mask], dim=1)
with torch.no_grad():
    position_ids = (attention.cumsum(1) - 1).clamp(min=0)  # left-padded prompts: positions count real tokens
    full_logits = check_model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids).logits
    mine_logps, mine_entropy = reference_solution.completion_logps_and_entropy(
        full_logits, input_ids, check_batch.prompt_ids.shape[1], check_batch.completion_mask, 0.7)
    library_logps, _, library_entropy = completion_forward(
        check_model, check_batch.prompt_ids, check_batch.prompt_mask, check_batch.completion_ids,
        check_batch.completion_mask, temperature=0.7, with_entropy=True)
valid = check_batch.completion_mask.bool()
print(f"largest difference: log-probs {(mine_logps - library_logps)[valid].abs().max():.1e}, "
      f"entropies {(mine_entropy - library_entropy)[valid].abs().max():.1e}")

# %% [markdown]
# ### Exercise 4 — the loop
#
# Now write `grpo_loop(model, sample_batch, reward_fn, steps, num_iterations=1)` in
# `exercises/ex05_grpo.py`, about thirty lines. The sampling is given:
# `sample_batch(k)` returns the k-th generation batch (`course_lib.group_batches`: four
# prompts, eight completions each, prompt-major, sampled from the model's current weights
# with `Trainer`'s prompt order and seeds). Your loop does the RL: score the completions,
# turn the rewards into group advantages (your Exercise 1), compute the per-token
# log-probs with `completion_forward` (your Exercise 3 inside), take your Exercise 2 loss,
# and make an AdamW step with the gradient norm clipped at 1.0.
#
# With `num_iterations=2` each batch serves two optimizer steps. The second one sees a
# policy that has already moved, so its ratio is no longer 1 and the clip can act: the
# old log-probs must be computed once, right after sampling and without gradient, and
# kept for both passes. Each row of the log also reports `grad_norm` (the norm before
# clipping) and `clip_fraction` (the share of tokens whose clip is active).
#
# The check runs your loop and `Trainer` for two steps on the same seed, on-policy and
# with `num_iterations=2`. It compares the rewards, then the first step's gradient norm
# (a wrong advantage or loss shows there, before the optimizer has acted), then the
# weights (a wrong optimizer step shows there), and names the mistake when it recognises it.

# %%
ex = load_exercise("ex05_grpo")
feedback(ex05.check_grpo_loop, ex.grpo_loop);

# %% [markdown]
# The same comparison in the open, with the reference solution (so the cell runs before
# you finish yours), over four steps, on-policy and with two optimizer steps per batch:

# %%
from course_lib.group_batches import group_batch_sampler

start_model, _ = load_policy("tiny")
for iterations in (1, 2):
    loop_model, _ = load_policy("tiny")
    sample_batch = group_batch_sampler(loop_model, tokenizer, train_prompts, prompts_per_batch=4, num_generations=8,
                                       max_tokens=6, seed=0)
    loop_log = reference_solution.grpo_loop(loop_model, sample_batch, first_number_is_correct, steps=4,
                                            num_iterations=iterations)
    trainer_model, _ = load_policy("tiny")
    same_settings = GRPOConfig(output_dir=str(OUTPUT / "05_grpo_loop_check"), overwrite_output_dir=True,
                               loss_type="grpo", beta=0.0, num_generations=8, per_device_train_batch_size=32,
                               gradient_accumulation_steps=1, num_iterations=iterations, learning_rate=3e-5,
                               lr_scheduler_type="constant", max_completion_length=6, temperature=1.0, max_steps=4,
                               logging_steps=1, save_steps=0, seed=0)
    trainer_log = Trainer(same_settings, [first_number_is_correct], train_prompts, trainer_model, tokenizer,
                          progress=False).train()
    print(f"num_iterations={iterations}:")
    for mine, theirs in zip(loop_log, trainer_log):
        print(f"  step {mine['step']}: reward {mine['reward']:.4f} (Trainer {theirs['reward']:.4f}), grad_norm "
              f"{mine['grad_norm']:.4f} ({theirs['grad_norm']:.4f}), clip_fraction {mine['clip_fraction']:.3f} "
              f"({theirs['clip_ratio/region_mean']:.3f})")
    gap = max((p - q).abs().max().item() for p, q in zip(loop_model.parameters(), trainer_model.parameters()))
    moved = max((p - q).abs().max().item() for p, q in zip(loop_model.parameters(), start_model.parameters()))
    print(f"  after 4 steps: largest weight difference loop vs Trainer {gap:.1e}; largest change of a weight "
          f"since the start {moved:.1e}")

# %% [markdown]
# The loop and `Trainer` sample the same completions, see the same rewards, and end with
# the same weights up to float rounding, while the weights themselves moved by orders of
# magnitude more: the forty lines of the loop are GRPO as `Trainer` runs it in this setting.
# On-policy the clip fraction is 0 at every step: the ratio is exactly 1. With two steps
# per batch it is 0 on each batch's first step, and a second step can clip (5.8% of the
# tokens at step 2 in our run, none at step 4): there the stored old log-probs make the
# ratio differ from 1, and the clip acts in your own loop. The gradient norms match
# `Trainer`'s at every step, which is how the check tells a wrong loss (the first step's
# norm differs) from a wrong optimizer step (the first matches, the weights do not).
# Everything else in `Trainer` is schedule and bookkeeping: several micro-batches per
# step (lesson 07), the reference model and its KL term, other loss types
# (lesson 06), the sampler/trainer correction (lesson 10), logging and checkpoints.

# %% [markdown]
# ## 8. What to watch
#
# - **`reward`** should trend upward. It is noisy: each step sees only a few prompts.
# - **`reward_std_in_groups`** (a `course_lib` metric; TRL logs only `reward_std`, the
#   spread over the whole batch) is the mean spread inside groups, what the advantages are
#   made of. If it collapses to 0 the model answers every prompt the same way, right or
#   wrong, and learning stops; `frac_reward_zero_std` (logged by both) says the same thing
#   as a fraction of groups. Near 1, the prompts are too easy or too hard for the model:
#   change the data, raise the temperature or G.
# - **`entropy`**, the mean entropy of the next-token distributions on the sampled tokens
#   (Exercise 3 computes it), says how much the policy still explores. It falls slowly as
#   the policy sharpens on what works. A collapse toward 0 within a few dozen steps means
#   the policy now writes the same answer to every prompt: the groups lose their spread
#   and the learning stops with them (raise the temperature, lower the learning rate).
# - **`grad_norm`**, the gradient norm *before* clipping (what `clip_grad_norm_` returns),
#   is what to read instead of the loss. On-policy the "grpo" loss is −mean(A) = 0 at
#   every step (section 4) and the other loss types stay near 0, whatever the policy
#   learns, while `grad_norm` says how hard each step pushes. It is 0 when every group is
#   silent (nothing to learn: see `frac_reward_zero_std`). Values steadily above
#   `max_grad_norm` (1.0) are common and harmless with Adam, which normalises the size of
#   each step (the loop of section 7 reads 2 to 4 at every step); what to watch is a
#   *spike*, many times the run's usual value, or a NaN: a batch that would jerk the
#   policy, which the clip caps and the doctor of lesson 13 reports.
# - **`kl`** (with β > 0) measures how far the policy has drifted from the reference. It
#   grows slowly in a healthy run; a sudden jump means the updates are too large (lower
#   the learning rate).
# - The completions themselves: print a few every `logging_steps` (`log_completions=True`)
#   to catch reward hacking early.

# %% [markdown]
# ## Questions
#
# 1. GRPO's baseline is the mean reward of the group. What does a value model provide that
#    the group mean cannot, and what does the group mean provide that a value model
#    struggles with?
# 2. Two completions scored 0 and 100 get the same advantages (±0.707) as two scored 0 and
#    1. Is that a feature or a bug? What does it do to the effective learning rate?
# 3. A batch has `frac_reward_zero_std = 0.9`. List three changes that could bring it
#    down, and the price of each.
# 4. On-policy, the ratio is exactly 1 and clipping never happens. Then why does the GRPO
#    loss still have a clip? (Hint: `num_iterations`, lesson 06.)
# 5. All the tokens of a completion share one advantage. Which tokens of a wrong answer
#    are pushed down even though they were fine, and why does it not matter on average?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("05", k)`
# prints the answer to question k (`show_answer("05")` prints them all). They are also in
# `notebooks/answers/05_grpo.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("05", 1)
