# %% [markdown]
# # Lesson 12 — Agents: tools, environments and multi-turn rollouts
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/12_agents.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: about 160 s of CPU time with one
# thread (`OMP_NUM_THREADS=1`; measured 160 s, 199 s before fast mode was cut to 4 held-out problems
# and a warm-up of one trace a step). Most of it is the two GRPO steps (about 75 s with their
# evaluation), SmolLM2's supervised warm-up (about 38 s with its evaluation) and loading SmolLM2
# with its first evaluation (about 18 s); the TRL cell takes about 10 s, mostly importing TRL.
# Add a one-time conversion of SmolLM2's GGUF file on a machine's first run; the wall time grows
# when the machine is busy with other work.*
#
# Until now a completion was one stretch of text the model wrote after the prompt, scored
# once. An **agent** writes a little, calls a tool (a calculator, a search, a Python
# interpreter, a game), reads what the tool answered, and goes on. The completion becomes a
# **trajectory**: the model's turns with the environment's answers in between. TRL 1.16
# (`GRPOTrainer(tools=..., environment_factory=...)`), verl's agent loop, OpenRLHF and
# prime-rl all train such trajectories with the same GRPO/RLOO/PPO losses you know, and
# one change: some tokens of the completion were not written by the model.
#
# In this lesson you will:
# 1. follow the **rollout loop** and see who writes which tokens and which are trained;
# 2. measure why the loop keeps the sampled token ids (**token in, token out**) instead
#    of decoding and re-encoding text, on the real shipped tokenizers;
# 3. look at one trajectory with every token coloured trained / masked;
# 4. write an **environment** (`reset`, a tool, `get_reward`), the loss mask of a
#    multi-turn trajectory, and its advantages two ways, one per trajectory and one per
#    turn (the exercises);
# 5. hand the same environment to TRL's `GRPOTrainer`;
# 6. train SmolLM2-135M-Instruct to use a calculator it never called before (a supervised
#    warm-up on scripted traces, then GRPO with a tool), measure the held-out accuracy with
#    paired intervals, and compare GRPO with the control it has to beat: the same compute
#    spent on more supervised traces (on this task the control does as well as GRPO:
#    section 5 gives the numbers, and those of a guessing game built so that the
#    demonstrations are worse than what the reward pays for).

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
import random
import re
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from datasets import Dataset

from course_lib.algos import make_config
from course_lib.machine import fast_mode, scaled  # scaled(fast, full): one cell, two budgets
from course_lib.models import load_policy
from course_lib.rollout import SamplingConfig, tokenize_prompts
from course_lib.rollout.agents import run_agent_rollouts
from course_lib.rollout.tool_calls import TOOL_CHAT_TEMPLATE
from course_lib.rollout.tools import ToolBox
from course_lib.rollout.warmup import ScriptedPolicy, supervised_warmup
from course_lib.trainer import Trainer

OUTPUT = Path(os.environ.get("COURSE_OUTPUT", "outputs"))  # the runs' folders; a re-run replaces its own

torch.manual_seed(0)
print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. The rollout loop: who writes which tokens
#
# `course_lib/rollout/agents.py` runs this loop for every rollout of a batch at once
# (rollouts that finished drop out):
#
# ```
# ids = prompt                                   # system turn lists the tools
# repeat:
#     turn = model.generate(ids)                 # until <|im_end|> or the token budget
#     append turn                                # written by the MODEL   -> trained
#     calls = parse <tool_call>{...}</tool_call> in the turn
#     if no call, or the turn was cut, or max_tool_calling_iterations rounds done: stop
#     results = run each call                    # a failure becomes an error message
#     append tokenize(results + "assistant" header)   # written by the ENVIRONMENT -> masked
# ```
#
# Three consequences:
#
# - **The loss mask has holes.** The policy-gradient loss is a sum over tokens of
#   advantage x log-prob. A tool result was not sampled from the policy, so its log-prob is
#   not part of the policy's choice: it gets `tool_mask = 0` and drops out of the loss, the
#   entropy, the KL, the importance ratios and the token counts the loss types divide by.
#   The model still *reads* those tokens (they are in the attention mask): the answer it
#   writes next depends on them.
# - **The budget is shared.** Tool results count toward `max_completion_length`, as in TRL.
#   Here a result longer than what is left of the budget is cut (with a marker); TRL 1.16
#   instead drops the results that would overflow and ends the rollout with the completion
#   as it is, so the same run gives different trajectories in the two trainers. Either way a
#   run that calls many tools needs a larger budget.
# - **The reward is for the whole trajectory.** One scalar at the end, so every model token
#   of the trajectory gets the same GRPO advantage, whichever turn it is in (TRL 1.16 and
#   this library's trainer both do this; section 6 and exercise 3 compute turn-level credit
#   next to it).
#
# The tools are plain functions with type hints and a Google-style docstring: the chat
# template writes their schema into the prompt. Here is a calculator tool and the prompt
# the tiny model sees with it (`TOOL_CHAT_TEMPLATE`, since the embedded models' own
# ChatML templates know no tools).

# %%
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


