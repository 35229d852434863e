# %% [markdown]
# # Lesson 07 — The batch schedule: who generates what, and when the optimizer steps
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/07_batch_schedule.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 20 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# A GRPO trainer does two different things with batches: it **generates** completions
# (many at once, because generation is slow) and it **trains** on them (in micro-batches
# small enough for memory, accumulating gradients before each optimizer step). Six
# settings decide how the two interleave, and they interact in ways that surprise
# everybody at least once.
#
# In this lesson you will:
# 1. learn what each batch setting means and which ones to touch;
# 2. derive the formulas: effective batch, generation batch, optimizer steps per
#    generation, unique prompts per generation;
# 3. reproduce the four example tables of Unsloth's RL documentation step by step, with the
#    optimizer updates marked — and find the typo in the third one;
# 4. write the schedule generator yourself and check it against `course_lib.schedule`,
#    which the course's trainer follows.

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
# ## 1. The settings
#
# | setting | meaning |
# |---|---|
# | `per_device_train_batch_size` | completions per process in one **micro-step** (one forward + backward pass). Unsloth's documentation calls it *train_batch_size*: samples per process per step. |
# | `gradient_accumulation_steps` (also called gradient accumulation) | micro-steps whose gradients are summed before **one optimizer update** (the backward passes happen every micro-step; the update waits). |
# | `num_processes` | data-parallel training processes (GPUs, workers); each runs its own micro-batches. |
# | `num_generations` | completions sampled per prompt: the group size G of lesson 05. |
# | `steps_per_generation` | micro-steps served by one **generation batch**; a new batch is generated every `steps_per_generation` micro-steps. Defaults to `gradient_accumulation_steps`. |
# | `generation_batch_size` | completions generated at once (all processes). Mutually exclusive with `steps_per_generation`: each determines the other. |
#
# Advice worth following: `steps_per_generation` is confusing to play with. To change the
# batch size, change `per_device_train_batch_size` and `gradient_accumulation_steps`, and
# leave `steps_per_generation` at its default. Then one generation batch feeds exactly one
# optimizer step, and with `num_iterations=1` training stays on-policy (the ratio of
# lesson 05 is 1).
#
# Why would anyone raise it, then? To **amortise generation**. Sampling is usually the
# slow part of a step, and an inference engine such as vLLM (lesson 10) is most efficient
# on one large batch. With `steps_per_generation` a multiple of
# `gradient_accumulation_steps`, one large generation feeds several optimizer updates in a
# row, at the price of going off-policy from the second update on: the clip and the old
# log-probs of lesson 06 then matter, as with `num_iterations > 1` (which reuses the same
# completions instead of cutting a larger batch).
#
# One more rule concerns small batches. A generation batch must hold **whole groups**:
# G divides the **generation batch** (per-device batch × processes ×
# `steps_per_generation`), not the per-device batch. So `per_device_train_batch_size=1`
# with `gradient_accumulation_steps=8` and G = 8 is fine: the generation batch is
# 1 × 8 = 8 completions, one group, consumed one completion per micro-step. What fails
# is a generation batch smaller than a group: per-device 1 with accumulation 1 and G = 8.
# Unsloth's notebooks then raise the per-device batch to `num_generations` and print a
# notice; TRL 1.16 and `course_lib` refuse the setting with an error instead, so you
# choose the fix yourself. The cell asks both libraries:

# %%
import warnings

import trl

from course_lib.algos import GRPOConfig

messages = {}
for per_device, accumulation in ((1, 8), (1, 1), (8, 1)):
    setting = f"per_device={per_device}, accumulation={accumulation}, G=8"
    answers = []
    for name, make in (("course_lib", lambda: GRPOConfig(per_device_train_batch_size=per_device, num_generations=8,
                                                          gradient_accumulation_steps=accumulation)),
                       ("TRL 1.16", lambda: trl.GRPOConfig(output_dir="unused", use_cpu=True, num_generations=8,
                                                            per_device_train_batch_size=per_device,
                                                            gradient_accumulation_steps=accumulation))):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                make()
            answers.append(f"{name} accepts")
        except ValueError as error:
            answers.append(f"{name} refuses")
            messages[name] = str(error)
    print(f"{setting:<34}: generation batch {per_device * accumulation:>2} -> {', '.join(answers)}")
for name, message in messages.items():
    print(f"{name}'s message: {message}")

