# %% [markdown]
# # Lesson 11 — Capstone: train a reasoning model with GRPO
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/11_capstone.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 102 s of CPU time, measured on a
# 2-core CPU, 60 s of it section 8's two sorting runs, 18 s the 60-step tiny run; the wall time
# grows with the machine's load.*
#
# Everything so far was a part; this lesson assembles the whole machine. You will take a
# task whose answers a program can check, write its reward functions, configure GRPO with
# every knob of lessons 05–10, train, and judge the result from the metrics and from the
# model's answers. Then you will run the same thing with TRL's `GRPOTrainer` and, on a
# GPU, with Unsloth and vLLM.
#
# In this lesson you will:
# 1. build the **dataset**: synthetic arithmetic, word problems or GSM8K, in the
#    conversational format with an `answer` column;
# 2. write the **reward functions**: format, correctness and a small rubric, and a
#    verifier plus a partial-credit reward for a task of your own;
# 3. write a **GRPOConfig** where every setting is a decision you can explain;
# 4. **train**, read the **metrics** while it runs, and compare **before / after**;
# 5. run the same configuration with **TRL** and, on a GPU, with **Unsloth + vLLM**;
# 6. know what to **expect on real tasks**: how many steps, rows, and parameters.
#
# The run is one cell with two budgets. In fast mode (`COURSE_FAST=1`, how the tests run
# this notebook on a CPU) it trains the tiny model for 60 steps (about 15 s of CPU time on
# our CPU; the wall time grows with its load), enough for a held-out gain larger than its
# noise: 35.5% → 47.0% on 200 problems, +11.5 points [+4.8, +18.2] in our run (section 7
# prints yours). A run this short is noisy: at the same learning rate, 70 or 80 steps left
# the gain inside its noise in our runs. Without it, the same cell
# trains SmolLM2-135M-Instruct with LoRA for 300 steps (minutes on a GPU; on a CPU, roughly
# 300 × 7 to 15 s with the vLLM bfloat16 sampler, depending on the machine). Section 8 then
# trains SmolLM2 on a task of your own, sorting, with the reward you write.

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
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from course_lib.machine import environment_report, fast_mode, scaled

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))
MODEL = scaled("tiny", "smollm2-135m")
report = environment_report()
print(f"fast mode: {fast_mode()} | device: {report['device']} | model for this run: {MODEL}")

# %% [markdown]
# ## 1. The dataset
#
# GRPO needs prompts, not answers to imitate: the model writes the answers, the reward
# functions judge them. A row holds a `prompt` (a list of chat messages, TRL's
# *conversational* format) and any column the reward functions need, here the reference
# `answer`. `course_lib.data` offers:
#
# - `arithmetic`: "What is 23 + 45?", what the tiny model was trained on;
# - `arithmetic-tagged`: the same with a system instruction and one worked example that
#   show the `<answer>N</answer>` format (a 135M chat model does not produce the tags from
#   an instruction alone, and RL cannot reward what never happens);
# - `word-problems`: two-step problems from templates;
# - `gsm8k:<path>`: GSM8K from a local JSONL file (or `gsm8k` from the Hub, with a network).
#
# GSM8K (grade-school maths word problems with numeric answers) is by far the most popular
# dataset for DeepSeek-R1-style training. How many rows? The best results come with **at
# least 500 rows**; GRPO can start from as few as 10, but more is better.

# %%
from course_lib.data import get_task
from course_lib.models import load_policy

TASK = scaled("arithmetic", "arithmetic-tagged")
train_prompts = get_task(TASK, split="train", n=scaled(256, 2000), seed=0)
test_prompts = get_task(TASK, split="test", n=200, seed=0)
print(f"{TASK}: {len(train_prompts)} training rows, {len(test_prompts)} held-out rows; "
      f"columns {train_prompts.column_names}")
print(train_prompts[0]["prompt"])
word_problem = get_task("word-problems", split="train", n=1, seed=0)[0]
print("word problem:", word_problem["question"], "->", word_problem["answer"])

# %% [markdown]
# GSM8K lives outside the repository. The cell looks for a local copy (set `GSM8K_DIR` to
# point at yours) and skips itself when there is none.

# %%
from course_lib.rewards import gsm8k_correctness_reward, gsm8k_strict_format_reward

candidates = [os.environ.get("GSM8K_DIR"), "../shared/data/gsm8k", "../../shared/data/gsm8k"]
gsm8k_dir = next((Path(c) for c in candidates if c and (Path(c) / "train.jsonl").exists()), None)
if gsm8k_dir is None:
    print("No local GSM8K copy found (set GSM8K_DIR to a folder with train.jsonl); skipping.")
else:
    gsm8k = get_task(f"gsm8k:{gsm8k_dir}", split="train", n=scaled(4, 500), seed=0)
    row = gsm8k[0]
    print(f"GSM8K: {len(gsm8k)} rows loaded from {gsm8k_dir}")
    print("question:", row["prompt"][-1]["content"][:200])
    print("final answer (after ####):", row["answer"])
    reasoning = row["solution"].split("####")[0].strip()
    ideal = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{row['answer']}\n</answer>\n"
    print("correctness / strict format of an ideal completion:",
          gsm8k_correctness_reward(completions=[ideal], answer=[row["answer"]]),
          gsm8k_strict_format_reward(completions=[ideal]))

# %% [markdown]
# **The chat template.** The prompts are chat messages, so the tokenizer must have a chat
# template that turns them into text. Instruct models ship one; if you start from a
# **base** model, give it one (`tokenizer.chat_template = ...`) before training, or the
# prompts will not be what you think.

# %%
policy, tokenizer = load_policy(MODEL)
assert tokenizer.chat_template is not None, f"{MODEL} has no chat template: set tokenizer.chat_template first"
print(tokenizer.apply_chat_template(train_prompts[0]["prompt"], add_generation_prompt=True, tokenize=False))