policy, tokenizer = load_policy("tiny")
policy.config.max_position_embeddings = 512  # RoPE: the tiny model was trained on 128 positions; the tool list needs more
TOOLS = {"tools": [multiply], "chat_template": TOOL_CHAT_TEMPLATE}
prompt_ids = tokenize_prompts(tokenizer, [[{"role": "user", "content": "37*45"}]], chat_template_kwargs=TOOLS)
print(tokenizer.decode(prompt_ids[0]))
print(f"{len(prompt_ids[0])} prompt tokens")

# %% [markdown]
# ## 2. Token in, token out
#
# The loop could keep the trajectory as text: decode the model's turn, append the tool's
# text, encode everything again for the next turn and for training. It does not, because
# **encode(decode(ids)) need not be ids**. A BPE tokenizer has one *canonical* way to
# split a string, but a model can sample any split: `"Hel"` + `"lo"` is a valid pair of
# sampled tokens, and the re-encoded text becomes the single token `"Hello"`. Training on
# the re-encoded ids would compute log-probs of tokens the model never drew, and the
# importance ratio, the KL and the advantage weighting would all be of the wrong tokens.
#
# The cell below measures it on the two shipped tokenizers. It takes a trajectory-like
# text, splits it into tokens in random (but valid) ways, as sampling could, and counts
# how often decode + encode gives back the same ids.

# %%
from course_lib.models import ModelNotAvailableError, smollm2_folder

TEXT = 'Let me compute it.<tool_call>{"name": "multiply", "arguments": {"a": 37, "b": 45}}</tool_call>'


def random_split_ids(tok, text, rng):
    """Ids of ``text`` tokenized piece by piece, cut at random character positions."""
    cuts = sorted(rng.sample(range(1, len(text)), k=len(text) // 6))
    pieces = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]
    return [t for p in pieces for t in tok(p, add_special_tokens=False)["input_ids"]]


def round_trip_drift(tok, trials=200, seed=0):
    rng = random.Random(seed)
    changed = 0
    example = None
    for _ in range(trials):
        ids = random_split_ids(tok, TEXT, rng)
        back = tok(tok.decode(ids), add_special_tokens=False)["input_ids"]
        if back != ids:
            changed += 1
            example = example or (ids, back)
    return changed, example


tokenizers = {"tiny (one token per character)": tokenizer}
try:
    from transformers import AutoTokenizer

    tokenizers["SmolLM2-135M (BPE, 49k tokens)"] = AutoTokenizer.from_pretrained(smollm2_folder())
except ModelNotAvailableError as error:
    print("SmolLM2 is not installed here:", error)

for name, tok in tokenizers.items():
    changed, example = round_trip_drift(tok)
    print(f"{name}: decode+encode changed the ids in {changed}/200 random splits")
    if example:
        ids, back = example
        print(f"   sampled {len(ids)} ids, re-encoded {len(back)}: first difference "
              f"{next((tok.convert_ids_to_tokens(a), tok.convert_ids_to_tokens(b)) for a, b in zip(ids, back) if a != b)}")

# %% [markdown]
# The character-level tiny model cannot drift (one token per character). On SmolLM2's BPE
# vocabulary almost every non-canonical split re-encodes to fewer, longer tokens. Sampled
# text is mostly canonical, but not always: `tests/lib/test_agents.py` samples SmolLM2 at
# temperature 1 and finds re-encoded completions that differ from the sampled ids. So the
# loop keeps every sampled id as it is, tokenizes each tool result once, and appends those
# ids; decoding happens only to *read* a turn (to find the tool call).
#
# ## 3. One trajectory, token by token
#
# A scripted policy (`course_lib.rollout.warmup.ScriptedPolicy`) is a rollout engine whose
# turns come from a Python function. Run through the real loop with the real tool, its
# trajectory has exactly the tokens and the `tool_mask` a model's own rollout would have.
# This one calls `multiply`, reads the result, and answers with it.

# %%
def scripted_turn(text: str) -> str:
    """First turn: a call on the prompt's two numbers. Second turn: repeat the tool's answer."""
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        return f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]


def scripted_rollouts(prompt_ids):
    return run_agent_rollouts(ScriptedPolicy(tokenizer, scripted_turn, context_limit=512), tokenizer, prompt_ids,
                              [ToolBox([multiply]) for _ in prompt_ids], SamplingConfig(max_tokens=128),
                              max_tool_calling_iterations=1, max_completion_length=128,
                              chat_template=TOOL_CHAT_TEMPLATE)


rollout = scripted_rollouts(prompt_ids)
trajectory = rollout.trajectories[0]
print("stop:", trajectory.stop, "| calls:", trajectory.calls, "| failures:", trajectory.failures)
print("model tokens (trained):", sum(trajectory.tool_mask), "| tool tokens (masked):",
      trajectory.tool_mask.count(0))
for message in trajectory.messages:
    print(message)

# %%
from IPython.display import display

from course_lib.widgets import plot_trajectory_tokens

display(plot_trajectory_tokens(tokenizer, prompt_ids[0], trajectory.completion_ids, trajectory.tool_mask,
                               title="One trajectory of the calculator task."))

