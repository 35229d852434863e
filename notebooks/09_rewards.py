# %% [markdown]
# # Lesson 09 — Rewards and verifiers
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/09_rewards.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 20 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load. The judge's verdicts and the two
# training runs of sections 12-13 are replayed from files the benchmarks wrote, so no run waits
# on them.*
#
# GRPO and RLOO need only two things besides the model: prompts and a **reward function**.
# The algorithm then maximizes whatever that function measures — including its mistakes.
# This lesson is about writing rewards that measure what you mean.
#
# In this lesson you will:
# 1. tell a **verifier** (right or wrong?) from a **reward function** (how many points?),
#    and write rule-based rewards for **verifiable tasks** (RLVR);
# 2. write **format rewards** for `<think>…</think><answer>…</answer>` and meet the regex
#    pitfalls (`re.DOTALL`, `match` vs `search`, anchors), with partial credit;
# 3. see why "longer is better" is a bad **length reward** and what an ideal length does;
# 4. use the **GSM8K reward family** (correctness 2.0, integer 0.5, strict and soft format
#    0.5, XML count 0.125 per tag) and **proximity rewards** (9 for 10 beats 3);
# 5. build a **rubric** of small verifiable rewards and weigh it with `reward_weights`,
#    knowing TRL's rules for `None` and NaN;
# 6. run **model-written code** safely: time and memory limits, no network, a temporary
#    directory;
# 7. check answers with **answer equivalence** (`math-verify`) where the course's number rules
#    stop, and keep the rules where they are stricter;
# 8. use a model as the **judge** (a rubric score, or a RULER-style ranking of each group) and
#    measure how far it agrees with a verifier before trusting it;
# 9. watch a **reward hack take** (training reward up 1,000-fold, held-out accuracy to 0), and the
#    fixed reward learn;
# 10. **probe a reward before training** with degenerate completions, which flags that hack in a
#    second.

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
import re
import warnings

from IPython.display import display

from course_lib.machine import fast_mode

print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. Verifier or reward function?
#
# The two words are often used interchangeably, and in practice they work together, but
# they do different jobs:
#
# | | verifier | reward function |
# |---|---|---|
# | answers | *is it correct?* — yes or no | *how good is it?* — a number |
# | example | "5" for "2 + 2" → **wrong** (the answer is 4) | wrong → −1 or −2, right → +1 or +2 |
# | can also | run the code it is given (Python) and check logic, syntax and results without a human | penalize things that are not correctness: excessive length, poor readability |
#
# A reward function may call a verifier, but need not: a length penalty verifies nothing.
# **Rule-based rewards for verifiable tasks** — RL with verifiable rewards, RLVR — are
# cheap and transparent, but not hack-proof (section 5 scores a bare "72" at 2.5 points,
# Question 5 games unit tests, lesson 11 §8 shows a policy gaming a reward): maths answers
# can be checked (2 + 2 = 4), code can be run against tests. Where answers cannot be
# checked, the reward is *learned* from human preferences instead: lesson 04 §10 trains
# such a reward model and tests whether PPO over-optimises it. A verifier is also an
# evaluation tool: with k samples per problem it gives pass@k (solved if any sample is
# right) and maj@k (the majority answer), which lesson 11 §7 measures. Designing verifiable rewards for other tasks is harder, which is why most
# examples are maths or code.
#
# The course's reward functions all have TRL's signature: the batch's `prompts` and
# `completions` (strings, or lists of chat messages) and **every dataset column by name**,
# returning one float — or `None` — per completion:

# %%
from course_lib.data import get_task
from course_lib.rewards import completion_text, correctness_reward, extract_last_number, same_answer

task = get_task("arithmetic", n=4, seed=1)
print(task.column_names, "->", task[0]["question"], "answer:", task[0]["answer"])


def problem_reward(prompts, completions, answer, **kwargs):
    """1.0 if the last number of the completion equals the `answer` column, else 0.0."""
    rewards = []
    for completion, reference in zip(completions, answer):
        predicted = extract_last_number(completion_text(completion))  # None when there is no number
        rewards.append(1.0 if same_answer(predicted, reference) else 0.0)
    return rewards


completions = ["The sum is " + task[0]["answer"], "I think 12", "no idea", "<answer>" + task[0]["answer"] + "</answer>"]
print(problem_reward(task["prompt"], completions, answer=[task[0]["answer"]] * 4))
print(correctness_reward(prompts=task["prompt"], completions=completions, answer=[task[0]["answer"]] * 4))

# %% [markdown]
# The column is named `answer` in our datasets, so the function takes a parameter named
# `answer` (a seed example calls it `answers` — any name works if it matches the column).
# `correctness_reward` from `course_lib.rewards` reads only the `<answer>` tag, so the
# completion without tags gets 0 even though its number is right: **what you extract is
# part of the reward's definition.**
#
# Two habits the quick examples skip. A bare `try: ... except: reward 0` hides every bug
# in your parser as "wrong answer" — the run trains on garbage and looks merely slow.
# And "a small reward when parsing fails" should be an explicit, named case (`None`
# below), not whatever the exception path does.

# %% [markdown]
# ## 2. Extracting the answer
#
# Every verifier starts by reading the model's answer out of free text. The rule here:
# the **last** `<answer>…</answer>` pair if there is one (a model may mention the tags
# while reasoning), otherwise the **last** number.
#
# The exercise's number rule, `-?\d+(\.\d+)?`, is deliberately simple: it reads "1,000" as
# "000". `course_lib.rewards` reads thousands commas and exponents, but neither
# recognises fractions (`3/4`), words or LaTeX (`\frac{3}{4}`, `\boxed{}`): for
# competition maths, a verifier also needs *answer equivalence* (a symbolic checker such as
# the `math_verify` package, section 11), or it marks right answers wrong. Do not copy a weaker
# extractor into a real reward.
#
# ### Exercise 1 — `extract_answer(text)`
#
# Open `exercises/ex09_rewards.py`. The check includes a tag whose content spans lines.

# %%
from course_lib.checks import ex09
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex09_rewards")
feedback(ex09.check_extract_answer, ex.extract_answer);