# %% [markdown]
# ## 2. The reward functions
#
# Rewards for verifiable tasks (RLVR) are small programs. The run below combines three,
# each with TRL's signature `f(prompts, completions, **columns) -> list[float]`:
#
# - **correctness**, the verifier turned into a reward: 1 when the answer equals the
#   reference (for the tiny model, the first number of its text; for SmolLM2, the number
#   inside `<answer>` tags);
# - a shaping term: the **proximity** reward for the tiny model (a near miss scores more
#   than a far one), the **format** reward for SmolLM2 (1 for `<answer>N</answer>`);
# - a **rubric**: several small checks summed into one function, here "+1 if there is a
#   number, −1 if not" and "−0.5 if the answer rambles" (more characters than the limit,
#   not counting the `<answer>` tags, so that a tidy tagged answer is not punished for
#   its format).
#
# `reward_weights` in the config weighs the functions in the total reward.

# %%
from course_lib.rewards import (
    answer_tag_format_reward,
    correctness_reward,
    get_reward_functions,
    number_reward,
    predicate_reward,
    rubric,
)
from course_lib.widgets import plot_reward_breakdown

import re

rambling_limit = scaled(8, 80)  # characters: the tiny model's answers are a few digits


def rambles(text: str) -> bool:
    """More than `rambling_limit` characters once the answer tags are removed."""
    return len(re.sub(r"</?answer>", "", text).strip()) > rambling_limit


tidy_rubric = rubric((1.0, number_reward), (-0.5, predicate_reward(rambles, name="rambles")), name="tidy_rubric")
if MODEL == "tiny":
    reward_funcs = get_reward_functions(["correctness_first_number_reward", "proximity_reward"]) + [tidy_rubric]
else:
    reward_funcs = [correctness_reward, answer_tag_format_reward, tidy_rubric]
reward_weights = [1.0, 0.5, 0.25]

examples = ["147", "146", "<answer>147</answer>", "one hundred", "147 147 147 147 147 147 147 147"]
display(plot_reward_breakdown(examples, reward_funcs, reward_weights=reward_weights, answer=["147"] * len(examples)))
print("tidy_rubric:", dict(zip(examples, tidy_rubric(completions=examples))))

# %% [markdown]
# Read the table before training: each row is a completion you might see, each column a
# reward function. The rewards must rank them the way you would. If they do not, fix the
# rewards now: the policy will find every loophole they leave.

# %% [markdown]
# ### Exercise 1 — a verifier for a new task: `verify_sorted(text, reference)`
#
# A new verifiable task: the prompt lists integers, the answer lists them in ascending
# order (`"Sort: 9, 3, 5"` → `"3, 5, 9"`). Open `exercises/ex11_capstone.py` and write
# the verifier: right or wrong, no score. The helper `read_numbers` (given) reads the
# final answer.

# %%
from course_lib.checks import ex11
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex11_capstone")
feedback(ex11.check_verify_sorted, ex.verify_sorted);

# %% [markdown]
# ### Exercise 2 — a reward with partial credit: `sorting_reward(prompts, completions, answer, **kwargs)`
#
# A verifier alone gives 1 or 0, and a model that is always wrong gets no signal. Partial
# credit (right numbers in the wrong order, some positions right) gives the group's
# completions different rewards, which is what GRPO learns from. When it passes, the cell
# shows your reward next to the verifier on a few completions.

# %%
ex = load_exercise("ex11_capstone")
if feedback(ex11.check_sorting_reward, ex.sorting_reward):
    sorting_examples = ["<answer>3, 5, 9</answer>", "<answer>5, 3, 9</answer>", "3, 5", "9 5 3 1", "no idea"]

    def sorting_verifier(prompts=None, completions=(), answer=(), **kwargs):
        return [float(ex.verify_sorted(c, a)) for c, a in zip(completions, answer)]

    display(plot_reward_breakdown(sorting_examples, [sorting_verifier, ex.sorting_reward], reward_weights=[0.0, 1.0],
                                  answer=["3, 5, 9"] * len(sorting_examples)))

# %% [markdown]
# ## 3. The configuration
#
# One `GRPOConfig`, every setting chosen on purpose. The values that differ between the
# two budgets go through `scaled(fast, full)`.

# %%
from course_lib.algos import GRPOConfig
from course_lib.presets import fast_engine_settings
from course_lib.schedule import format_schedule, schedule_from_config

# SmolLM2 samples in vLLM (bfloat16 on a CPU that has it); the tiny model's 8-character
# answers are as fast with Hugging Face generate.
sampler = fast_engine_settings() if MODEL != "tiny" else {}