# %% [markdown]
# Read the colours from left to right: the prompt (with the tool list) is context; the
# model's call, up to and including its `<|im_end|>`, is trained; the environment's
# `<|im_start|>tool ... <|im_end|>` turn **and the next `<|im_start|>assistant` header**
# are masked (the loop wrote them, not the model); the model's final answer and its
# `<|im_end|>` are trained again. Exercise 1 builds this mask from the turns.

# %%
from course_lib.checks import ex12
from course_lib.feedback import feedback
from course_lib.grading import load_exercise

ex = load_exercise("ex12_agents")
feedback(ex12.check_trajectory_loss_mask, ex.trajectory_loss_mask);

# %% [markdown]
# ## 4. Environments: state, tools and a reward
#
# A tool is stateless; an **environment** keeps state across the calls of one rollout.
# TRL's `environment_factory` (and ours) makes one instance per rollout and calls
# `reset(**row)` with the rollout's dataset row; its public methods are the tools; an
# optional `get_reward()` scores the finished rollout (a reward function of weight 1,
# logged under the class's name). This desk offers the calculator and pays for a call on
# the row's own numbers: the tool only helps when it is called with the right arguments.

# %%
class MultiplyDesk:
    """A calculator desk for one multiplication problem."""

    def reset(self, a, b, **row):
        self.a, self.b, self.calls = int(a), int(b), []
        return None  # or text appended to the last user message

    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: first factor
            b: second factor
        """
        self.calls.append((a, b))
        return a * b

    def get_reward(self) -> float:
        """1 for a call on the problem's numbers, 0.2 for any well-formed call, else 0."""
        if {(self.a, self.b), (self.b, self.a)} & set(self.calls):
            return 1.0
        return 0.2 if self.calls else 0.0


desk = MultiplyDesk()
desk.reset(a=37, b=45, prompt=None)
print(desk.multiply(a=37, b=45), desk.get_reward())

# %% [markdown]
# **The same with TRL.** TRL 1.16 takes these objects as they are:
# `GRPOTrainer(model, reward_funcs, args=GRPOConfig(max_tool_calling_iterations=...),
# train_dataset=..., tools=[multiply])`, or `environment_factory=MultiplyDesk` (one instance
# per rollout, `reset(**row)`, its public methods as tools, `get_reward` as a reward of weight
# 1). It checks two things about the tokenizer at construction:
#
# - its chat template renders a whole tool exchange, user, assistant with `tool_calls`, tool
#   (`trl.chat_template_utils.supports_tool_calling`). SmolLM2's and the tiny model's ChatML
#   templates do not, so TRL refuses them; the course's tool templates do;
# - it can read the calls back out of the model's text: unless the tokenizer already carries a
#   `response_template`, TRL's `add_response_schema` sets one for the templates it knows (Qwen2.5,
#   Qwen3, Llama 3.1 / 3.2, GPT-OSS, Gemma 4, ...) and raises "Unrecognized chat template" for any
#   other, the course's included.
#
# `course_lib.rollout.tool_calls.prepare_for_trl(tokenizer)` settles both: it sets the course's
# tool template (the compact one for a model of 256 positions or fewer) and a `response_template`
# that reads `<tool_call>{...}</tool_call>` as this library does. This library then renders
# with the same template (the tokenizer's own now handles tools), and both read a turn the same
# way, TRL 1.16's: a turn with a malformed block is plain text (no call: the trajectory ends), a
# string `"37"` for an `int` argument becomes 37, a tool's result reaches the model as
# `str(result)` (`{'a': 1}`, not JSON), a `get_reward()` of `None` is no reward, and reward
# functions see each assistant turn as `{"content": its text without the calls, "tool_calls": [...]}`
# followed by the `tool` messages (`tests/lib/test_agents_trl_parity.py` runs the same turns
# through TRL's own tool loop and compares). Where the two still differ: a round of results that
# does not fit the token budget is cut here and dropped in TRL, and a tool here has a time limit
# (`tool_timeout`, 30 s by default, in training and in `evaluate_tool_accuracy` alike).
#
# The cell trains the desk above with TRL's `GRPOTrainer` for two steps, on a copy of the tiny
# model (the untrained model never calls the tool, so the tool metrics read 0: the point is that
# the same class, dataset and tokenizer go through TRL unchanged).

# %%
import copy

from trl import GRPOConfig, GRPOTrainer

from course_lib.rollout.tool_calls import prepare_for_trl

trl_tokenizer = prepare_for_trl(copy.deepcopy(tokenizer), context_limit=128)
desk_rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{a}*{b}"}] for a, b in ((12, 34), (56, 78))],
                               "a": [12, 56], "b": [34, 78]})
trl_trainer = GRPOTrainer(
    model=copy.deepcopy(policy), reward_funcs=[], train_dataset=desk_rows, processing_class=trl_tokenizer,
    environment_factory=MultiplyDesk,
    args=GRPOConfig(output_dir=str(OUTPUT / "12_agents_trl"), use_cpu=not torch.cuda.is_available(), bf16=False, report_to="none",
                    save_strategy="no", disable_tqdm=True, seed=0, max_steps=2, logging_steps=1,
                    per_device_train_batch_size=4, num_generations=4, max_completion_length=64,
                    max_tool_calling_iterations=2, learning_rate=1e-5))