# %% [markdown]
# ## 2. The formulas
#
# $$\text{effective batch} = \text{per\_device} \times \text{grad\_accum} \times \text{num\_processes}$$
# — the completions whose gradients make one optimizer update (all processes, all
# micro-steps of the accumulation).
#
# $$\text{generation batch} = \text{per\_device} \times \text{num\_processes} \times \text{steps\_per\_generation}$$
# — the completions generated at once.
#
# $$\text{optimizer steps per generation} = \frac{\text{steps\_per\_generation} \times \text{num\_iterations}}{\text{grad\_accum}}
#   \qquad \text{(e.g. } 4 \times 1 / 2 = 2\text{)}$$
# — `num_iterations` (default 1, lesson 06) replays each generation batch that many times,
# so it multiplies the updates each batch feeds.
#
# $$\text{unique prompts per generation} = \frac{\text{generation batch}}{\text{num\_generations}}$$
#
# With the default `steps_per_generation = gradient_accumulation_steps` the generation
# batch *is* the effective batch, and some documentation writes the unique prompts as
# effective batch / num_generations; the two forms agree only in that default case.
# `course_lib.schedule` has one function per formula:

# %%
from course_lib.schedule import (
    effective_batch_size,
    generation_batch_size,
    optimizer_steps_per_generation,
    unique_prompts_per_generation,
)

per_device, accumulation, generations, steps = 3, 2, 3, 4  # Example 1 of the tables below
generation = generation_batch_size(per_device, steps)
print("effective batch                :", effective_batch_size(per_device, accumulation))
print("generation batch               :", generation)
print("optimizer steps per generation :", optimizer_steps_per_generation(steps, accumulation, num_iterations=1),
      "(num_iterations=1);", optimizer_steps_per_generation(steps, accumulation, num_iterations=2), "with num_iterations=2")
print("unique prompts per generation  :", unique_prompts_per_generation(generation, generations))

# %% [markdown]
# How long is an epoch? With the default `steps_per_generation`, each generation batch
# holds effective batch / G prompts and feeds `num_iterations` optimizer steps. A common
# single-GPU setup generates 8 answers for **one** prompt per step
# (`per_device_train_batch_size = num_generations = 8`, `gradient_accumulation_steps = 1`):
# then a dataset of 300 rows is 300 training steps per epoch, and 900 steps for 3 epochs.
# At that per-device batch `num_generations` cannot grow to 16: a generation batch of 8
# completions cannot hold a group of 16, and the configuration is refused. With
# `per_device_train_batch_size = 16`, raising G from 8 to 16 halves the prompts per step
# (2 to 1), so it doubles the steps per epoch (150 to 300); `num_iterations = 2` doubles
# them too, without seeing more prompts. The cell checks each case with
# `course_lib.schedule`:

# %%
for rows, epochs, per_device, generations, iterations in (
        (300, 1, 8, 8, 1), (300, 3, 8, 8, 1), (300, 1, 8, 16, 1), (300, 1, 16, 8, 1), (300, 1, 16, 16, 1),
        (300, 1, 8, 8, 2)):
    setting = f"{rows} rows x {epochs} epoch(s), per_device={per_device:>2}, G={generations:>2}, iterations={iterations}"
    try:  # accumulation 1 and the default steps_per_generation = accumulation = 1
        prompts = unique_prompts_per_generation(generation_batch_size(per_device, 1), generations)
    except ValueError as error:
        print(f"{setting}: refused ({str(error).split(',')[0]})")
        continue
    updates = optimizer_steps_per_generation(1, 1, num_iterations=iterations)
    print(f"{setting}: {prompts} prompt(s) per generation, {updates:.0f} update(s) each -> "
          f"{rows * epochs // prompts * updates:.0f} optimizer steps")

# %% [markdown]
# ## Exercise 1 — the batch arithmetic
#
# Open `exercises/ex07_batch_schedule.py` and implement `batch_arithmetic(...)`: resolve
# `steps_per_generation` / `generation_batch_size` as TRL does and return the formulas as
# a dict.

# %%
from course_lib.checks import ex07
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex07_batch_schedule")
feedback(ex07.check_batch_arithmetic, ex.batch_arithmetic);