# %% [markdown]
# ## 3. Format rewards
#
# DeepSeek-R1 rewarded two things: the right answer and the right *format*, reasoning in
# `<think>` tags followed by the answer. A strict version from the Hugging Face course
# matches the whole completion against
#
# ```text
# ^<think>.*?</think><answer>.*?</answer>$
# ```
#
# Three pitfalls hide in that one line:
#
# - **`.` does not match a newline** unless you pass `re.DOTALL`. Reasoning has newlines,
#   so the pattern rejects exactly the completions you want;
# - **`re.match` anchors at the start only**; `$` matches at the end *or before a final
#   newline*. Use `re.fullmatch` to mean "the whole text";
# - `.*?` happily spans a **second** `<think>` or `<answer>` block, so two answers in a row
#   still pass. The course's regexes forbid nested tags inside a block.

# %%
from course_lib.rewards import format_reward as strict_format_reward
from course_lib.rewards import think_answer_format_reward

samples = [
    "<think>2 + 2 is two more than 2.</think><answer>4</answer>",
    "<think>Two plus two.\nThat makes four.</think><answer>4</answer>",      # multi-line reasoning
    "<think>ok</think><answer>4</answer>\n",                                  # a trailing newline
    "<think>a</think><answer>3</answer><think>b</think><answer>4</answer>",    # two answers
    "Let me think. <think>Two and two make four, I am sure.</think>\n<answer>4</answer>",
]
naive = re.compile(r"^<think>.*?</think><answer>.*?</answer>$")
print(f"{'naive re.match':>16} {'strict':>7} {'partial':>8}   completion")
strict = strict_format_reward(completions=samples)
partial = think_answer_format_reward(completions=samples)
for text, s, p in zip(samples, strict, partial):
    print(f"{float(bool(naive.match(text))):>16} {s:>7} {p:>8}   {text!r:.70}")

# %% [markdown]
# Read the rows: the naive pattern rejects the multi-line reasoning (no `re.DOTALL`),
# accepts a trailing newline (`$`), and accepts two answers. The strict course version
# rejects all of those, and anything before `<think>`.
#
# (The library calls the strict version `format_reward`; it is imported here as
# `strict_format_reward`, so that it is not confused with the exercise below.)
#
# The **partial-credit** variant (third column) searches anywhere in the text, allows
# whitespace between the blocks, and grades the content: **1.0** when the reasoning has
# more than 20 characters and the answer is not empty, **0.5** for the right tags with
# thin content, **0.0** without the pattern. Partial credit gives the model a gradient
# towards the format before it masters it.
#
# ### Exercise 2 — `partial_format_reward(completions)`
#
# Write the partial-credit version (the library's `think_answer_format_reward`).

# %%
ex = load_exercise("ex09_rewards")
feedback(ex09.check_partial_format_reward, ex.partial_format_reward);

# %% [markdown]
# ## 4. Length rewards
#
# The simplest reward of all rewards longer completions: `float(len(completion))`. The
# model will happily oblige — with padding, repetition, rambling. Length alone is never
# the goal, so an unbounded length reward is a reward hack waiting to happen.
#
# A bounded version pulls towards an **ideal length**: `−|20 − len(completion)|`, zero at
# 20 and one point off per unit too short *or* too long. (The snippet says "tokens" but
# counts characters with `len` of a string; `length_reward(unit="tokens")` counts the
# token ids TRL passes to every reward function.)

# %%
import matplotlib.pyplot as plt

from course_lib.rewards import length_reward

ideal_20 = length_reward(ideal_length=20)
texts = ["4", "The answer is 4.", "Two plus two is four, 4.", "Well " * 12 + "4"]
print([(len(t), r) for t, r in zip(texts, ideal_20(completions=texts))])

lengths = list(range(0, 61))
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.plot(lengths, lengths, label="len(completion): longer is better", color="tab:red")
ax.plot(lengths, ideal_20(completions=["x" * n for n in lengths]), label="-|20 - len|: ideal length 20",
        color="tab:green")
ax.axvline(20, color="0.6", linestyle=":")
ax.set(xlabel="completion length (characters)", ylabel="reward", title="Two length rewards")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# A third length reward targets the answers that hit the budget. A completion cut at
# `max_completion_length` is scored as if it were finished, which punishes a reasoning
# chain for being long rather than wrong. DAPO's **soft overlong punishment** (Yu et al.
# 2025, eq. 13) is 0 up to `L_max − L_cache` tokens, then falls linearly to −1 at the
# budget, and is −1 beyond it: a warning zone instead of a cliff. It counts tokens
# (`completion_ids`), and gives the same values as TRL 1.16's
# `trl.rewards.get_soft_overlong_punishment`. Lesson 13 §6 uses it together with DAPO's
# other remedy, **dynamic sampling** (refilling the batch with groups whose rewards
# differ), on a run where the symptoms they cure appear.

# %%
from course_lib.rewards import soft_overlong_punishment

overlong = soft_overlong_punishment(max_completion_len=20, soft_punish_cache=5)
token_counts = [10, 15, 16, 18, 20, 21]
print("tokens:", token_counts)
print("reward:", overlong(completions=[""] * len(token_counts), completion_ids=[[0] * n for n in token_counts]))

# %% [markdown]
# ## 5. The GSM8K reward family
#
# Most open GRPO recipes for GSM8K grade an XML layout, `<reasoning>…</reasoning>` then
# `<answer>…</answer>`, with five small rewards that the trainer adds up (maximum 4.0).
# The set was shared by @willccbb and is reused in Unsloth's notebooks; it is popular and
# works well:
#
# | function | score | rewards |
# |---|---|---|
# | `gsm8k_correctness_reward` | 2.0 | the extracted answer equals the reference |
# | `gsm8k_int_reward` | 0.5 | the answer is an integer written in digits (GSM8K answers are) |
# | `gsm8k_strict_format_reward` | 0.5 | exactly the layout, newlines included |
# | `gsm8k_soft_format_reward` | 0.5 | the two blocks, any whitespace between them |
# | `gsm8k_xmlcount_reward` | ≤ 0.5 | +0.125 for each of the four tags present exactly once, minus 0.001 per character after `</answer>` |
#
# The course's versions fix two known bugs of the widely copied originals (no `re.DOTALL`
# in the format regexes; the trailing-text penalty charged twice) and say so in
# `course_lib/rewards/gsm8k.py`. The heatmap below is the **reward playground**: one row per
# completion, one column per function, the weighted total on the right.