trl_trainer.train()
for row in trl_trainer.state.log_history:
    if "tools/call_frequency" in row:
        print(f"TRL step {row['step']}: tools/call_frequency {row['tools/call_frequency']:.2f}, "
              f"rewards/MultiplyDesk/mean {row['rewards/MultiplyDesk/mean']:.2f}")

# %% [markdown]
# Exercise 2: write a guessing game in `exercises/ex12_agents.py` (a secret number, one
# tool `guess` answering "higher", "lower" or "correct", a reward for finding it).

# %%
feedback(ex12.check_guessing_game, ex.GuessingGame);

# %% [markdown]
# ## 5. Training with the tool: a measured lift on held-out problems
#
# Now a task where the tool matters: `What is a * b?` with `a` of three digits and `b` of
# two or three, for **SmolLM2-135M-Instruct**. It cannot compute these products itself
# (below: none of the held-out problems right) and, offered `multiply` through the tool
# template, it never writes a call. Three stages, each measured on the same held-out
# problems, greedily, with `course_lib.tool_evaluation.evaluate_tool_accuracy`: the same
# rollout loop as training, the final answer read from the **last model turn** with the
# course's `is_correct` rule, and per-problem booleans that `lift_interval` pairs.
#
# 1. **before**: the model as shipped, with the tool available;
# 2. **after the warm-up**: a short supervised warm-up on traces of a scripted policy (call
#    `multiply` on the question's numbers, then write `The answer is <result>.`).
#    `supervised_warmup` minimises the negative log-likelihood of the trajectory's
#    **model** tokens, the same mask as the RL loss (the SFT stage before RL in DeepSeek-R1
#    or Tülu 3, here on tool traces). It is deliberately short (4 steps of 4 traces; fast
#    mode: 4 steps of one trace): the model learns to call, not yet to stop and answer (4
#    more steps would teach that too: the control after the table below);
# 3. **after GRPO**: `Trainer(..., tools=[multiply])` with one reward, the correctness of the
#    final answer. The trainer logs `tools/call_frequency` (calls per completion) and
#    `tools/failure_frequency` (failed calls per call), with TRL's names.
#
# Full mode is the measured run of `benchmarks/tool_lift.py` (100 held-out problems, 8 GRPO
# steps of 8 rollouts); fast mode runs the same cells on 4 problems, a warm-up of 4 traces and
# 2 steps of 4 rollouts (one group), to show the mechanism.

# %%
from course_lib.evaluation import lift_interval, wilson_interval
from course_lib.rewards.answers import is_correct
from course_lib.rollout.tool_calls import tool_chat_template
from course_lib.tool_evaluation import evaluate_tool_accuracy, final_turn


def multiply_problems(rows, seed, exclude=frozenset()):
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < rows:
        pair = (rng.randint(100, 999), rng.randint(10, 999))
        if pair not in exclude:
            pairs.append(pair)
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {a} * {b}?"}] for a, b in pairs],
                              "answer": [str(a * b) for a, b in pairs],
                              "a": [a for a, _ in pairs], "b": [b for _, b in pairs]})


EVAL_N = scaled(4, 100)
MAX_COMPLETION = 64
smol, smol_tokenizer = load_policy("smollm2-135m")
SMOL_TEMPLATE = tool_chat_template(smol_tokenizer)  # TOOL_CHAT_TEMPLATE: SmolLM2's own template knows no tools
held_out = multiply_problems(EVAL_N, seed=777)
seen = set(zip(held_out["a"], held_out["b"]))  # training and warm-up never see a held-out pair


def evaluate(model, name):
    result = evaluate_tool_accuracy(model, smol_tokenizer, held_out, tools=[multiply],
                                    max_completion_length=MAX_COMPLETION, batch_size=50)
    print(f"{name:>16}: {result.summary()}")
    return result


before = evaluate(smol, "before")
print("   e.g.", repr(before.texts[0][:120]))

# %%
def smol_turn(text: str) -> str:
    """The scripted policy: call multiply on the question's numbers, then state the result."""
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"What is (\d+) \* (\d+)\?", text)[-1]
        return f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return "The answer is " + text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0] + "."


WARMUP_ROWS = scaled(1, 4)  # traces per warm-up step; fast mode: 4 steps of one trace
traces = []
for s in range(4):
    rows = multiply_problems(WARMUP_ROWS, seed=1000 + s, exclude=seen)
    ids = tokenize_prompts(smol_tokenizer, rows["prompt"], chat_template_kwargs={"tools": [multiply],
                                                                                 "chat_template": SMOL_TEMPLATE})
    traces.append(run_agent_rollouts(ScriptedPolicy(smol_tokenizer, smol_turn, context_limit=2048), smol_tokenizer,
                                     ids, [ToolBox([multiply]) for _ in ids], SamplingConfig(max_tokens=MAX_COMPLETION),
                                     max_tool_calling_iterations=1, max_completion_length=MAX_COMPLETION,
                                     chat_template=SMOL_TEMPLATE))