config = GRPOConfig(
    model_name_or_path=MODEL,
    output_dir=str(OUTPUT / "11_capstone"),
    overwrite_output_dir=True,                  # re-running replaces the last run (else refused)
    seed=0,
    # --- the group and the batch (lessons 05, 07)
    num_generations=8,                          # G completions per prompt; >= 8 so that groups differ
    per_device_train_batch_size=scaled(32, 16), # fast: 4 prompts x 8 answers; full: 2 prompts x 8
    gradient_accumulation_steps=1,
    steps_per_generation=None,                  # = gradient_accumulation_steps: every batch is used once
    num_iterations=1,                           # mu: one pass per batch, so the ratio is 1 (on-policy)
    # --- the loss (lessons 05, 06)
    loss_type="dapo",                           # token-level aggregation, no length bias
    scale_rewards="group",                      # GRPO's z-score ("none" = Dr. GRPO)
    epsilon=0.2,
    epsilon_high=0.28,                          # DAPO's clip-higher; binds only when num_iterations > 1
    importance_sampling_level="token",          # "sequence" = GSPO
    beta=0.04,                                  # a small KL to the reference, so that `kl` is logged
    mask_truncated_completions=False,           # keep truncated answers in the loss (True is finite too: lesson 06)
    reward_weights=reward_weights,
    # --- sampling (lessons 05, 10)
    temperature=1.0,                            # the source notes' advice; config_warnings flags below 0.7
    max_completion_length=scaled(8, 48),
    engine=sampler.get("engine", "hf"),         # "vllm": see section 9 and lesson 10
    vllm_dtype=sampler.get("vllm_dtype", "auto"),
    dtype=sampler.get("dtype", "auto"),
    # SmolLM2 on Hugging Face generate on a CPU: a second process samples while this one learns
    # (lesson 10, section 9; measured 1.86x the steps per minute with LoRA on 2 cores against sync on 1)
    async_generation=MODEL != "tiny" and "engine" not in sampler and not torch.cuda.is_available(),
    # --- optimisation (lessons 03, 10)
    learning_rate=scaled(8e-5, 1e-4),           # measured: 3e-4 made the tiny model worse; 1e-6 to 1e-5 for billions
    lr_scheduler_type="constant",
    max_grad_norm=1.0,
    max_steps=scaled(60, 300),
    use_lora=MODEL != "tiny",                   # LoRA on every projection for SmolLM2
    lora_r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    # --- logging
    logging_steps=scaled(30, 50),
    log_completions=True,
    num_completions_to_print=scaled(2, 4),
    save_steps=0,
)
print(f"{config.unique_prompts_per_generation} prompts x {config.num_generations} completions per step, "
      f"{config.max_steps} steps, {config.max_steps * config.effective_batch_size} completions in all")
print(format_schedule(schedule_from_config(config, cycles=1)))

# %% [markdown]
# ### Exercise 3 — `config_warnings(config, num_train_rows, model_billions)`
#
# Turn the practical advice of this course into code: return the set of warning codes
# whose condition holds (the docstring lists them). Then the cell runs it on this run's
# configuration.

# %%
from course_lib.models import count_parameters

ex = load_exercise("ex11_capstone")
if feedback(ex11.check_config_warnings, ex.config_warnings):
    print("this run:", sorted(ex.config_warnings(config, len(train_prompts), count_parameters(policy) / 1e9)))

# %% [markdown]
# The fast run breaks some of the advice on purpose (a 1M-parameter model, 256 rows): it
# is sized to finish in a minute or two on a CPU.

# %% [markdown]
# ## 4. Before training
#
# Greedy accuracy on held-out problems, and a few answers to compare with later.

# %%
from course_lib.evaluation import format_accuracy, greedy_completions, is_correct, lift_interval

max_tokens = config.max_completion_length


def held_out_correct(the_model) -> list[bool]:
    """Greedy answer to each held-out problem: right or wrong (the rule of `is_correct`)."""
    completions = greedy_completions(the_model, tokenizer, test_prompts["prompt"], max_new_tokens=max_tokens)
    return [is_correct(c, a) for c, a in zip(completions, test_prompts["answer"])]


correct_before = held_out_correct(policy)
shown = test_prompts.select(range(5))
answers_before = greedy_completions(policy, tokenizer, shown["prompt"], max_new_tokens=max_tokens)
print(f"greedy accuracy before training: {format_accuracy(sum(correct_before), len(correct_before))} "
      "(95% Wilson interval)")

from course_lib.rollout import SamplingConfig

# For section 7's pass@k: 64 samples per problem at the training temperature, through the run's engine
# (fast mode takes 30 problems: 2 x 1,920 samples instead of 2 x 6,400).
pass_problems = test_prompts.select(range(scaled(30, 100)))
pass_sampling = SamplingConfig(temperature=config.temperature, max_tokens=max_tokens, seed=0)

# %% [markdown]
# ## 5. Train, and watch
#
# The dashboard redraws every few steps in a notebook (the trainer hands it each logged
# row through `on_step`); the sample tables printed every `logging_steps` show what the
# model actually writes.

# %%
from course_lib.trainer import Trainer
from course_lib.widgets import LiveDashboard, plot_training_history

dashboard = LiveDashboard(every=scaled(15, 25), columns=4, smooth=scaled(1, 10))  # 4 redraws in fast mode, 12 in full
trainer = Trainer(config, reward_funcs, train_prompts, policy, tokenizer, progress=not fast_mode(),
                  on_step=dashboard.update)
samples_before = trainer.generate(pass_problems["prompt"], n=64, sampling=pass_sampling).texts  # for section 7
started = time.time()
history = trainer.train()
print(f"{len(history)} steps in {time.time() - started:.0f} s")