# %%
from course_lib.rewards import get_reward_functions
from course_lib.widgets import plot_reward_breakdown

gsm8k = get_reward_functions(["gsm8k_correctness_reward", "gsm8k_int_reward", "gsm8k_strict_format_reward",
                              "gsm8k_soft_format_reward", "gsm8k_xmlcount_reward"])
gsm8k_completions = [
    "<reasoning>\n48 / 2 = 24 in May, 48 + 24 = 72.\n</reasoning>\n<answer>\n72\n</answer>\n",
    "<reasoning>48 + 24 = 72</reasoning> <answer>72</answer>",
    "<reasoning>\n48 + 24\n</reasoning>\n<answer>\n72\n</answer>\nHope this helps!",
    "<reasoning>\nhalf of 48 is 24\n</reasoning>\n<answer>\n70\n</answer>\n",
    "72",
    "The answer is seventy-two.",
]
display(plot_reward_breakdown(gsm8k_completions, gsm8k, answer="72"))

# %% [markdown]
# Notice the bare `"72"`: the family's lenient extraction treats a completion without
# `<answer>` as one big answer, so it still earns 2.0 + 0.5. Format rewards are what make
# the tags worth producing.
#
# ## 6. Proximity rewards: closer numbers score higher
#
# A binary correctness reward says nothing to a model that answered 9 when the answer is
# 10, nor to one that answered 3: both score 0. A **proximity reward** gives partial credit
# by distance, so 9 beats 3, and outliers are penalized. Unsloth's advanced GRPO notebook
# (Qwen3 base, with its own `<start_working_out>` tags and a short pre-finetuning so that
# the model learns the format first) uses one, with regex extraction of the number. The
# same two-stage recipe runs in this course: lesson 12 warms SmolLM2 up on scripted tool
# traces before GRPO and measures each stage, and lesson 14 puts SFT and GRPO side by side
# at equal compute.
#
# ### Exercise 3 — `proximity_score(predicted, reference)`
#
# The course's shape: 1.0 for the exact answer; `max(−0.5, 1 − |x − y| / max(|y|, 1))`
# otherwise (relative distance, floored); −1.0 when there is no number. `course_lib.
# rewards.proximity_reward` wraps the same shape as a reward function.

# %%
ex = load_exercise("ex09_rewards")
feedback(ex09.check_proximity_score, ex.proximity_score);

# %%
from course_lib.rewards import proximity_score

predictions = [x / 2 for x in range(-10, 61)]
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.plot(predictions, [proximity_score(x, 10) for x in predictions], color="tab:blue")
for x in (9, 3):
    ax.plot([x], [proximity_score(x, 10)], "o", color="tab:blue")
    ax.annotate(f"{x} -> {proximity_score(x, 10):.1f}", (x, proximity_score(x, 10)), textcoords="offset points",
                xytext=(8, -12), fontsize=8)
ax.axhline(-1.0, color="tab:red", linestyle="--", label="no number at all: -1.0")
ax.set(xlabel="predicted number (reference 10)", ylabel="reward", title="Proximity reward")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 7. Rubrics: many small verifiable rewards
#
# One all-encompassing reward is hard to get right and gives the model a single, murky
# signal. A **rubric** — a set of small, checkable rewards — works better; OpenAI promotes
# the idea in its reinforcement fine-tuning (RFT) service, and it extends GRPO to tasks
# well beyond maths: e-mail automation, database queries, law, medicine. Two examples:
#
# **Arithmetic, "2 + 2"**: a number is detected → +1, no number → −1; the number is the
# right answer → +3, wrong → −3; the total is the sum.
#
# **E-mail replies**: contains the required keywords → +1; matches the ideal reply
# exactly → +1; too long → −1; includes the recipient's name → +1; has a signature block
# (phone, e-mail, address) → +1.

# %%
from course_lib.rewards import make_correctness_reward, number_reward, predicate_reward, rubric

arithmetic_rubric = rubric((1.0, number_reward),
                           (1.0, make_correctness_reward("last_number", correct=3.0, incorrect=-3.0)),
                           name="arithmetic_rubric")
answers = ["4", "5", "C", "cat", "I am sure it is 4"]
print("2 + 2 ->", dict(zip(answers, arithmetic_rubric(completions=answers, answer=["4"] * len(answers)))))

ideal_reply = "Hi Ana, the meeting moves to Friday at 10. Best, Sam | sam@example.com | +1 555 0100"
email_rubric = rubric(
    predicate_reward(lambda t: all(k in t.lower() for k in ("meeting", "friday")), name="keywords"),
    predicate_reward(lambda t: t.strip() == ideal_reply, name="exact_match"),
    (-1.0, predicate_reward(lambda t: len(t.split()) > 40, name="too_long")),
    predicate_reward(lambda t: "ana" in t.lower(), name="recipient_name"),
    predicate_reward(lambda t: bool(re.search(r"@\w+\.\w+|\+?\d[\d ]{6,}", t)), name="signature"),
    name="email_rubric")
replies = [ideal_reply, "Hi Ana, Friday at 10 for the meeting. Sam, sam@example.com",
           "Meeting is moved. " + "I wanted to explain at length why. " * 8, "ok"]
for reply, score in zip(replies, email_rubric(completions=replies)):
    print(f"{score:+.0f}  {reply[:70]!r}")