# %% [markdown]
# ## 3. The schedule, step by step
#
# One **generation cycle**:
#
# 1. take generation batch / G new prompts and repeat each G times in a row (prompt-major:
#    `[0,0,0, 1,1,1, ...]`);
# 2. generate and score all those completions;
# 3. cut them into `steps_per_generation` micro-batches of `per_device_train_batch_size`
#    (TRL 1.16 first **shuffles** the completions of the generation batch, each process its
#    own slice, with `torch.randperm`; the tables below keep them in order so that they stay
#    readable, `schedule_table(..., shuffle_seed=0)` shows a shuffled cut, and
#    `course_lib.trainer` does not shuffle, so its micro-batches match the tables). The
#    shuffle changes nothing for a loss that is a mean over completions or over the whole
#    generation batch, but it does for `loss_type="bnpo"`, which averages over the tokens
#    of each micro-batch: with TRL, which completions share a micro-batch is random;
# 4. train on one micro-batch per micro-step, and step the optimizer after every
#    `gradient_accumulation_steps` micro-steps (counted from the start of training).
#
# `course_lib.schedule.schedule_table` lists the micro-steps; `format_schedule` prints them
# like the tables of Unsloth's RL documentation, one table per generation cycle (A, B, ...).
# Its four examples:
#
# **Example 1** — `per_device_train_batch_size=3`, `gradient_accumulation_steps=2`,
# `num_generations=3`, `steps_per_generation=4`. Each micro-batch is one prompt's group;
# the optimizer steps every two micro-steps, so **twice per generation** (4 / 2 = 2): the
# second update of each cycle uses completions sampled before the first update, slightly
# off-policy.

# %%
from IPython.display import display

from course_lib.schedule import format_schedule, schedule_table
from course_lib.widgets.schedule import SCHEDULE_PRESETS, plot_schedule, schedule_explorer

for name in SCHEDULE_PRESETS:
    print(name, SCHEDULE_PRESETS[name])
print()
print(format_schedule(schedule_table(**SCHEDULE_PRESETS["Example 1"], cycles=2)))

# %% [markdown]
# The same table as a picture: one column per micro-step, one row per completion slot,
# the number is the prompt; a red line and ▼ mark an optimizer step, a black line a new
# generation.

# %%
display(plot_schedule(schedule_table(**SCHEDULE_PRESETS["Example 1"]), SCHEDULE_PRESETS["Example 1"],
                      title="Example 1"))

# %% [markdown]
# **Example 2** — the same, but `gradient_accumulation_steps=4`: the four micro-steps of a
# cycle accumulate into **one** update (4 / 4 = 1). This is the default relation
# (`steps_per_generation == gradient_accumulation_steps`): one generation, one update,
# fully on-policy.

# %%
print(format_schedule(schedule_table(**SCHEDULE_PRESETS["Example 2"])))
display(plot_schedule(schedule_table(**SCHEDULE_PRESETS["Example 2"]), SCHEDULE_PRESETS["Example 2"],
                      title="Example 2"))

# %% [markdown]
# **Example 3** — `num_generations=4` with micro-batches of 3. A group no longer fits in a
# micro-batch: groups straddle micro-steps. That is fine, because the advantages are
# computed on the whole generation batch *before* it is cut (lesson 05), so a completion
# carries its group's statistics into whichever micro-batch it lands in.
#
# The documentation prints cycle A of this example as `[0,0,0] [0,1,1] [1,1,3] [3,3,3]`. Count the
# completions per prompt: every prompt must appear exactly `num_generations` = 4 times, and
# 4 micro-batches × 3 completions = 12 completions = **3** prompts, numbered 0, 1, 2.
# In the printed table prompt 2 never appears and prompt 3 appears 4 times: the `3` in
# the third micro-batch and the last one should read `2`. (It then numbers cycle B
# from 4; with three prompts per cycle it starts at 3 — the labels are only names, but each
# one must still appear 4 times.)

# %%
from collections import Counter

printed_cycle_a = [[0, 0, 0], [0, 1, 1], [1, 1, 3], [3, 3, 3]]  # as the documentation prints it
rows = schedule_table(**SCHEDULE_PRESETS["Example 3"], cycles=1)
print("documentation :", printed_cycle_a, "->", dict(Counter(p for batch in printed_cycle_a for p in batch)))
print("schedule_table:", [row.prompts for row in rows], "->", dict(Counter(p for row in rows for p in row.prompts)))
print("unique prompts per generation:", unique_prompts_per_generation(generation_batch_size(3, 4), 4))
print()
print(format_schedule(schedule_table(**SCHEDULE_PRESETS["Example 3"])))
display(plot_schedule(schedule_table(**SCHEDULE_PRESETS["Example 3"]), SCHEDULE_PRESETS["Example 3"],
                      title="Example 3, corrected"))

