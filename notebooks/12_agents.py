# %% [markdown]
# # Lesson 12 — Agents: tools, environments and multi-turn rollouts
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/12_agents.ipynb)
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
# 4. write an **environment** (`reset`, a tool, `get_reward`) and the loss mask of a
#    multi-turn trajectory (the exercises);
# 5. run the real loop on the tiny model: a supervised warm-up on scripted traces, then a
#    few GRPO steps with a tool, and read `tools/call_frequency`.

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
import copy
import random
import re
import tempfile

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
#   A long result is cut (with a marker); a run that calls many tools needs a larger budget.
# - **The reward is for the whole trajectory.** One scalar at the end, so every model token
#   of the trajectory gets the same GRPO advantage, whichever turn it is in (turn-level
#   credit is an open research question; question 4 below).
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
# Exercise 2: write a guessing game in `exercises/ex12_agents.py` (a secret number, one
# tool `guess` answering "higher", "lower" or "correct", a reward for finding it).

# %%
feedback(ex12.check_guessing_game, ex.GuessingGame);

# %% [markdown]
# ## 5. The real loop on the tiny model
#
# The tiny model has never seen a `<tool_call>`. A reward on tool use gives it no signal:
# every rollout of a group scores 0, every advantage is 0. The usual remedy (as the SFT
# stage before RL in DeepSeek-R1 or Tülu 3) is a short **supervised warm-up** on traces
# of a scripted policy: `supervised_warmup` minimises the negative log-likelihood of the
# trajectory's **model** tokens, the same mask as the RL loss. Then GRPO runs with the
# desk as environment, and the trainer logs `tools/call_frequency` (calls per completion)
# and `tools/failure_frequency` (failed calls per call), with TRL's names.

# %%
def problems(rows, seed):
    generator = torch.Generator().manual_seed(seed)
    pairs = torch.randint(10, 99, (rows, 2), generator=generator).tolist()
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{a}*{b}"}] for a, b in pairs],
                              "a": [a for a, _ in pairs], "b": [b for _, b in pairs]})


WARMUP_BATCHES, WARMUP_EPOCHS = 8, 15  # 120 steps: what the format needs (tests/lib/test_agents_warmup.py)
traces = [scripted_rollouts(tokenize_prompts(tokenizer, problems(8, 1000 + s)["prompt"], chat_template_kwargs=TOOLS))
          for s in range(WARMUP_BATCHES)]
warm = copy.deepcopy(policy)
losses = supervised_warmup(warm, traces, epochs=WARMUP_EPOCHS, learning_rate=3e-3)
print(f"warm-up: {len(losses)} steps, loss {losses[0]:.2f} -> {losses[-1]:.2f}")

# %%
STEPS = scaled(4, 40)
config = make_config("grpo", model_name_or_path="tiny", output_dir=tempfile.mkdtemp(prefix="agents-"),
                     max_steps=STEPS, learning_rate=1e-4, per_device_train_batch_size=8, num_generations=4,
                     temperature=1.0, beta=0.0, max_completion_length=128, max_tool_calling_iterations=1,
                     save_steps=0, logging_steps=1, seed=0)
trainer = Trainer(config, None, problems(64, 0), warm, tokenizer, progress=not fast_mode(),
                  environment_factory=MultiplyDesk)
history = trainer.train()
print(f"{'step':>4} {'calls/completion':>16} {'failures/call':>13} {'desk reward':>11}")
for row in history:
    print(f"{row['step']:4d} {row['tools/call_frequency']:16.2f} {row['tools/failure_frequency']:13.2f} "
          f"{row['rewards/MultiplyDesk/mean']:11.2f}")

# %%
fig, ax = plt.subplots(figsize=(6, 3))
steps = [r["step"] for r in history]
ax.plot(steps, [r["tools/call_frequency"] for r in history], marker="o", label="tools/call_frequency")
ax.plot(steps, [r["rewards/MultiplyDesk/mean"] for r in history], marker="s", label="desk reward (mean)")
ax.set_xlabel("optimizer step")
ax.set_ylim(-0.05, max(1.05, max(r["tools/call_frequency"] for r in history) + 0.05))
ax.legend(fontsize=8)
ax.set_title("GRPO with a tool after the warm-up")
plt.show()

# %% [markdown]
# What this run shows, and what it does not. The warm-up is what makes the tiny model write
# calls at all (before it, none of its turns opens a call: measured in
# `tests/lib/test_agents_warmup.py`), so `tools/call_frequency` starts near 1. Sampled at
# temperature 1, part of those calls are malformed and fail (`tools/failure_frequency`):
# the failure becomes an error message the model reads, never a crash. The tiny model
# learns the format before it learns to copy its prompt's numbers into the call, so most
# successful calls earn 0.2, not 1 (the greedy trajectory below calls on numbers of its
# own). Each step here trains on 8 rollouts (2 problems x 4 samples). In fast mode (4
# steps) we measured 0.88 to 1.00 calls per completion, 0 to 75% failed calls and a desk
# reward of 0.05 to 0.18, step to step; the full mode's 40 steps stayed in the same bands
# (calls 0.75 to 1.00, reward 0.00 to 0.18) with no trend. These changes are noise at
# this size: read the curve as the mechanism, not as a result. A measured before/after
# lift on held-out problems, with its interval, is the training demo still to come for
# this lesson.
#
# Last, a group of four trajectories the trained model samples for one problem, each with
# its desk reward and its GRPO advantage `(r - mean) / (std + 1e-4)` over the group: every
# trained (green) token of a trajectory is pushed up or down by that one number, and the
# masked (orange) tool tokens by nothing.

# %%
from course_lib.algos.grpo import group_advantages
from course_lib.rollout import HFEngine

G = 4
desks = [MultiplyDesk() for _ in range(G)]
for d in desks:
    d.reset(a=37, b=45)
group = run_agent_rollouts(HFEngine(trainer.model, tokenizer), tokenizer, prompt_ids * G,
                           [ToolBox([d.multiply]) for d in desks], SamplingConfig(temperature=1.0, seed=1, max_tokens=128),
                           max_tool_calling_iterations=1, max_completion_length=128, chat_template=TOOL_CHAT_TEMPLATE)
rewards = torch.tensor([d.get_reward() for d in desks])
advantages = group_advantages(rewards, G)
for k, (t, r, adv) in enumerate(zip(group.trajectories, rewards, advantages)):
    print(f"rollout {k}: reward {r:.1f}, advantage {adv:+.3f}, stop {t.stop}: {t.display_text()[:110]!r}")
if float(rewards.std()) == 0.0:
    print("all rewards of the group are equal: every advantage is 0, and this group teaches nothing")
for k in sorted({int(advantages.argmax()), int(advantages.argmin())}):
    t = group.trajectories[k]
    display(plot_trajectory_tokens(tokenizer, [], t.completion_ids, t.tool_mask, advantage=float(advantages[k]),
                                   title=f"Rollout {k} (reward {rewards[k]:.1f})."))

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
# 5. Before the warm-up, the tiny model's rollouts all score 0 on the desk's reward. What
#    does GRPO compute for them, and why does a supervised warm-up on scripted traces fix
#    it where more RL steps would not?
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