# %% [markdown]
# The ideal reply scores +4, the most this rubric gives (four bonuses, no penalty); the
# rambling one loses a point for length and earns nothing else.
#
# There is no single right way to design these. One practical route: paste a batch of
# your model's outputs into a strong model (GPT-4o, or a local Llama 3.1 8B) and ask it to
# draft rules such as "if the answer sounds too robotic, subtract 3 points"; then turn each
# rule into a small function you can test. Whatever the route, a badly designed reward
# can quietly make the model worse, so test every reward on hand-written completions
# before training.
#
# A rubric can be one reward function (as above: one column in the metrics) or several
# functions passed to the trainer separately, which logs each one under
# `rewards/<name>/mean` and weighs them with **`reward_weights`** (one weight per
# function, default all 1.0). The trainer's total is `Σ_f weight_f · reward_f`.
#
# ### Sum, then normalize, or normalize, then sum?
#
# By default (`multi_objective_aggregation="sum_then_normalize"`, TRL's and the course's)
# GRPO sums the weighted rewards first and then centres and scales the *total* within each
# group. A reward with a large spread then decides the advantages on its own, whatever
# the weights: a 0-to-100 style score drowns a 0/1 correctness check. GDPO (arXiv
# 2601.05242) proposes the other order, TRL 1.16's `"normalize_then_sum"`: centre and
# scale **each** function within the group, sum the normalized rewards with the weights,
# and normalize that sum once more over the batch. Each function then contributes on the
# same scale, and `reward_weights` mean what they say. The cell builds one group of four
# completions scored by correctness (0/1) and a style score (0 to 100) that disagrees with
# it, and computes both.

# %%
import torch

from course_lib.algos.grpo import group_advantages, multi_objective_advantages

correctness = torch.tensor([1.0, 1.0, 0.0, 0.0])
style = torch.tensor([20.0, 40.0, 90.0, 60.0])  # rewards the wrong answers' prose
weights = torch.tensor([1.0, 1.0])
summed_first = group_advantages(correctness + style, 4)
normalized_first, _ = multi_objective_advantages(torch.stack([correctness, style], 1), weights, 4)
print("completion:               1 (right)  2 (right)  3 (wrong)  4 (wrong)")
print("sum_then_normalize:      ", "  ".join(f"{a:+9.3f}" for a in summed_first.tolist()))
print("normalize_then_sum:      ", "  ".join(f"{a:+9.3f}" for a in normalized_first.tolist()))
print(f"mean advantage of the right answers: sum first {summed_first[:2].mean():+.3f}, "
      f"normalize first {normalized_first[:2].mean():+.3f}")

# %% [markdown]
# Summed first, the style score's spread (tens of points) swamps correctness (one
# point): both right answers get negative advantages. Normalized first, each function
# counts as one unit of spread: with equal weights correctness weighs as much as style,
# the right answers' mean advantage turns positive (the last line), and the ranking mixes
# both signals. Choose `normalize_then_sum` when your functions live on
# different scales and you want the weights to decide; keep the default when the total
# itself is what you mean to rank by.
#
# ## 8. `None`, NaN and the total: TRL's rules
#
# A reward function returns **`None`** for a completion it does not apply to — a code
# reward on a maths prompt, say. `None` becomes NaN, and the total is a **NaN-skipping**
# weighted sum: the functions that did apply decide. If **every** function returns `None`
# for a completion, it has no score at all: TRL warns and (since 1.16) gives it a NaN
# total, which the advantage step turns into advantage 0 — a 0 *reward* would instead drag
# its group's baseline down.

# %%
from course_lib.rewards import compute_rewards


def only_for_code(prompts, completions, **kwargs):
    """Applies only to completions with a code block; None elsewhere."""
    return [1.0 if "```" in completion_text(c) else None for c in completions]


def only_for_maths(prompts, completions, **kwargs):
    return [None if "```" in completion_text(c) or "poem" in completion_text(c) else 0.5 for c in completions]


batch = ["```python\nprint(4)\n```", "4", "a poem about spring"]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    per_func, total = compute_rewards([only_for_code, only_for_maths], [""] * 3, batch, weights=[2.0, 1.0])
print("per function (B, F):\n", per_func)
print("weighted total:", total)
print("warning:", caught[0].message.args[0].splitlines()[0] if caught else None)

# %% [markdown]
# ### Exercise 4 — `combine_rewards(per_func, weights)`
#
# Implement that total from the raw lists the functions return.

# %%
ex = load_exercise("ex09_rewards")
feedback(ex09.check_combine_rewards, ex.combine_rewards);

# %% [markdown]
# ## 9. Before training: does the reward separate the policy's own samples?
#
# A reward teaches only where it **differs within a group**: GRPO's advantage is the
# reward minus the group mean (lesson 05), so a reward that gives all G samples of a
# prompt the same score contributes nothing, however sensible it looks. The check worth
# keeping, before any training run: sample G completions per prompt from the policy you
# will train, score them with each candidate reward, and measure, per reward, the share
# of **silent groups** (zero spread: the `frac_reward_zero_std` of lesson 05, before the
# first step) and the mean spread within a group. Here: the tiny model, 16 arithmetic
# problems, G = 8 at temperature 1, and three rewards.

# %%
from course_lib.evaluation import greedy_completions
from course_lib.models import load_policy
from course_lib.rollout import SamplingConfig, make_engine
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
tiny, tokenizer = load_policy("tiny")
problems = get_task("arithmetic", split="test", n=16, seed=3)
G = 8
sampled = make_engine("hf", tiny, tokenizer).generate(list(problems["prompt"]), n=G,
                                                      sampling=SamplingConfig(max_tokens=6, temperature=1.0, seed=0))
names = ["correctness_last_number_reward", "proximity_reward", "number_reward"]
per_function, _ = compute_rewards(get_reward_functions(names), [p for p in problems["prompt"] for _ in range(G)],
                                  sampled.texts, {"answer": [a for a in problems["answer"] for _ in range(G)]})
spread = per_function.view(len(problems), G, len(names)).std(dim=1)  # (prompts, rewards), prompt-major rows
print(f"{'reward':<32} {'silent groups':>13} {'mean spread in a group':>23}")
for k, name in enumerate(names):
    print(f"{name:<32} {(spread[:, k] == 0).float().mean():>13.0%} {spread[:, k].mean():>23.3f}")