losses = supervised_warmup(smol, traces, epochs=1, learning_rate=3e-5)
print("warm-up loss per step:", " ".join(f"{x:.2f}" for x in losses))
warm = evaluate(smol, "after warm-up")
print("   e.g.", repr(warm.texts[0][:200]))
print("   how the trajectories ended:", {stop: warm.stops.count(stop) for stop in sorted(set(warm.stops))})

# %% [markdown]
# After the warm-up the model calls, but it may start a *second* call after reading the
# result instead of answering (as in the trajectory printed above), and run out of the token
# budget without an answer (`"length"` in the count above; in the full mode's measured run 75
# of the 100 trajectories ended so); such a trajectory is wrong. The reward below pays only for a
# correct final answer, so a group whose rollouts differ in that respect has a spread, and
# GRPO pushes up the trajectories that answer.

# %%
def correct_answer(prompts, completions, answer, **_):
    """1.0 when the last model turn (not a tool call) holds the right product."""
    return [float(is_correct(final_turn(messages), reference)) for messages, reference in zip(completions, answer)]


STEPS, BATCH = scaled(2, 8), scaled(4, 8)  # fast mode: one group of 4 rollouts a step
config = make_config("grpo", model_name_or_path="smollm2-135m", output_dir=str(OUTPUT / "12_agents"),
                     overwrite_output_dir=True, max_steps=STEPS, learning_rate=2e-5, per_device_train_batch_size=BATCH, num_generations=4,
                     temperature=1.0, beta=0.0, max_completion_length=MAX_COMPLETION, max_tool_calling_iterations=1,
                     save_steps=0, logging_steps=1, seed=0)
trainer = Trainer(config, [correct_answer], multiply_problems(STEPS * BATCH, seed=0, exclude=seen), smol,
                  smol_tokenizer, progress=not fast_mode(), tools=[multiply])
history = trainer.train()
print(f"{'step':>4} {'calls/completion':>16} {'failures/call':>13} {'reward':>6}")
for row in history:
    print(f"{row['step']:4d} {row['tools/call_frequency']:16.2f} {row['tools/failure_frequency']:13.2f} "
          f"{row['rewards/correct_answer/mean']:6.2f}")
after = evaluate(trainer.model, "after GRPO")
print("   e.g.", repr(after.texts[0][:200]))

# %%
print(f"held-out problems: {EVAL_N}; accuracy with its 95% Wilson interval")
for name, result in (("before", before), ("after warm-up", warm), ("after GRPO", after)):
    low, high = wilson_interval(sum(result.correct), EVAL_N)
    print(f"{name:>14}: {100 * result.accuracy:5.1f}% [{100 * low:.1f}, {100 * high:.1f}]")
print("lifts on the same problems, paired 95% interval (percentage points)")
for (a_name, a), (b_name, b) in ((("before", before), ("after warm-up", warm)),
                                 (("after warm-up", warm), ("after GRPO", after)),
                                 (("before", before), ("after GRPO", after))):
    lift, low, high = lift_interval(a.correct, b.correct)
    print(f"  {b_name} - {a_name}: {100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
          f"{'  excludes 0' if low > 0 or high < 0 else '  includes 0: not beyond noise'}")

fig, ax = plt.subplots(figsize=(6, 3))
steps = [r["step"] for r in history]
ax.plot(steps, [r["tools/call_frequency"] for r in history], marker="o", label="tools/call_frequency")
ax.plot(steps, [r["rewards/correct_answer/mean"] for r in history], marker="s", label="reward: correct answer (mean)")
ax.set_xlabel("GRPO optimizer step")
ax.set_ylim(-0.05, max(1.05, max(r["tools/call_frequency"] for r in history) + 0.05))
ax.legend(fontsize=8)
ax.set_title("SmolLM2-135M with a multiply tool, after the warm-up")
plt.show()