# %% [markdown]
# ## 6. Read the metrics
#
# | metric | what it says | healthy |
# |---|---|---|
# | `reward` | mean total reward of the step's completions | trends up, noisily |
# | `rewards/<name>/mean` | each function on its own | shows *which* part improves (format first, correctness later is typical) |
# | `reward_std` | spread of the rewards over the whole batch (TRL's meaning) | stays above 0 |
# | `reward_std_in_groups` | spread inside groups, averaged: the raw material of the advantages | stays above 0 |
# | `frac_reward_zero_std` | fraction of groups whose completions all scored the same: no signal | low; near 1 = task too easy or too hard |
# | `kl` | divergence from the reference (β > 0) | grows slowly; a jump = steps too large |
# | `entropy` | how random the sampled tokens are | falls slowly as the policy sharpens; a crash = it stopped exploring |
# | `clip_ratio/*` | tokens whose ratio left [1 − ε, 1 + ε_high] | 0 on-policy (`num_iterations=1`); small otherwise |
# | `completions/mean_length`, `completions/clipped_ratio` | answer length; share cut at `max_completion_length` | stable; a rising clipped ratio means answers outgrow the limit |
#
# Every reward function is logged on its own next to the total, with no external tool
# needed (`report_to="wandb"` or `"tensorboard"` mirrors the same rows). A function whose
# panel is flat adds nothing to the advantages: here the tiny model almost always writes a
# short number, so the rubric hardly varies (its mean stays within a few thousandths of 1).
# The trainer's run doctor (lesson 13) watches for this while the run trains:
# `dead_reward_function` names a function that scores every completion the same, and
# `dominant_reward_function` one that carries nearly all of the reward's spread. In our fast
# run it stayed silent, rightly: the rubric did vary, on a rare answer that rambled or held
# no number, and the function that dominates is correctness, a 0/1 verifier, which is meant
# to dominate (the rubric is there for SmolLM2, whose answers do ramble). Lesson 13 teaches
# how to read such findings. With four prompts a step (fast mode) and two (full
# mode), every metric is noisy: read trends over many steps, not single points.
#
# Expect the reward to rise slowly with the number of steps: on the tiny model the
# training reward moves by a couple of hundredths over 60 steps (the cell below prints its
# first and last quarters), which is hard to see through the noise. Read it for what it
# is: a weighted sum, `1.0 × correctness + 0.5 × proximity + 0.25 × rubric`, at most
# 1.75, so a total near 1 does not mean that the model adds. The cell also prints each
# function's mean; the correctness row is the share of *sampled* answers (temperature
# 1.0) that are right, the number that training is meant to raise (our fast run: total
# 0.92 → 0.94, correctness 0.20 → 0.22, so about one sampled answer in five is right, and
# the rest of the total is proximity and rubric credit). The held-out
# accuracy of section 7, measured on 200 problems with a paired interval on the lift, is
# the clearer verdict: the cell there says whether the lift exceeds its noise. One
# setting we measured on purpose: a learning rate of 3e-4 (nearly four times this one) took the
# same tiny model from 35.5% to 16.5% in a dozen steps: large, noisy steps knock a small
# model off what it knew.