# %% [markdown]
# **Example 4** — `per_device_train_batch_size=6`, `gradient_accumulation_steps=2`,
# `num_generations=3`, `steps_per_generation=2`: each micro-batch holds two whole groups,
# and one update per generation.

# %%
print(format_schedule(schedule_table(**SCHEDULE_PRESETS["Example 4"])))
display(plot_schedule(schedule_table(**SCHEDULE_PRESETS["Example 4"]), SCHEDULE_PRESETS["Example 4"],
                      title="Example 4"))

# %% [markdown]
# ### Explore
#
# Pick a preset or move the sliders: watch where the red update markers fall when
# `steps_per_generation` is not a multiple of `gradient_accumulation_steps` (an update then
# mixes completions of two generations), what `num_processes=2` does to the slots, and how
# `num_iterations=2` replays each cycle (lesson 06).

# %%
try:
    import ipywidgets  # noqa: F401

    display(schedule_explorer("Example 3"))
except ImportError:
    print("ipywidgets is not installed: the explorer is skipped (pip install ipywidgets).")

# %% [markdown]
# Two configurations the documentation does not show, printed with the same function. With two
# processes each process owns its own slice of the generation batch (separated by `|`),
# and the effective batch doubles. With accumulation 2 and 3 micro-steps per generation,
# the second update straddles two generation cycles.

# %%
print(format_schedule(schedule_table(per_device_train_batch_size=2, gradient_accumulation_steps=2, num_generations=4,
                                     num_processes=2, cycles=2)))
print()
print(format_schedule(schedule_table(per_device_train_batch_size=2, gradient_accumulation_steps=2, num_generations=2,
                                     steps_per_generation=3, cycles=2)))

# %% [markdown]
# ## Exercise 2 — the schedule generator
#
# Implement `micro_batches(per_device_train_batch_size, gradient_accumulation_steps,
# num_generations, steps_per_generation, cycles)` in the same file: the prompt indices of
# every micro-batch and whether the optimizer steps after it. The check compares your
# table with the documentation's examples and with `schedule_table`.

# %%
ex = load_exercise("ex07_batch_schedule")
feedback(ex07.check_micro_batches, ex.micro_batches);

# %% [markdown]
# ## 4. The trainer follows the table
#
# `course_lib.trainer.Trainer` consumes batches in this exact order. Run it on the tiny
# model with Example 1's settings for four optimizer steps: the table says 4 steps = 8
# micro-steps = 2 generation cycles.

# %%
import os
from pathlib import Path

from course_lib.data import get_task
from course_lib.machine import scaled
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))
model, tokenizer = load_policy("tiny")
config = GRPOConfig(output_dir=str(OUTPUT / "07"), overwrite_output_dir=True, **SCHEDULE_PRESETS["Example 1"],
                    max_steps=scaled(4, 40), max_completion_length=8, learning_rate=1e-4, logging_steps=1, save_steps=0)
trainer = Trainer(config, get_reward_functions(["correctness_first_number_reward"]),
                  get_task("arithmetic", n=64, seed=0), model, tokenizer, progress=False)
history = trainer.train()
print(f"optimizer steps {trainer.step}, micro-steps {trainer.micro_step}, generation cycles {trainer.cycle}")
print("expected:", config.max_steps, "optimizer steps ->",
      config.max_steps * config.gradient_accumulation_steps, "micro-steps ->",
      config.max_steps / optimizer_steps_per_generation(config.effective_steps_per_generation,
                                                        config.gradient_accumulation_steps,
                                                        config.num_iterations), "generations")

# %% [markdown]
# ## Questions
#
# 1. You run out of GPU memory with `per_device_train_batch_size=16`,
#    `gradient_accumulation_steps=1`, `num_generations=8`. Which settings do you change to
#    keep the same effective batch and the same number of prompts per update?
# 2. In Example 1 the second update of each cycle is computed on completions sampled
#    before the first update. Which GRPO settings of lesson 06 exist to handle exactly
#    that, and why are they inactive in Example 2?
# 3. In Example 3 a group is split across micro-steps. Why does that not change its
#    advantages? Would it matter for `loss_type="bnpo"` (lesson 06)?
# 4. Two GPUs, `per_device_train_batch_size=4`, `gradient_accumulation_steps=4`,
#    `num_generations=16`: how many prompts does one generation cycle see, and how many
#    optimizer steps does a 1,000-row dataset take per epoch?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("07", k)`
# prints the answer to question k (`show_answer("07")` prints them all). They are also in
# `notebooks/answers/07_batch_schedule.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("07", 1)