# %% [markdown]
# What the full mode measured (`python benchmarks/tool_lift.py`, the same settings, on a
# shared 2-core CPU, 592 s; `benchmarks/README.md` has the whole output; this notebook's
# full mode printed the same numbers), on 100 held-out problems:
#
# | stage | accuracy [95% Wilson] | calls / problem |
# |---|---|---|
# | before | 0.0% [0.0, 3.7] | 0.00 |
# | after the warm-up (4 steps) | 23.0% [15.8, 32.2] | 0.98 |
# | after GRPO (8 steps) | 100.0% [96.3, 100.0] | 1.00 |
# | control: 4 more warm-up steps instead of GRPO | 100.0% [96.3, 100.0] | not recorded |
#
# Lifts on the same problems with the paired interval: warm-up +23.0 points [+14.7, +31.3],
# GRPO +77.0 [+68.7, +85.3], both beyond their noise; before to after +100 (every problem
# went from wrong to right, so the paired differences have no spread and the interval
# collapses to the point: read the Wilson intervals above for that comparison). Over the 8
# GRPO steps `tools/call_frequency` went 0.50, 0.38, 0.75, 0.88, 0.75, 0.75, 1.00, 0.88 and
# the mean reward 0.12, 0.00, 0.25, 0.50, 0.50, 0.62, 0.25, 0.75 (8 rollouts a step: each
# point is noisy, the trend is the held-out jump). Fast mode (4 problems, a warm-up of 4
# traces, 2 GRPO steps of one group of 4) measured 0/4, 0/4 and 4/4: the warm-up made the
# model call on all 4 problems, but every trajectory called again and ran out of tokens, and
# GRPO made it answer; the intervals are far wider (after GRPO [51.0, 100.0]).
#
# What the stages show, and what they do not. The warm-up takes the model from never calling
# to calling on nearly every problem, from 16 scripted traces; GRPO, with nothing but a
# correctness reward, then makes it answer after the tool instead of calling again. It is
# tempting to read this as "format from supervision, use from RL", but a control says
# otherwise: the same 4-step warm-up (the same losses, 0.96 / 0.44 / 0.23 / 0.13) followed
# by **4 more supervised steps** on 16 new scripted traces (seeds 1004-1007, no held-out
# pair) and no RL at all also reaches **100/100 [96.3, 100.0]** on the full mode's held-out
# problems, every trajectory ending on its own end-of-turn token. The scripted traces already show the behaviour
# GRPO found, answering after the result, so on this task more warm-up does what the 8 GRPO
# steps did: the split comes from stopping the warm-up at 4 steps. Whether RL adds anything
# needs a task whose scripted traces cannot show the best behaviour. `benchmarks/guess_rl_vs_sft.py` builds one: the guessing
# game of exercise 2 (secret 1..7, 3 guesses, `environment_factory`, three tool rounds), whose
# scripted demonstrator guesses at random among the numbers still possible and so succeeds
# 67.8% of the time where binary search always does; it compares warm-up + more supervision
# with warm-up + GRPO at the same number of trajectories. The one run the shared CPU allowed
# (6 warm-up steps, then 4 steps of 8 trajectories per arm, 28 held-out games) found warm-up
# 17/28, + more SFT 12/28, + GRPO 6/28 (its trajectories ran out of tokens;
# `benchmarks/README.md`): far too small to settle the question, and RL was not ahead, so this
# lesson claims no advantage of RL over supervision. The cell below draws that run's numbers as
# the benchmark printed them (they are not recomputed here: the run took 34 minutes of a shared
# CPU): GRPO's reward and calls per completion at each step, and, for each stage on the 28
# held-out games, the share solved within the budget, the guesses per game and the tool rounds
# per game.

# %%
# benchmarks/guess_rl_vs_sft.py --n 7 --budget 3 --warmup-steps 6 --steps 4 --batch 8 --generations 4 --lr 2e-5
# --max-completion-length 128 --skip-base, as printed (benchmarks/README.md). Its training log has no
# rounds per step (calls per completion only); its held-out evaluations have both, equal at every stage.
GUESS_GRPO_STEPS = {"reward": [0.500, 0.500, 0.250, 0.250], "calls / completion": [2.38, 2.75, 2.75, 2.62]}
GUESS_STAGES = {  # stage: (solved of 28, guesses / game, rounds / game)
    "scripted player": (21, 2.36, 2.36), "warm-up": (17, 2.61, 2.61),
    "+ 4 SFT steps": (12, 2.57, 2.57), "+ 4 GRPO steps": (6, 3.00, 3.00)}

fig, (ax_steps, ax_stages) = plt.subplots(1, 2, figsize=(11, 3.2))
for label, values in GUESS_GRPO_STEPS.items():
    ax_steps.plot(range(1, len(values) + 1), values, marker="o", label=label)
ax_steps.set_xlabel("GRPO step (after the warm-up)")
ax_steps.set_xticks(range(1, 5))
ax_steps.set_title("guessing game, 1..7 in 3 guesses: GRPO's log", fontsize=9)
ax_steps.legend(fontsize=8)
names = list(GUESS_STAGES)
x = torch.arange(len(names)).float()
for offset, (label, column, scale) in zip((-0.27, 0.0, 0.27), (("solved / 28 (share)", 0, 1 / 28),
                                                               ("guesses / game", 1, 1.0), ("rounds / game", 2, 1.0))):
    ax_stages.bar(x + offset, [GUESS_STAGES[n][column] * scale for n in names], width=0.27, label=label)