print("first problem:", problems["question"][0], "->", sampled.texts[:G], "reference", problems["answer"][0])

# %% [markdown]
# Read it as a forecast of the run (our run printed 31%, 0% and 100% silent groups). The
# correctness reward is silent wherever the model gets all eight samples right, or all
# eight wrong: only the other groups teach. The proximity reward also ranks the wrong
# answers (a near miss above a wild guess), so it speaks in every group: that is what
# partial credit buys, and also why it must stay small next to correctness (section 6).
# The number reward is silent in every group, because every sample of this model is
# already a number: it stops teaching once the format is learned. A reward silent on most groups of
# your policy means a run that spends its compute on nothing (raise the temperature or G,
# change the data, add partial credit; lesson 13 §6's dynamic sampling drops the silent
# groups instead). And when a reward *does* separate the samples, look at which samples
# it puts on top: that is where a reward hack shows first.
#
# The same three rewards on the greedy answer to six problems, as a heatmap:

# %%
greedy_problems = problems.select(range(6))
answers = greedy_completions(tiny, tokenizer, greedy_problems["prompt"], max_new_tokens=6)
for question, answer, reference in zip(greedy_problems["question"], answers, greedy_problems["answer"]):
    print(f"{question:<18} model: {answer!r:<8} reference: {reference}")
display(plot_reward_breakdown(answers, get_reward_functions(names), prompts=list(greedy_problems["question"]),
                              answer=list(greedy_problems["answer"])))

# %% [markdown]
# ## 10. Running model-written code safely
#
# A code verifier executes text that a policy wrote, thousands of times, including the
# policy's worst ideas: infinite loops, memory bombs, network calls, file writes, and
# reward hacks such as exiting with status 0 before the tests run. And once a policy is
# rewarded for passing tests, anything that makes tests pass is fair game to it.
#
# Where should the wall stand? A first idea is to guard inside Python: a PEP 578 *audit
# hook* that refuses `os.system`, sockets and writes outside a folder. It explains every
# refusal nicely, but it is no wall: the hook lives in the interpreter it guards, a
# subinterpreter starts without it, and Python code can rewrite the very functions it
# calls (swap `os.path.realpath.__code__` and every path looks harmless). Such escapes
# were found in an earlier version of this course's sandbox. So the wall is the
# **operating system's**: `course_lib.sandbox.run_python` starts each program under
# [bubblewrap](https://github.com/containers/bubblewrap) (the tool behind Flatpak), in new
# mount, PID, network and IPC namespaces, as the unprivileged user 65534, with a seccomp
# filter on dangerous system calls. Its file system is built from nothing: read-only
# Python and libraries, a private size-capped working folder, no `/etc`, no home, no
# project tree, no shell. On top come a **wall-clock kill**, **rlimits** (memory, CPU,
# file size, processes), and the audit hook as a polite second layer. Where bubblewrap
# cannot run (macOS, Windows, a Linux without it or without user namespaces), the sandbox
# *refuses* (`SandboxUnavailableError`, with the install command) rather than run model
# code unprotected: the cell below then prints that refusal instead of the table.

# %%
from course_lib.sandbox import SandboxUnavailableError, detect_isolation, run_python

SANDBOX = detect_isolation()
print("isolation on this machine:", SANDBOX.mode or "none")
hostile = {
    "a fine program": "print(sum(range(10)))",
    "an infinite loop": "while True:\n    pass",
    "a memory bomb": "block = bytearray(4 * 1024**3)",
    "a network call": "import socket\nsocket.create_connection(('example.com', 80))",
    "a write outside its folder": "open('/tmp/owned.txt', 'w').write('x')",
    "a shell command": "import os\nos.system('echo hi')",
    "hook off, then a shell": "import _xxsubinterpreters as si\n"
                              "si.run_string(si.create(), 'import os; print(os.system(\"echo hi\"))')",
    "hook off, then /etc": "import _xxsubinterpreters as si\n"
                           "si.run_string(si.create(), 'import os; print(os.listdir(\"/\"))')",
    "a file in its own folder": "open('notes.txt', 'w').write('ok')\nprint(open('notes.txt').read())",
}
try:
    for label, code in hostile.items():
        result = run_python(code, timeout_s=1.0, memory_mb=256)
        last_error = result.stderr.strip().splitlines()[-1][:60] if result.stderr.strip() else ""
        print(f"{label:<27} ok={result.ok!s:<5} stopped by={result.killed_reason!s:<8} "
              f"{result.stdout.strip()[:40]!r:42} {last_error}")
except SandboxUnavailableError as error:
    # No sandbox here: these programs are hostile on purpose, so none of them runs.
    print("The sandbox refused, as designed; none of the programs above ran.\n")
    print(error)

# %% [markdown]
# On a machine with the sandbox (the table above, not the refusal), the two "hook off"
# rows get past the audit hook, and then find nothing: `os.system`
# returns 32512, exit status 127 shifted left by 8 (there is no `/bin/sh` in the
# sandbox), and `/` holds only the sandbox's own folders. `tests/reliability/test_sandbox_escapes.py` runs every known escape attempt —
# both with and without the hook — and checks the host afterwards.

# %% [markdown]
# `code_execution_reward` turns this into a reward: the fraction of a row's tests that
# the completion's last ```` ```python ```` block passes. Every assertion of a test must
# report a value back after it ran, so `sys.exit(0)` cannot fake a pass. It returns `None`
# for rows without tests — not applicable, as in section 8.
#
# **Without the sandbox** (the refusal above), the cell below still shows the verifier,
# on the four programs written here for this lesson, with `isolation="process"`: each
# runs as an ordinary child process of this kernel, with the time and memory limits and
# the audit hook, but as *your* user, seeing *your* files. That is **not a security
# boundary**, only acceptable because you can read these four programs; never use it for
# text a model wrote.

# %%
from course_lib.rewards import code_execution_reward, make_code_execution_reward

programs = ["```python\ndef add(a, b):\n    return a + b\n```",
            "```python\ndef add(a, b):\n    return a - b\n```",
            "```python\nimport sys\nsys.exit(0)\n```",
            "I would write a function."]