# %%
display(plot_training_history(history, smooth=scaled(1, 10), title=f"GRPO on {MODEL}"))
first, last = history[: max(1, len(history) // 4)], history[-max(1, len(history) // 4):]
per_function = [key for key in history[-1] if key.startswith("rewards/") and key.endswith("/mean")]
for key in ["reward", *per_function, "reward_std", "frac_reward_zero_std", "kl", "entropy",
            "clip_ratio/region_mean", "completions/mean_length", "completions/clipped_ratio"]:
    before = sum(row[key] for row in first) / len(first)
    after = sum(row[key] for row in last) / len(last)
    print(f"{key:<44} first quarter {before:8.3f}   last quarter {after:8.3f}")

# %% [markdown]
# The reward curve on its own, per function:

# %%
reward_keys = ["reward"] + [key for key in history[-1] if key.startswith("rewards/") and key.endswith("/mean")]
display(plot_training_history(history, keys=reward_keys, smooth=scaled(3, 20), columns=len(reward_keys),
                              title="Reward per step"))

# %% [markdown]
# ## 7. After training
#
# The same held-out problems, greedy, with the trained policy.

# %%
correct_after = held_out_correct(trainer.model)
answers_after = greedy_completions(trainer.model, tokenizer, shown["prompt"], max_new_tokens=max_tokens)
lift, low, high = lift_interval(correct_before, correct_after)
print(f"greedy accuracy on {len(test_prompts)} held-out problems (95% intervals), {len(history)} steps:")
print(f"  before {format_accuracy(sum(correct_before), len(correct_before))}")
print(f"  after  {format_accuracy(sum(correct_after), len(correct_after))}")
print(f"  lift   {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}] (paired: same problems); "
      + ("larger than its noise (the interval excludes 0)" if low > 0 else "NOT larger than its noise"))
print(f"{'question':<22} {'reference':>9}   {'before':<28} {'after':<28}")
for row, before, after in zip(shown, answers_before, answers_after):
    print(f"{row['question']:<22} {row['answer']:>9}   {before.strip()[:28]!r:<28} {after.strip()[:28]!r:<28}")

# %% [markdown]
# ### Beyond greedy accuracy: pass@k, maj@k, sampled vs greedy
#
# Greedy accuracy measures one answer per problem, the policy's most likely one. But RL
# trains on *samples*, and papers report more than one number:
#
# - **pass@k**: the chance that at least one of k samples is right. From n ≥ k samples
#   with c right, Chen et al. (2021) give the unbiased estimator
#   `pass@k = 1 − C(n − c, k) / C(n, k)` (`course_lib.evaluation.pass_at_k`, tested
#   against enumeration of every k-subset). pass@1 is the **sampled accuracy**: the
#   fraction of right samples at the training temperature, which is not the greedy
#   accuracy.
# - **maj@k**: the majority answer of k samples, compared with the reference
#   (`maj_at_k`, "self-consistency").
#
# And they ask a question greedy accuracy cannot: did RL teach the model something new,
# or did it make what it already could do more likely? Yue et al. (2025, "Does
# Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base
# Model?") found RL raising pass@1 while the base model caught up, or won, at pass@256:
# RL **sharpens** the distribution toward answers the base model already sampled. A
# method that **expands** what the model can do would lift pass@k at large k too. The
# cell takes n = 64 answers per problem sampled through the run's engine (vLLM where the
# run uses it: Hugging Face sampling of a 135M model on a CPU would take hours here), just
# before training (section 5) and now, and compares the curves, with paired intervals at
# k = 1 and 64.

# %%
from course_lib.evaluation import group_texts, score_samples

ks = (1, 2, 4, 8, 16, 32, 64)
samples_after = trainer.generate(pass_problems["prompt"], n=64, sampling=pass_sampling).texts
sampled = {label: score_samples(group_texts(texts, 64), pass_problems["answer"], ks, config.temperature)
           for label, texts in (("before", samples_before), ("after", samples_after))}
greedy = {"before": correct_before[:len(pass_problems)], "after": correct_after[:len(pass_problems)]}
print(f"{len(pass_problems)} held-out problems, 64 samples each at temperature {config.temperature}:")
print(f"{'':<8} {'greedy':>7}" + "".join(f" {'pass@' + str(k):>8}" for k in ks) + f" {'maj@64':>8}")
for label, result in sampled.items():
    print(f"{label:<8} {sum(greedy[label]) / len(pass_problems):>7.1%}"
          + "".join(f" {result.pass_at[k]:>8.1%}" for k in ks) + f" {result.maj_at[64]:>8.1%}")
lifts = {}
for k in (1, 64):
    lifts[k] = lift_interval(sampled["before"].per_problem_pass_at(k), sampled["after"].per_problem_pass_at(k))
    print(f"pass@{k} lift {100 * lifts[k][0]:+.1f} points [{100 * lifts[k][1]:+.1f}, {100 * lifts[k][2]:+.1f}] (paired)")
sharpened = lifts[1][1] > 0 and lifts[64][1] <= 0
verdict = ("sharpened: pass@1 rose beyond its noise, pass@64 did not" if sharpened else
           "expanded: pass@64 rose beyond its noise too" if lifts[64][1] > 0 else
           "neither lift exceeds its noise at k = 1")
print("RL here", verdict)

fig, ax = plt.subplots(figsize=(6, 3.2))
for label, color in (("before", "tab:gray"), ("after", "tab:blue")):
    ax.plot(ks, [sampled[label].pass_at[k] for k in ks], marker="o", color=color, label=f"pass@k, {label}")
    ax.plot(ks, [sampled[label].maj_at[k] for k in ks], linestyle="--", color=color, label=f"maj@k, {label}")
    ax.axhline(sum(greedy[label]) / len(pass_problems), color=color, linestyle=":", linewidth=1)
ax.set_xscale("log", base=2)
ax.set(xlabel="k (samples)", ylabel="accuracy", ylim=(0, 1.02), title=f"{MODEL}: pass@k and maj@k (dotted: greedy)")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# How to read it (the numbers are the cell's, so re-running changes them a little):
#
# - **Sampled vs greedy.** pass@1 at temperature 1.0 sits below the greedy accuracy:
#   sampling spends probability on wrong digits that greedy decoding never picks. Training
#   raised both in our runs (compare the two rows); a policy that grows more certain also
#   brings the two closer, which a run this short does not reach.
# - **maj@k** climbs above pass@1 once the right answer is the most frequent one, and
#   stays flat where the model's favourite answer is wrong: voting cannot fix a
#   systematic error.
# - **k = 1 against k = 64.** On two-digit additions the answer space is small, so
#   64 samples at temperature 1.0 stumble on the right number for almost every problem,
#   trained or not: pass@64 is close to 1 before training and has nowhere to go, and at
#   large k the two curves meet. When the cell's last line reads "sharpened" (it did in
#   our runs, on 30 problems in fast mode), that is the "sharpens" picture of Yue et al.
#   in its smallest form: RL moved probability onto answers the base model could already
#   sample. If it reads otherwise on your run, your run does not show that picture: the
#   two lift lines above it say which lift did or did not clear its noise. On such tasks
#   a large-k pass@k says little about what the model *knows*; report pass@1 (or greedy)
#   with an interval, and read pass@k for large k as the ceiling of what sampling can reach.

# %% [markdown]
# ### Continuous training
#
# Training does not have to stop: a run saved as a checkpoint can be resumed later with a
# larger step budget, and GRPO can keep fine-tuning in the background as long as you let
# it (the command line does the same with `python -m course_lib train ... --resume-from
# <output_dir>/checkpoint-<step>`). Here, a few more steps from where we stopped:

# %%
from dataclasses import replace

checkpoint = trainer.save_checkpoint()
more = replace(config, max_steps=config.max_steps + scaled(4, 100))
fresh_policy, _ = load_policy(MODEL)
continued = Trainer(more, reward_funcs, train_prompts, fresh_policy, tokenizer, progress=False)
continued_history = continued.train(resume_from=checkpoint)
new_rows = [row for row in continued_history if row["step"] > config.max_steps]
print(f"resumed from {checkpoint.name}: {len(continued_history)} rows of history, the last {len(new_rows)} new "
      f"(steps {new_rows[0]['step']}-{new_rows[-1]['step']}); last reward {new_rows[-1]['reward']:.3f}")

# %% [markdown]
# ## 8. Your own task: sorting, trained with your reward
#
# Exercises 1 and 2 built a verifier and a partial-credit reward for sorting. Here they
# train a model. The task: `get_task("sorting")` lists three integers from 1 to 99 with an
# instruction and one worked example of the `<answer>a, b, c</answer>` format. The rewards
# are **yours**: `sorting_reward` (partial credit) plus your verifier `verify_sorted` as the
# correctness reward (1 when exactly right), with equal weights. If your functions do not
# pass their checks yet, the cell says so and trains with the course's reference solution,
# so that you still see what a working reward does.
#
# The model is SmolLM2-135M-Instruct with LoRA (the tiny model has only ever seen
# additions), with the settings the source notes advise: temperature 1.0 and 8 completions
# per prompt, so that the completions of a group differ and GRPO has a signal. Before
# training, greedy SmolLM2 sorts about a quarter of the lists (often it copies the input
# order), and at temperature 1.0 no group of 8 came back with identical rewards in our
# probe of 40 prompts: partial credit separates "right numbers, wrong order" from
# "wrong numbers". Accuracy is measured by *your* verifier on held-out lists.

# %%
from course_lib.rewards import completion_text

ex = load_exercise("ex11_capstone")
if feedback(ex11.check_verify_sorted, ex.verify_sorted) and feedback(ex11.check_sorting_reward, ex.sorting_reward):
    sorting = ex  # your functions
else:
    sorting = load_exercise("ex11_capstone", impl="solutions")
    print("-> this run trains with the course's reference sorting_reward and verify_sorted; "
          "finish exercises 1 and 2 and re-run the cell to train with yours.")


def sorted_exactly(prompts=None, completions=(), answer=(), **kwargs):
    """The verifier as a reward: 1.0 when the list is exactly the sorted reference, else 0.0."""
    return [float(sorting.verify_sorted(completion_text(c), a)) for c, a in zip(completions, answer)]


sort_train = get_task("sorting", split="train", n=2000, seed=0)
sort_test = get_task("sorting", split="test", n=scaled(3, 200), seed=0)  # greedy evaluation costs ~0.5 s of CPU a list
sort_policy, sort_tokenizer = load_policy("smollm2-135m")
sort_config = GRPOConfig(
    model_name_or_path="smollm2-135m", output_dir=str(OUTPUT / "11_capstone_sorting"), overwrite_output_dir=True,
    seed=0, use_lora=True, lora_r=16, lora_alpha=32, lora_dropout=0.0, learning_rate=1e-4,
    lr_scheduler_type="constant", num_generations=8, temperature=1.0,
    per_device_train_batch_size=scaled(8, 16),  # fast: 1 prompt x 8 answers (one group); full: 2 prompts x 8
    max_completion_length=24, max_steps=scaled(1, 30), reward_weights=[1.0, 1.0],
    # vLLM where this machine runs it fast; fast mode's single step does not repay the engine's start-up
    logging_steps=10, save_steps=0, **(fast_engine_settings() if not fast_mode() else {}))
sort_trainer = Trainer(sort_config, [sorting.sorting_reward, sorted_exactly], sort_train, sort_policy,
                       sort_tokenizer, progress=not fast_mode())


def sorted_correct() -> list[bool]:
    """Greedy answers of the current policy (by the run's engine) checked by the verifier."""
    texts = sort_trainer.generate(sort_test["prompt"]).texts  # greedy, up to max_completion_length tokens
    return [sorting.verify_sorted(text, reference) for text, reference in zip(texts, sort_test["answer"])]


sort_before = sorted_correct()
started = time.time()
sort_history = sort_trainer.train()
sort_after = sorted_correct()
lift, low, high = lift_interval(sort_before, sort_after)
n_sort = len(sort_test)
print(f"{len(sort_history)} steps in {time.time() - started:.0f} s; lists sorted exactly (greedy, "
      f"{n_sort} held-out lists, 95% intervals):")
print(f"  before {format_accuracy(sum(sort_before), n_sort)}")
print(f"  after  {format_accuracy(sum(sort_after), n_sort)}")
print(f"  lift   {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]; "
      + ("beyond its noise (the interval excludes 0)" if low > 0 or high < 0 else "within its noise"))
zero_spread = sum(row["frac_reward_zero_std"] for row in sort_history) / len(sort_history)
print(f"groups with identical rewards: {zero_spread:.0%} on average")
display(plot_training_history(sort_history, keys=["reward", "rewards/sorting_reward/mean",
                                                  "rewards/sorted_exactly/mean", "frac_reward_zero_std"],
                              smooth=scaled(1, 5), columns=4, title="GRPO on sorting, with your reward"))

# %% [markdown]
# **What this run shows, and why.** Fast mode trains for only 1 step (one group of 8 completions)
# and evaluates 3 lists: it shows the mechanics, not a result (in our fast runs the lift
# stayed within its noise; the cell's last line says whether yours does). In full mode (30 steps,
# 200 held-out lists, the reference solution's functions, seed 0) we measured:
#
# | learning rate | weights (partial credit, verifier) | training reward, first → last quarter | exactly sorted, greedy, before → after | lift |
# |---|---|---|---|---|
# | 1e-4 | 1.0, 1.0 | 0.40 → 0.74 | 27.0% [21.3, 33.5] → 15.0% [10.7, 20.6] | −12.0 points [−17.5, −6.5] |
# | 3e-5 | 1.0, 1.0 | 0.44 → 0.54 | 27.0% [21.3, 33.5] → 24.5% [19.1, 30.9] | −2.5 points [−5.7, +0.7] |
# | 1e-4 | 0.2, 1.0 | 0.22 → 0.29 | 27.0% [21.3, 33.5] → 14.0% [9.9, 19.5] | −13.0 points [−18.6, −7.4] |
# | 1e-4, training lists never sorted already | 1.0, 1.0 | 0.31 → 0.71 | 27.0% [21.3, 33.5] → 27.5% [21.8, 34.1] | +0.5 points [−6.4, +7.4] |
# | 1e-4, training lists never sorted already | 0.0, 1.0 (verifier only) | 0.05 → 0.21 | 27.0% [21.3, 33.5] → 35.5% [29.2, 42.3] | **+8.5 points [+1.2, +15.8]** |
# | the same, 60 steps | 0.0, 1.0 (verifier only) | 0.07 → 0.34 | 27.0% [21.3, 33.5] → 38.5% [32.0, 45.4] | **+11.5 points [+3.1, +19.9]** |
#
# The training reward *rose* while the held-out accuracy *fell*: the reward was hacked.
# After the first run, every one of the first 12 held-out answers was the input list
# copied in its original order (`Sort: 87, 22, 48` → `<answer>87, 22, 48</answer>`).
# Copying is a safe policy here. It always earns partial credit for "the right numbers",
# and it is *exactly right* whenever the input is already sorted: 1 list in 6, or 17%.
# The model's own sorting attempts, sampled at temperature 1.0, were exactly right only
# 10% of the time in our probe (greedy decoding does better, 27%). So copies are
# reinforced twice: as exactly right answers on the lists that come sorted, and, on the
# others, as better than the many failed attempts, since partial credit still ranks the
# right numbers above wrong ones, even with the verifier weighted five times more (third
# row). This is question 3 below, answered by a measurement: a reward
# can be hacked by a policy that exploits the *data* (here, lists that come sorted), not
# only the partial credit. The last row removes that exploit: trained only on lists that
# do not come sorted, the model no longer gets worse, and the share of exactly sorted
# training samples (16 a step, so noisy) reaches 0.3 to 0.6 in some of the last steps
# against 0 to 0.1 in the first ones; but 30 steps do not yet move the held-out accuracy
# beyond its noise: the partial credit still pays the model for the right numbers in the
# wrong order. Remove that second exploit too, weight 0 on the partial credit so that only
# your verifier pays, and the held-out accuracy rises beyond its noise for the first time
# (last two rows): the reward is sparser (45% of the groups have no spread, against none
# with the partial credit on the same lists),
# but what it pays for is exactly the task. The cell below runs that fix. Other ways to
# try: give nothing to an answer identical to an unsorted input, train longer, or start
# from a model whose sampled attempts beat copying. And judge every change by the held-out
# accuracy, never by the training reward alone.

# %%
# The fix: training lists that do not come sorted, and only your verifier pays.
unsorted_train = sort_train.filter(lambda row: row["question"].removeprefix("Sort: ") != row["answer"])
print(f"{len(sort_train) - len(unsorted_train)} of {len(sort_train)} training lists came sorted; dropped")
sort_policy, sort_tokenizer = load_policy("smollm2-135m")  # start again from the base model
fixed_config = replace(sort_config, reward_weights=[0.0, 1.0], output_dir=str(OUTPUT / "11_capstone_sorting_fixed"))
sort_trainer = Trainer(fixed_config, [sorting.sorting_reward, sorted_exactly], unsorted_train, sort_policy,
                       sort_tokenizer, progress=not fast_mode())
fixed_history = sort_trainer.train()
fixed_after = sorted_correct()  # the same held-out lists, greedy, by the new trainer's policy
lift, low, high = lift_interval(sort_before, fixed_after)
print(f"before {format_accuracy(sum(sort_before), n_sort)}\nafter  {format_accuracy(sum(fixed_after), n_sort)}\n"
      f"lift   {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]; "
      + ("beyond its noise (the interval excludes 0)" if low > 0 or high < 0 else "within its noise")
      + (f" ({len(fixed_history)} steps in fast mode; full mode measured +8.5 [+1.2, +15.8])" if fast_mode() else ""))

# %% [markdown]
# ## 9. The same run with TRL's `GRPOTrainer`
#
# `course_lib` follows TRL's names and defaults, so the configuration converts
# (`config.to_trl_grpo_config()`), the dataset is the same, the reward functions have the
# same signature, and the model is a path (`resolve_model_path` gives the folder of an
# embedded model). On a CPU the cell turns off TRL's vLLM and bf16 (TRL's vLLM modes need a GPU).
# The cell runs in full mode or on a GPU; in fast mode it only prints what it would do.

# %%
from course_lib.models import resolve_model_path

RUN_TRL = not fast_mode() or torch.cuda.is_available()
# TRL's vLLM needs a GPU (a server or colocated mode), so on a CPU TRL generates with HF, in float32.
on_gpu = torch.cuda.is_available()
trl_args = config.to_trl_grpo_config(output_dir=str(OUTPUT / "11_capstone_trl"), report_to="none",
                                     log_completions=False, **({} if on_gpu else {"use_vllm": False, "bf16": False}))
print(f"TRL GRPOConfig: num_generations={trl_args.num_generations}, loss_type={trl_args.loss_type}, "
      f"beta={trl_args.beta}, bf16={trl_args.bf16}, max_steps={trl_args.max_steps}")
if RUN_TRL:
    from trl import GRPOTrainer

    peft_config = None
    if config.use_lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                 target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
    trl_trainer = GRPOTrainer(model=str(resolve_model_path(MODEL)), reward_funcs=reward_funcs, args=trl_args,
                              train_dataset=train_prompts, processing_class=tokenizer, peft_config=peft_config)
    trl_trainer.train()
    trl_history = [row for row in trl_trainer.state.log_history if "reward" in row]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([r["step"] for r in history], [r["reward"] for r in history], label="course_lib Trainer")
    ax.plot([r["step"] for r in trl_history], [r["reward"] for r in trl_history], label="TRL GRPOTrainer")
    ax.set(xlabel="step", ylabel="reward", title="Same config, two trainers")
    ax.legend()
    plt.show()
else:
    print("fast mode on a CPU: TRL's run is skipped (unset COURSE_FAST to run it).")

# %% [markdown]
# ## 10. On a GPU: Unsloth and vLLM
#
# Generation dominates the cost of GRPO (lesson 10), so on a GPU the rollouts go to vLLM.
# Two ways, both guarded so that they only run where a CUDA GPU is present:
#
# - **Unsloth** loads the model with `fast_inference=True`, which starts a vLLM engine
#   that shares the GPU memory with training, and patches TRL's `GRPOTrainer`; its
#   memory-saving tricks are what lets a small GPU train a reasoning model.
# - **`course_lib`'s own trainer** with `engine="vllm"`: the same `Trainer`, with the
#   rollouts generated by a colocated vLLM engine and corrected with truncated importance
#   sampling (lesson 10).
#
# On a small GPU run one of the two per session (restart the runtime in between): each
# starts its own vLLM engine. If Unsloth's GRPO fails to import locally, installing
# `diffusers` and the latest vLLM usually fixes it. Unsloth's guide puts the floor at
# about 5 GB of VRAM to train your own reasoning model up to 1.5B parameters, and 15 GB
# for models up to 17B (Llama 3.1 8B, Phi-4 14B, Mistral 7B, Qwen2.5 7B).

# %%
if torch.cuda.is_available() and importlib.util.find_spec("unsloth") is not None:
    from unsloth import FastLanguageModel  # import before trl: Unsloth patches it
    from trl import GRPOTrainer

    fast_model, fast_tokenizer = FastLanguageModel.from_pretrained(
        model_name="unsloth/Qwen2.5-1.5B-Instruct",  # >= 1.5B parameters for proper thinking tokens
        max_seq_length=1024,
        load_in_4bit=True,          # QLoRA
        fast_inference=True,        # vLLM inside Unsloth for the rollouts
        max_lora_rank=16,
        gpu_memory_utilization=0.5,
    )
    fast_model = FastLanguageModel.get_peft_model(
        fast_model, r=16, lora_alpha=16, use_gradient_checkpointing="unsloth", random_state=0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    print(fast_model.fast_generate(["What is 12 + 7?"])[0].outputs[0].text)
    unsloth_args = config.to_trl_grpo_config(output_dir=str(OUTPUT / "11_capstone_unsloth"), use_vllm=True,
                                             max_steps=scaled(5, 300), report_to="none")
    tagged = get_task("arithmetic-tagged", split="train", n=scaled(64, 2000), seed=0)
    GRPOTrainer(model=fast_model, processing_class=fast_tokenizer, args=unsloth_args, train_dataset=tagged,
                reward_funcs=[correctness_reward, answer_tag_format_reward, tidy_rubric]).train()
else:
    print("Unsloth needs a CUDA GPU, vLLM and Unsloth (README 'On Colab': python -m course_lib.colab --gpu "
          "--unsloth): skipped here.")

# %%
if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
    gpu_policy, gpu_tokenizer = load_policy(MODEL, device="cuda")
    gpu_config = replace(config, engine="vllm", output_dir=str(OUTPUT / "11_capstone_vllm"),
                         max_steps=scaled(5, 300), vllm_gpu_memory_utilization=0.3)
    gpu_history = Trainer(gpu_config, reward_funcs, train_prompts, gpu_policy, gpu_tokenizer,
                          progress=False).train()
    display(plot_training_history(gpu_history, keys=["reward", "kl", "sampling/importance_sampling_ratio/mean"],
                                  title="course_lib Trainer, vLLM rollouts on the GPU"))
else:
    print("No CUDA GPU with vLLM here: the vLLM-on-GPU run is skipped (lesson 10 runs vLLM on the CPU).")

# %% [markdown]
# ## 11. What to expect on real tasks
#
# The tiny model learns addition in minutes because it was trained for it. Real tasks on
# real models are slower. Unsloth's GRPO guide gives the rules of thumb below; they are
# one team's experience with its own notebooks, not measurements of this course nor a
# consensus of the field (other recipes differ, e.g. on model size and step counts):
#
# - **The reward rises with the number of steps**, but slowly: wait for **at least ~300
#   steps** before judging a run. Decent results usually take **12 hours or more** of
#   training, and some runs need 1,000 steps or more; you can stop whenever you like.
# - **Steps and epochs.** When each step takes one prompt (as in Unsloth's notebooks),
#   300 rows make 300 steps, and 900 steps for 3 epochs. If too many groups come back
#   all-wrong, raise `num_generations` from 8 to 16.
# - **Data**: at least **500 rows** for the best results; even 10 rows can work. GRPO
#   needs no answers to imitate, only prompts and a good reward function.
# - **Model size**: GRPO works best from about **1.5B parameters** upward; smaller models
#   may never produce proper thinking tokens. An instruct model is the easier start; a
#   base model works too (DeepSeek-R1-Zero was trained from its base model) once you give
#   it a chat template or a plain prompt format.
# - **No reward at all?** Check the two usual suspects: too few training steps, and a
#   reward function or verifier that does not work (test it on hand-written completions,
#   as in section 2). A better-shaped reward (partial credit, as in exercise 2) gives
#   results sooner and more often than a bare right/wrong.
# - **Continuous fine-tuning**: GRPO can run in the background indefinitely, picking up
#   from its last checkpoint.
# - **The "aha moment"** of DeepSeek-R1, where the model learns to re-examine its own
#   reasoning, was reproduced with Qwen2.5 (3B), which first took two A100 GPUs (160 GB
#   of VRAM); with Unsloth's memory savings the same experiment fits a GPU with about
#   5 GB. In one of Unsloth's tests, Phi-4 trained for only 100 GRPO steps already wrote
#   its reasoning in thinking tokens, and got the answer right, where the model without
#   GRPO did not.

# %% [markdown]
# ## Questions
#
# 1. Your run on GSM8K shows `frac_reward_zero_std` near 1 for the first 50 steps, and
#    almost all rewards are 0. What would you check first, and which two settings could
#    give the model a signal to learn from?
# 2. The format reward rises to 1.0 within 100 steps while correctness stays flat. Is the
#    run failing? What does this pattern tell you about the weights of your rewards?
# 3. Your `sorting_reward` gives 0.4 to the right numbers in the wrong order. Could a
#    model exploit partial credit instead of learning to sort? How would you check for it
#    in the logged samples?
# 4. `epsilon_high=0.28` was set but every `clip_ratio` metric reads 0. Why, and which
#    setting would make the clip matter?
# 5. The same config gave different reward curves with `course_lib` and TRL. List three
#    legitimate reasons (none of them a bug) before suspecting one.

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("11", k)`
# prints the answer to question k (`show_answer("11")` prints them all). They are also in
# `notebooks/answers/11_capstone.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("11", 1)