ax_stages.set_xticks(x, names, fontsize=8)
ax_stages.set_title("28 held-out games, greedy (budget: 3 guesses)", fontsize=9)
ax_stages.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The GRPO arm's games got longer (3.00 guesses, every one of the budget) while fewer were
# solved: its trajectories ran out of the 128-token budget before they answered. One run of four
# steps: read it as what happened, not as what RL does on this task.
#
# What the calculator run of this section does show is RL's mechanics on a trajectory with holes
# in its mask, and that a correctness reward alone moves the model. In fast mode GRPO's first
# step had a mean reward of 0.00 (all four rollouts wrong, so every advantage and the gradient
# were 0): the flip of the greedy answers came from the second step, the one whose group had a
# spread.
# Without enough warm-up GRPO has no signal at all: no rollout calls, every group scores 0
# (`frac_reward_zero_std` = 1; we measured 0 calls in 50 greedy rollouts after a 2-step
# warm-up, and 5 GRPO steps from there with a reward of 0 for every rollout). The
# tiny model of sections 1-3, warmed up the same way on 2-digit products (480 steps, with a
# compact template that keeps the question inside its 128 trained positions), calls on every
# held-out problem but copies only the first factor into the call: 3/100 right, and 80 GRPO
# steps leave that unchanged (`benchmarks/tool_lift_tiny.py`), so it is not the model here.
#
# Last, the first group of four trajectories of GRPO's last step (one training problem; the
# trainer keeps the batch its last update used, `trainer.batch`, so nothing is sampled again),
# each with its reward and the advantage the trainer gave it, GRPO's `(r - mean) / (std + 1e-4)`
# over the group: every trained (green) token of a trajectory is pushed up or down by that one
# number, and the masked (orange) tool tokens by nothing.

# %%
from course_lib.algos.grpo import group_advantages

G = 4
last = trainer.batch  # the last update's rollouts, scored
_, texts, rewards, advantages = (list(x)[:G] for x in trainer.state.last_samples)
formula = group_advantages(torch.tensor(rewards), G)
print("the trainer's advantages are (r - mean) / (std + 1e-4) over the group:",
      torch.allclose(torch.tensor(advantages), formula, atol=1e-5))
for k in range(G):
    print(f"rollout {k}: reward {rewards[k]:.1f}, advantage {advantages[k]:+.3f}: {texts[k][:110]!r}")
if max(rewards) == min(rewards):
    print("all rewards of the group are equal: every advantage is 0, and this group teaches nothing")
for k in sorted({int(formula.argmax()), int(formula.argmin())}):
    read = last.attention_mask[k].bool()  # every token the model read after the prompt: its own and the tool's
    display(plot_trajectory_tokens(smol_tokenizer, [], last.completion_ids[k][read].tolist(),
                                   last.completion_mask[k][read].tolist(), advantage=float(advantages[k]),
                                   title=f"Rollout {k} (reward {rewards[k]:.1f})."))

# %% [markdown]
# ## 6. Credit: one number per trajectory, or one per turn
#
# GRPO gives every model token of a trajectory the same advantage, the standardised return of
# the whole trajectory: `A_i = (R_i - mean(R)) / (std(R) + eps)` over the group, `R_i` the sum of
# what trajectory `i` earned. TRL 1.16 and this library's trainer do exactly that (section 5's
# reward is one number at the end). When the environment scores each turn (a guessing game can:
# every guess gets "higher", "lower" or "correct"), there is another choice: judge each turn by
# what came **from that turn on**, its discounted return-to-go
# `G_t = r_t + gamma * G_{t+1}`, standardised over all the turns of the group.
#
# Exercise 3: write both in `exercises/ex12_agents.py`, `trajectory_advantages` and
# `turn_advantages` (tool tokens get 0 in both: the mask of exercise 1).

# %%
ex = load_exercise("ex12_agents")
if feedback(ex12.check_trajectory_advantages, ex.trajectory_advantages) and \
        feedback(ex12.check_turn_advantages, ex.turn_advantages):
    credit = ex  # your functions
else:
    credit = load_exercise("ex12_agents", impl="solutions")
    print("-> the cells below use the course's reference functions; finish exercise 3 and re-run to use yours.")

# %% [markdown]
# Four scripted players play one game (secret 6, numbers 1 to 7, 3 guesses) through the real
# rollout loop: binary search, a lucky first guess, a slow player that tries 2 and 3 before 6,
# and one that counts up from 1 and runs out of guesses. Each guess earns +1.0 if it finds the
# secret and -0.1 if it misses; the closing turn ("It is 6.") earns 0. The four trajectories
# form one GRPO group; the turns of each come from its `tool_mask`.

# %%
SECRET, BUDGET = 6, 3