tests = [["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]] * 4
if SANDBOX.available:
    print("in the sandbox:", code_execution_reward(completions=programs, tests=tests))
else:
    trusted_only = make_code_execution_reward(isolation="process")  # NOT a security boundary
    print("process-level isolation, this lesson's own programs only (not a security boundary):",
          trusted_only(completions=programs, tests=tests))

# %% [markdown]
# The verdict is computed *outside* the sandbox. For `assert add(2, 3) == 5` the child
# sends back only the value of `add(2, 3)` as plain data and the parent does the `==`:
# an object whose `__eq__` always answers True cannot pass, because only exact built-in
# types (`int`, `str`, lists of them...) cross the boundary.
#
# What is left? The kernel is shared with the host: a kernel exploit would break any
# namespace sandbox, which is why large RL runs put each program in gVisor or a
# microVM. And a verifier only checks what its tests ask: hard-coding the tests'
# answers is still a reward hack that no sandbox sees (Question 5).

# %% [markdown]
# ## 11. Answer equivalence: a maintained checker beside the course's rules
#
# The course's verifier reads plain numbers (`1,080`, `$72.00`, `1e3`) and nothing else. A
# model that writes `\boxed{72}`, `\frac{144}{2}` or "The answer is 72." is marked wrong
# although it is right. Hugging Face's [`math-verify`](https://github.com/huggingface/Math-Verify)
# (used by open-r1 and by TRL's `accuracy_reward`) parses both sides into SymPy and compares
# them. `course_lib.rewards.equivalence.equivalent` combines the two: the course's rule for
# plain numbers, with no tolerance (`18.0000001` is not 18; it also reads `1e3`, which
# `math-verify` does not), a refusal of hedged answers (`math-verify` takes the *last* formula
# of a text, so "19 or 18" passes for 18), and `math-verify` for the rest.
# `make_math_verify_reward()` is the same rule as a reward.
#
# The cell grades real GSM8K answers: for 20 test problems, the solution's own last sentence
# and the reference written nine other ways (three of them wrong). "course" is the correctness
# rewards' rule (the tag's content as a number, relative tolerance 1e-6; the last number of a
# sentence). `benchmarks/answer_equivalence.py` does it for 300 problems and prints every
# disagreement: our run found 1,802 disagreements in 3,000 answers, and the combination right on
# 2,995; the five it misses are last sentences that do not end with the answer.

# %%
import json
import sys
from pathlib import Path

from course_lib.rewards.equivalence import MATH_VERIFY_REQUIREMENT, equivalent, math_verify_available

if math_verify_available():
    sys.path.insert(0, str(Path(importlib.util.find_spec("course_lib").origin).parents[1] / "benchmarks"))
    from answer_equivalence import DATA, candidates, course_rule

    from course_lib.rewards.equivalence import math_verify_equal
    from course_lib.rewards.extract import extract_last_number

    if DATA.exists():
        solutions = [json.loads(line)["answer"] for line in DATA.read_text().splitlines()[:20]]
    else:  # a clone without the shared data folder: two GSM8K-style solutions written here
        solutions = ["She sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18",
                     "The house costs 80,000 + 50,000 = $<<80000+50000=130000>>130,000.\n#### 130000"]
    tally = {}
    for solution in solutions:
        reference, kinds = candidates(solution)
        for kind, (candidate, right) in kinds.items():
            read = extract_last_number(candidate) if kind == "last_line" else candidate
            three = (course_rule(kind, candidate, reference), math_verify_equal(candidate, reference),
                     equivalent(read, reference)[0])
            row = tally.setdefault(kind, [candidate, right, 0, 0, 0])
            for k, verdict in enumerate(three):
                row[2 + k] += verdict == right
    print(f"{len(solutions)} GSM8K problems; count of right verdicts per way of writing the answer")
    print(f"{'kind':<11} {'example':<34} {'truth':>6} {'course':>7} {'math-verify':>12} {'combined':>9}")
    for kind, (example, right, ours, theirs, both) in tally.items():
        print(f"{kind:<11} {example[:32]!r:<34} {'right' if right else 'wrong':>6} {ours:>7} {theirs:>12} {both:>9}")
else:
    print(f"math-verify is not installed here: pip install \"{MATH_VERIFY_REQUIREMENT}\" (pyproject.toml declares it)")

# %% [markdown]
# Read the columns. The course's rule misses every LaTeX, fraction, unit and sentence form
# (a reward built on it teaches the model one notation, whatever the prompt asked) and, with its
# float tolerance, accepts the rounding slip; `math-verify` accepts the hedge. Neither reads the last sentence perfectly: some
# GSM8K solutions end with a number that is not the answer. Keep the shipped rules where they
# are stricter, and say so in the reward's docstring.
#
# ## 12. An LLM as the judge
#
# Where no verifier exists (helpfulness, style, a proof's clarity), a model can grade the
# completions: "LLM-as-a-judge" (Zheng et al. 2023). `course_lib.judge` builds two judge
# rewards with TRL's signature from any model `load_policy` loads:
#
# - **pointwise**, `make_rubric_judge_reward(judge, rubric)`: the judge reads the rubric, the
#   question and one completion and answers a score from 0 to 10 (reward = score / 10);
# - **group-relative**, `make_group_judge_reward(judge, rubric)`: the judge reads the G completions
#   of a prompt together and ranks them (reward `1 - rank / (G - 1)`). This is the idea of OpenPipe
#   ART's RULER: GRPO uses only the differences *within* a group (lesson 05), so the judge need not
#   be calibrated across prompts, only able to compare answers to one question, which is easier.
#
# Judgments are cached by (prompt, completion, rubric) and sent in batches; a call that runs past
# `timeout_s` leaves the rest of the batch unscored; an unparsable reply is `None` (TRL's
# "unscorable", section 8), counted in `judge.stats`. In training each batch logs `judge/calls`,
# `judge/s`, `judge/unparsable` and `judge/cache_hits` into the history (TRL's `log_metric`).
#
# **Measure a judge before you train on it.** Here the judge is the embedded SmolLM2-135M-Instruct
# (the only chat model that runs offline on any laptop) and the answers are the tiny model's, 4
# samples for each of 12 held-out problems, with the verifier as the truth. The judgments were made
# once by `benchmarks/judge_agreement.py` (47 judge calls, 945 s on a busy 2-core CPU) and are
# replayed from its cache, so this cell loads no judge.

# %%
from course_lib.rewards.answers import is_correct
from course_lib.judge import (STORED_JUDGMENTS, Judge, agreement, held_out_answers, make_group_judge_reward,
                                      make_rubric_judge_reward, pairwise_order)

judge_prompts, judge_answers, references = held_out_answers(n=12, group=4)
verdicts = [is_correct(c, a) for c, a in zip(judge_answers, references)]
# The cache answers every judgment; a miss would ask this stand-in (an unparsable reply, counted), not a model.
judge = Judge(model=lambda prompts: ["(not in the cache)"] * len(prompts), cache_path=str(STORED_JUDGMENTS))
pointwise = make_rubric_judge_reward(judge)(prompts=judge_prompts, completions=judge_answers)
ranked = make_group_judge_reward(judge)(prompts=judge_prompts, completions=judge_answers)
stats = agreement(pointwise, verdicts)
order, pairs = pairwise_order(ranked, verdicts, 4)
print(f"judge: {judge.stats}")
print(f"pointwise: {stats['n']} answers scored ({stats['unscored']} unparsable), accuracy {stats['accuracy']:.2f}, "
      f"Cohen's kappa {stats['kappa']:.2f}; the judge said 'right' to {stats['judge_yes_rate']:.0%}, "
      f"the verifier to {stats['verifier_yes_rate']:.0%}")
print(f"group ranking: right answer above wrong in {order:.0%} of {pairs} (right, wrong) pairs (a coin flip: 50%)")
for question, answer, score, right in list(zip([p[-1]["content"] for p in judge_prompts], judge_answers, pointwise,
                                               verdicts))[:4]:
    print(f"  {question:<18} {answer!r:<8} judge {score}  verifier {'right' if right else 'wrong'}")

# %% [markdown]
# The small judge agrees with the verifier on 30% of the answers, exactly the share of right
# answers, because it calls every answer right: **Cohen's kappa is 0.0**, no better than chance
# (kappa = (p_o − p_e) / (1 − p_e) subtracts the agreement a rater gets by chance from its own
# rate of "yes"; accuracy alone would hide this). Its group rankings put the right answer first in
# about half of the pairs, a coin flip. A 135M-parameter model cannot do arithmetic, so it cannot
# judge it. That is the rule: **a judge must be much stronger at the task than the policy**
# (RULER's judges are large API models), and its agreement with a verifier or with people must be
# measured on held-out answers before a run. A weak judge is also a hackable reward: a policy
# learns what the judge likes (length, confidence, flattery), the same over-optimisation lesson 04
# §10 shows for a learned reward model. With a stronger judge, pass its name:
# `Judge("HuggingFaceTB/SmolLM2-1.7B-Instruct")`, or a callable that calls an API.
#
# ### Exercise 5 — `parse_ranking(reply, n)`
#
# Small judges write a ranking in many ways. Write the parser of the group judge.

# %%
ex = load_exercise("ex09_rewards")
feedback(ex09.check_parse_ranking, ex.parse_ranking);

# %% [markdown]
# ## 13. A reward hack that takes, and its fix
#
# A reward with partial credit by distance, written in a hurry:
#
# ```python
# score = max(-1.0, 1.0 - (y - x) / max(abs(y), 1.0))   # meant: abs(y - x)
# ```
#
# It looks right on the examples one tries (x = 9 for y = 10 gives 0.9) and is floored so that
# wild guesses do not dominate. But it forgets the absolute value: above the answer the score
# *grows* (x = 2y earns 2.0). `course_lib.rewards.flawed.closeness_reward` is that reward.
# `benchmarks/reward_hack.py` trained the tiny model with GRPO on it, and then on the verifier
# `correctness_first_number_reward`, with the tiny model's measured preset (200 steps of 32
# completions, learning rate 3e-5), and stored both histories; the cell plots them (rerun with
# `python benchmarks/reward_hack.py`, about 10 minutes on one thread).

# %%
from course_lib.doctor import diagnose
from course_lib.reward_hack import load_reward_hack

record = load_reward_hack()
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
for which, color in (("flawed", "tab:red"), ("fixed", "tab:green")):
    history = record[which]["history"]
    steps = [r["step"] for r in history if "reward" in r]
    axes[0].plot(steps, [r["reward"] for r in history if "reward" in r], color=color,
                 label=f"{which}: {record['settings']['rewards'][which].split(':')[-1]}")
    evals = [r for r in history if "eval/greedy_accuracy" in r]
    axes[1].plot([r["step"] for r in evals], [r["eval/greedy_accuracy"] for r in evals], "o-", color=color, label=which)
axes[0].set(yscale="symlog", xlabel="step", ylabel="training reward (symlog)", title="What the reward says")
axes[1].set(xlabel="step", ylabel="held-out greedy accuracy", title="What the model can do (50 problems)", ylim=(0, 1))
for ax in axes:
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
plt.show()
before = record["settings"]["greedy_accuracy_200_before"]
for which in ("flawed", "fixed"):
    print(f"{which:>6}: greedy accuracy on 200 held-out problems {before:.3f} -> "
          f"{record[which]['greedy_accuracy_200_after']:.3f}; the doctor on its history: "
          f"{[f.rule for f in diagnose(record[which]['history'])]}")
for sample in record["flawed"]["samples"][:3]:
    print(f"  flawed policy, {sample['question']} (answer {sample['answer']}): {sample['completions']}")

# %% [markdown]
# The flawed run's reward climbs from about 1 to about 1,000 while held-out accuracy falls from
# 32% to 0: the policy writes six-digit numbers, the cheapest way to earn more. The first sign
# came early: a digit appended to a right answer ("931" for 93) already earns ten times more, so
# greedy accuracy was 0 at the first evaluation (step 20), long before the reward curve looked
# strange. The same run on the verifier learns: 32% -> 53.5% on the 200 problems. The doctor
# (lesson 13) names the hack from the history alone, training reward up while held-out accuracy is
# flat or falls, and finds nothing in the fixed run. Two habits follow: **log a held-out metric the
# reward cannot fake** (`eval_strategy="steps"`), and **read the top-scoring samples**. Lesson 11 §8
# shows a subtler hack, a policy paid for copying its input.
#
# ## 14. Before training: probe the reward with degenerate completions
#
# Most reward bugs are visible without a single training step: write the cheap completions a
# policy would find, and score them. `probe_rewards(reward_funcs, rows)` (and
# `python -m course_lib probe-rewards --task ... --rewards ...`) scores, for a few prompts, a
# correct reference completion and these degenerate ones: empty, whitespace, the answer tag with
# nothing in it, every number of the prompt, the prompt repeated, a very long reply, a spray of a
# thousand numbers, a huge number, the format without reasoning, the right answer in the wrong
# format, "I don't know", and a well-formed wrong answer. Every case that scores **at least as
# well as the reference** is flagged; a flagged case without the right answer is a hack waiting
# for a policy (`FLAG`). First the course's own rewards:

# %%
from course_lib.data import gsm8k_messages
from course_lib.presets import TASKS
from course_lib.rewards.flawed import closeness_reward
from course_lib.rewards.probe import probe_rewards

gsm8k_rows = [{"prompt": gsm8k_messages("Tom has 3 boxes of 4 pens and buys 5 more. How many pens?"), "answer": "17"}]
for task, rows in (("arithmetic", get_task("arithmetic", split="test", n=3, seed=0)),
                   ("arithmetic-tagged", get_task("arithmetic-tagged", split="test", n=3, seed=0)),
                   ("gsm8k", gsm8k_rows)):
    report = probe_rewards(get_reward_functions(TASKS[task]["rewards"]), rows)
    print(f"{task} ({', '.join(TASKS[task]['rewards'])}): flagged {report.flagged}, answer-free {report.hacks}")
print()
print(probe_rewards(get_reward_functions(TASKS["gsm8k"]["rewards"]), gsm8k_rows).table())

# %% [markdown]
# No answer-free case ties the reference on the course's rewards. What they flag holds the right
# answer: the arithmetic verifier also accepts `<answer>93</answer>` (it reads the first number),
# and the tagged and GSM8K rewards pay the layout without reasoning fully. That is what these
# rewards mean (they check the answer, not the reasoning), and worth knowing: a policy may learn
# to skip the reasoning. The GSM8K table shows one more thing: the empty answer tag in the right
# layout earns 1.5 of 4.0 points from the three format rewards, enough to learn the tags from, not
# enough to beat a right answer. Now the flawed reward of section 13, before any training:

# %%
flawed_report = probe_rewards([closeness_reward], get_task("arithmetic", split="test", n=3, seed=0))
print(flawed_report.table())
print("\nflagged without the right answer:", flawed_report.hacks)

# %% [markdown]
# The probe flags `huge_number` (a score in the millions against the reference's 1.0) and the
# wrong answer one above the reference: the hack of section 13, found in a second instead of ten
# minutes of training. Run the probe on every new reward, and add the cases your task invites
# (units, a second answer, the question's own numbers in the tag).
#
# ### Exercise 6 — `probe_case(question, answer)`
#
# A colleague's reward pays 1.0 when "the completion holds the answer":

# %%
import inspect

print(inspect.getsource(ex09.planted_reward))
ex = load_exercise("ex09_rewards")
feedback(ex09.check_probe_case, ex.probe_case);

# %% [markdown]
# Where to go next: lesson 04 §10 trains a learned reward model and watches PPO over-optimise it
# (the judge's failure mode, measured); lesson 11 §7 turns a verifier into pass@k and maj@k and §8
# shows a hacked reward in a real study; lesson 13 is the doctor that named the hack above, with
# DAPO's remedies for rewards that stop teaching.

# %% [markdown]
# ## Explore: the reward playground
#
# Type a completion and the expected answer, tick reward functions, and see every score
# next to a few reference completions.

# %%
try:
    import ipywidgets  # noqa: F401
except ImportError:
    ipywidgets = None
if ipywidgets is not None:
    from course_lib.widgets import reward_playground

    display(reward_playground())
else:
    from course_lib.widgets import EXAMPLE_COMPLETIONS

    display(plot_reward_breakdown(list(EXAMPLE_COMPLETIONS),
                                  get_reward_functions(["think_answer_format_reward", "correctness_reward",
                                                        "proximity_reward"]), answer="4"))

# %% [markdown]
# ## Questions
#
# 1. The GSM8K family gives a bare `"72"` 2.5 points and a perfectly formatted wrong
#    answer 1.5 or more. What would a policy learn first from these five rewards, and
#    which weights in `reward_weights` would you change to steer it?
# 2. A length reward `−|20 − len|` and a correctness reward are summed. How large must
#    the correctness reward be so that a correct 60-character answer beats a wrong
#    20-character one? What does this say about mixing scales?
# 3. Why does the proximity reward floor at −0.5 instead of decreasing forever, and why is
#    "no number" (−1.0) below that floor?
# 4. A reward returns 0 (instead of `None`) for prompts it cannot grade. In a GRPO group
#    where two completions are graded 1.0 and two are "ungradable", what advantages
#    result, and what does the model learn from them?
# 5. Name a reward hack available to a policy graded by unit tests that the sandbox does
#    *not* stop, and a change to the tests or reward that would.
# 6. Section 12's judge agrees with the verifier on 30% of the answers. Why is that number
#    misleading on its own, what does Cohen's kappa of 0.0 add, and what would you measure
#    before training on a stronger judge?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("09", k)`
# prints the answer to question k (`show_answer("09")` prints them all). They are also in
# `notebooks/answers/09_rewards.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("09", 1)