class Secret:
    """One game's secret: the tool a rollout plays with."""

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the guess
        """
        return "correct" if number == SECRET else "higher" if SECRET > number else "lower"


def player(next_guess):
    """A scripted player: its next guess from the range the feedback leaves, then a closing turn."""
    def respond(text):
        game = text.rsplit("<|im_start|>user", 1)[-1]
        guesses = [int(g) for g in re.findall(r'"number": (\d+)', game)]
        answers = re.findall(r"<\|im_start\|>tool\n(\w+)", game)
        low, high = 1, 7
        for g, answer in zip(guesses, answers):
            if answer == "correct":
                return f"It is {g}."
            low, high = (g + 1, high) if answer == "higher" else (low, g - 1)
        if len(answers) == BUDGET:
            return "I ran out of guesses."
        return f'<tool_call>{{"name": "guess", "arguments": {{"number": {next_guess(low, high, guesses)}}}}}</tool_call>'
    return respond


PLAYERS = {"binary search": lambda low, high, seen: (low + high) // 2,
           "lucky": lambda low, high, seen: 6,
           "slow": lambda low, high, seen: [2, 3, 6][len(seen)],
           "counting up": lambda low, high, seen: low}
game_prompt = tokenize_prompts(tokenizer, [[{"role": "user", "content": "Find my number, 1 to 7, in 3 guesses."}]],
                               chat_template_kwargs={"tools": [Secret().guess], "chat_template": TOOL_CHAT_TEMPLATE})
games = [run_agent_rollouts(ScriptedPolicy(tokenizer, player(rule), context_limit=512), tokenizer, game_prompt,
                            [ToolBox([Secret().guess])], SamplingConfig(max_tokens=400),
                            max_tool_calling_iterations=BUDGET, max_completion_length=400,
                            chat_template=TOOL_CHAT_TEMPLATE).trajectories[0]
         for rule in PLAYERS.values()]


def turn_rewards_and_token_turns(trajectory):
    """Each model turn's reward (+1.0 found, -0.1 missed, 0.0 the closing turn) and each completion
    token's turn (0, 1, ... on model tokens, -1 on the tool's), read from the trajectory."""
    feedback_texts = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
    rewards = [1.0 if text == "correct" else -0.1 for text in feedback_texts] + [0.0]
    turns, turn, previous = [], -1, 0
    for kept in trajectory.tool_mask:
        turn += int(kept == 1 and previous == 0)  # a model turn starts where a run of 1s starts
        turns.append(turn if kept else -1)
        previous = kept
    return rewards, turns


turn_rewards, token_turns = map(list, zip(*[turn_rewards_and_token_turns(t) for t in games]))
by_trajectory = credit.trajectory_advantages(turn_rewards, token_turns)
by_turn = credit.turn_advantages(turn_rewards, token_turns, gamma=0.5)
per_turn = [[row[turns.index(t)] for t in range(len(rewards))]
            for row, turns, rewards in zip(by_turn, token_turns, turn_rewards)]
for name, trajectory, rewards, row, turns in zip(PLAYERS, games, turn_rewards, per_turn, by_trajectory):
    guesses = [f"{c['function']['arguments']['number']}" for m in trajectory.messages for c in m.get("tool_calls", [])]
    print(f"{name:>13}: guesses {', '.join(guesses):8} rewards {rewards}")
    print(f"{'':>13}  trajectory-level {turns[0]:+.2f} on every turn; turn-level (gamma 0.5) "
          + " ".join(f"{a:+.2f}" for a in row))

fig, axes = plt.subplots(1, len(games), figsize=(12, 2.8), sharey=True)
for ax, name, row, turns in zip(axes, PLAYERS, per_turn, by_trajectory):
    x = torch.arange(len(row)).float()
    ax.bar(x - 0.2, [turns[0]] * len(row), width=0.4, label="trajectory-level")
    ax.bar(x + 0.2, row, width=0.4, label="turn-level")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xticks(x, [f"turn {t}" for t in range(len(row))], fontsize=7)
    ax.set_title(name, fontsize=9)
axes[0].set_ylabel("advantage")
axes[0].legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the slow player. Its return, 0.8, is above the group's mean, so trajectory-level credit
# pushes up **every** turn of it, the two wasted guesses included. Turn-level credit pushes its
# first guess down (its return-to-go, -0.1 + 0.5 x 0.4 = 0.1, is below the group's mean turn)
# and its last guess up: the guess that found the secret is the one rewarded. The price: the
# per-turn rewards have to come from somewhere (an environment that can judge a turn on its own,
# or a learned value, which is PPO's answer), the discount is one more setting, and pooling all
# turns of the group compares a closing turn with first guesses (every closing turn here, worth
# 0 from there on, is pushed down a little). Grouping the turns that start from the same state
# before standardising (GiGPO, Feng et al. 2025) is one way around that last point. Neither
# TRL 1.16 nor this library's trainer computes turn-level advantages; the exercise is the
# computation, not a trainer option.

# %% [markdown]
# ## Questions
#
# 1. A trajectory has three model turns and two tool results. Which tokens carry a
#    non-zero loss weight, and why is the `<|im_start|>assistant` header after each tool
#    result masked although it sits in an assistant turn?
# 2. Why would training on `encode(decode(sampled_ids))` bias the policy gradient, even
#    when the text is identical? What would the importance ratio compare?
# 3. Tool results count toward `max_completion_length`. A run with a search tool that
#    returns 400 tokens per call has a budget of 512. What will `completions/clipped_ratio`
#    and `tools/call_frequency` show, and what are two fixes?
# 4. With one reward at the end of the trajectory, every model token of a GRPO rollout gets
#    the same advantage. Give an example where this assigns credit badly, and one way to
#    give turn-level credit.
# 5. Before the warm-up, SmolLM2's rollouts never call the tool and all score 0 on the
#    correctness reward. What does GRPO compute for them, and why does a supervised warm-up
#    on scripted traces fix it where more RL steps would not?
# 6. The `loss_type` divides by a number of tokens (`dapo`: all tokens of the batch,
#    `grpo`: each sequence's length). Which tokens should those counts include in a
#    multi-turn run, and what goes wrong if tool tokens are counted?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("12", k)`
# prints the answer to question k (`show_answer("12")` prints them all). They are also in
# `notebooks/answers/12_agents.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("12", 1)
