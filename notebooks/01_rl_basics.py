# %% [markdown]
# # Lesson 01 — RL basics: rewards, patience, and moving probability
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/01_rl_basics.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 17 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# Reinforcement learning (RL) has a reputation for heavy maths. The core idea is small,
# and this lesson builds it from toys that run in milliseconds: a Pacman-like grid, a
# "language model" that answers *What is 2 + 2?* by picking from a list, and slot
# machines.
#
# In this lesson you will:
# 1. name the parts of an RL problem — **environment, agent, state, action, reward** —
#    on a grid with beans and ghosts, then on a language model;
# 2. see why "**luck (or patience) is all you need**": sample until a verifier says yes;
# 3. see what RL adds to waiting: it **pushes probability away from bad answers**, and
#    why it can do nothing when the right answer has probability zero;
# 4. tell a **verifier** from a **reward function**, and build rewards from small checks;
# 5. place **RLHF**, **RLVR** and **RFT** on the map;
# 6. meet exploration on a **bandit** and read **learning curves**.

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
from IPython.display import display

from course_lib.machine import fast_mode, scaled

print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. The goal of RL in two lines
#
# - make **good** outcomes **more** likely;
# - make **bad** outcomes **less** likely.
#
# That is the whole programme. The difficulty hides in the three words it leaves vague:
# what counts as *good* or *bad* (the reward), how exactly we *raise* or *lower* a
# probability (the algorithm: lessons 02-08), and what an *outcome* is (one move, a whole
# game, one token, a whole answer).

# %% [markdown]
# ## 2. The vocabulary, on a tiny Pacman
#
# | word | in Pacman | in our grid |
# |---|---|---|
# | **environment** | the maze and its rules | the grid below: walls `#`, beans `B`, ghosts `G` |
# | **agent** | Pacman | whoever picks the moves |
# | **state** | what the board looks like now | the agent's cell and which beans are left |
# | **action** | up, down, left, right | the same four moves |
# | **reward** | points for beans, losing a life to a ghost | +1 per bean, -1 for a ghost (game over), -0.04 per step |
#
# Nobody tells the agent which move is best. It only sees the rewards that come back
# along the way and how the game ends (all beans eaten, or caught by a ghost). Learning
# the best move from that feedback alone is the RL problem.
#
# Four more words, used in every lesson from here on:
#
# - a **policy** `pi(a | s)` is the agent's rule for acting: for each state `s`, a
#   probability for each action `a` (a fixed move per state is the special case with
#   probability 1). Learning means changing the policy; for a language model the policy
#   *is* the model's next-token distribution;
# - an **episode** is one game from start to end: reset, then act until the game is over.
#   The sequence it leaves behind, `s0, a0, r0, s1, a1, r1, ...`, is its **trajectory**;
# - the **return** `G` of an episode is the sum of its rewards, `G = r0 + r1 + r2 + ...`:
#   the score the agent tries to maximise on average, not any single reward;
# - with a **discount** `gamma` between 0 and 1, a reward `t` steps later counts
#   `gamma^t` times: `G = r0 + gamma r1 + gamma^2 r2 + ...`. `gamma < 1` prefers sooner
#   rewards (and keeps endless games finite); `gamma = 1` counts every reward the same,
#   the usual choice for language models, whose episodes (one answer) are short.
#
# The cell below plays one episode by hand, prints its trajectory, and adds up its return.

# %%
from course_lib.toy import GridWorld, render_grid, value_iteration

world = GridWorld()
print(render_grid(world))
state = world.reset()
episode_rewards = []
for t, (action, name) in enumerate([(3, "right"), (3, "right"), (3, "right")]):
    result = world.step(action)
    episode_rewards.append(result.reward)
    print(f"t={t}: move {name:<5} -> reward r{t} = {result.reward:+.2f}, event {result.event!r}, "
          f"episode over: {result.done}")
for gamma in (1.0, 0.95):
    episode_return = sum(gamma ** t * r for t, r in enumerate(episode_rewards))
    print(f"return with gamma = {gamma}: " + " + ".join(f"{gamma:g}^{t} x ({r:+.2f})" for t, r in enumerate(episode_rewards))
          + f" = {episode_return:+.4f}")

# %% [markdown]
# Three steps right walks into a ghost: -0.04 for each step and -1 for the ghost, and the
# episode ends there; discounting makes the late ghost cost a little less. Because
# this grid is tiny and its rules are known, **value iteration** can compute the best
# policy exactly (a planner, not a learner). We will use it as the ceiling that learners
# are measured against. The arrows show the best move from every cell while both beans
# are still on the board.

# %%
from course_lib.toy.plots import plot_gridworld

optimal_values, optimal_policy = value_iteration(world, gamma=0.95)
display(plot_gridworld(world, optimal_policy, title="Beans and ghosts: the optimal policy"))

# %% [markdown]
# ### Values and the Bellman equations
#
# What value iteration computes has a name. The **value** of a state under a policy,
# `V^pi(s)`, is the return to expect when the game starts in `s` and the agent follows
# `pi`: the average of `G` over all the episodes `pi` could play from there. Values
# obey one rule, the **Bellman expectation equation** (Sutton & Barto, eq. 4.5): one step
# of reward, then the value of wherever that step leads,
#
# $$V^\pi(s) = \sum_a \pi(a \mid s)\,\big[r(s, a) + \gamma\, V^\pi(s')\big],$$
#
# and the best achievable value, `V*(s)`, obeys the **Bellman optimality equation**
# (eq. 4.1), with a max where the policy's average was:
#
# $$V^*(s) = \max_a\,\big[r(s, a) + \gamma\, V^*(s')\big].$$
#
# Value iteration repeats the second as an update until nothing changes; **policy
# evaluation** repeats the first for a fixed policy. The cell checks both on the grid: the
# optimal values satisfy the optimality equation at the start, and the random walker's
# value from policy evaluation matches the mean discounted return of episodes it actually
# plays. `Q(s, a)`, met in section 12, is the bracket itself: the value of taking `a`
# first. For a language model, `V(prompt)` is the expected reward of the model's answers
# to that prompt, the quantity GRPO's group mean estimates (lesson 05) and PPO's critic
# learns (lesson 03).

# %%
import numpy as np

from course_lib.toy import policy_evaluation

start = world.start_state
backups = [world.transition(start, a) for a in range(world.n_actions)]
best = max(step.reward + 0.95 * (0.0 if step.done else optimal_values[step.state]) for step in backups)
print(f"V*(start) = {optimal_values[start]:.4f};  max over the 4 moves of r + 0.95 V*(next) = {best:.4f}")

uniform = np.full((world.n_states, world.n_actions), 0.25)
random_value = policy_evaluation(world, uniform, gamma=0.95)[start]
rng, played = np.random.default_rng(0), GridWorld(max_steps=2_000)
returns = []
for _ in range(scaled(500, 4000)):
    played.reset()
    total, discount, done = 0.0, 1.0, False
    while not done:
        step = played.step(int(rng.integers(4)))
        total, discount, done = total + discount * step.reward, discount * 0.95, step.done
    returns.append(total)
stderr = np.std(returns) / np.sqrt(len(returns))
print(f"random walker: V(start) = {random_value:.4f} by policy evaluation; "
      f"{np.mean(returns):.4f} ± {stderr:.4f} as the mean of {len(returns)} played episodes")

# %% [markdown]
# ## 3. The same words for a language model
#
# | word | for a language model |
# |---|---|
# | **agent** | the language model (its weights are what we train) |
# | **state** | the prompt, plus whatever the model has written so far |
# | **action** | the next token — or, zooming out, the whole answer |
# | **environment** | the task: the prompts we ask, and whatever scores the answers |
# | **reward** | a number for each answer, from a reward function, a reward model, or people |
#
# **RLHF** (reinforcement learning from human feedback), popularised by OpenAI, trains
# the agent to answer questions (states) in ways people rate as more useful. The thumbs
# up / thumbs down buttons under a ChatGPT answer are exactly that kind of signal.
#
# How this differs from ordinary fine-tuning: supervised fine-tuning raises the
# probability of the next word of text someone wrote; it never looks at a reward. RL
# scores the model's *own* outputs and optimises that score, so the model can learn how
# to reach good answers instead of memorising reference ones.

# %% [markdown]
# ## 4. "What is 2 + 2?" — the first reward function
#
# Ask a model that was never taught anything and it may say `3`, `4`, `C`, `D`, `-10`...
# Even so, some wrong answers are less wrong than others:
#
# - a number beats `C` or `D`;
# - `3` beats `8`: it is closer;
# - `4` is exactly right.
#
# Writing those preferences down as numbers *is* a reward function. Here are three ways
# to score the same answers (all from `course_lib`): a number check (+1 / -1), a
# correctness check (+3 / -3), and a proximity score (closer numbers score higher).

# %%
from course_lib.rewards import proximity_score
from course_lib.toy import combined_reward, correctness_reward, is_number_reward

print(f"{'answer':<8}{'number':>8}{'correct':>9}{'sum':>6}{'proximity':>11}")
for answer in ["3", "4", "C", "D", "-10", "8"]:
    print(f"{answer:<8}{is_number_reward(answer):>+8.0f}{correctness_reward(answer):>+9.0f}"
          f"{combined_reward(answer):>+6.0f}{proximity_score(answer, '4'):>+11.2f}")

# %% [markdown]
# ## 5. Luck (or patience) is all you need
#
# RL needs only two ingredients:
#
# 1. a **question or instruction**: "What is 2 + 2?", or "Write a Flappy Bird game in
#    Python";
# 2. a **reward function and a verifier** that say whether an output is good or bad.
#
# With those two, we could in principle just call the model again and again until a good
# answer shows up. An untrained model asked "What is 2 + 2?" might produce this stream —
# and the reward signal (1 when the verifier accepts, 0 otherwise) is a long run of
# zeros followed, suddenly, by a 1:

# %%
from course_lib.toy import binary_reward

stream = ["0", "cat", "-10", "1928", "3", "A", "B", "122", "17", "182", "172", "A", "C", "BAHS", "%$", "#",
          "9", "-192", "12.31", "4"]
print("answers:", ", ".join(stream))
print("reward: ", ", ".join(f"{binary_reward(a):.0f}" for a in stream))

# %% [markdown]
# Each try is called a **rollout**. If the right answer has *any* probability `p > 0`,
# waiting always works in the limit: the chance of still having no success after `n`
# tries is `(1 - p)^n`, which goes to 0, and on average it takes `1 / p` tries (a
# geometric distribution). The toy policy below is an "untrained model" that picks
# uniformly among 16 candidate answers, so `p = 1/16`.

# %%
from course_lib.toy import CANDIDATE_ANSWERS, AnswerPolicy, expected_attempts, sample_until_success

untrained = AnswerPolicy.uniform()
print("candidates:", CANDIDATE_ANSWERS)
tries = [sample_until_success(untrained, rng=np.random.default_rng(seed)) for seed in range(scaled(300, 3000))]
print(f"P('4') = {untrained.prob_of('4'):.4f}; average tries until success: {np.mean(tries):.1f} "
      f"(theory 1/p = {expected_attempts(untrained.prob_of('4')):.0f}); worst run: {max(tries)} tries")

# %% [markdown]
# ### Exercise 1 — sample until success
#
# Open `exercises/ex01_rl_basics.py` and implement `sample_until_success(probs,
# correct_index, rng, max_attempts)`: draw answers from the policy `probs` until the
# correct one appears and return the number of draws (or `None` after `max_attempts`
# failures). Then run the next cell.

# %%
from course_lib.checks import ex01
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex01_rl_basics")
feedback(ex01.check_sample_until_success, ex.sample_until_success);

# %% [markdown]
# ## 6. What RL adds: pushing probability away from bad answers
#
# Waiting works, but it is wasteful: every failed try carries information that pure
# waiting throws away. RL uses it. Each bad answer gets a low reward, and the update
# makes *that* answer less likely, so the probability it loses flows to the other
# answers. Long before `4` is sampled often, the model has already stopped saying `cat`.
# Over time the output distribution is carved away from the bad answers and pushed
# toward the region where good answers live.
#
# Below, the 16-answer policy is trained with REINFORCE (lesson 02 explains the update)
# for two reward functions:
#
# - the **binary** verifier reward (1 for `4`, else 0): nothing moves until the first
#   success, because every reward before it is 0;
# - the **number + correctness** sum (+1/-1 and +3/-3): bad answers are penalised from
#   the very first step, and numbers are preferred to letters.
#
# The two differ in a second way that is easy to miss: their **scale**. The binary reward
# spans 1 (from 0 to 1), the sum spans 8 (from -4 for `cat` to +4 for `4`). REINFORCE
# (here without a baseline) moves the logits by `lr × reward × ∇ log π`, so multiplying
# every reward by `c` is exactly the same update as multiplying the learning rate by `c`:
# **the reward's scale acts as a step size**. A fair comparison therefore also trains
# each reward at the other's scale: the binary reward × 8 and the sum ÷ 8.

# %%
from course_lib.toy import train_answer_policy
from course_lib.toy.plots import plot_answer_distribution, plot_learning_curves

seeds = range(scaled(5, 20))
steps = scaled(60, 150)
reward_functions = {
    "binary (0/1, spread 1)": binary_reward,
    "binary x 8 (spread 8)": lambda answer: 8 * binary_reward(answer),
    "number + correctness (spread 8)": combined_reward,
    "number + correctness / 8 (spread 1)": lambda answer: combined_reward(answer) / 8,
}
runs = {label: [train_answer_policy(reward_fn=fn, steps=steps, seed=s) for s in seeds]
        for label, fn in reward_functions.items()}
display(plot_learning_curves([[run.prob_correct for run in group] for group in runs.values()], list(runs),
                             title="REINFORCE on 'What is 2 + 2?'", xlabel="training step (8 samples each)",
                             ylabel="P('4')", limits=(0.0, 1.0)))
print(f"{f'mean P(4) over {len(seeds)} seeds':<36}{'step 10':>9}{'step 30':>9}{'step 60':>9}")
for label, group in runs.items():
    p = np.array([run.prob_correct for run in group])  # (seeds, steps + 1)
    print(f"{label:<36}{p[:, 10].mean():>9.2f}{p[:, 30].mean():>9.2f}{p[:, 60].mean():>9.2f}")

# %% [markdown]
# Compare curves of the same spread. At spread 8 the binary reward and the sum climb
# equally fast, and at spread 1 both are slow; most of the gap between the original pair
# (binary 0/1 against the sum) is the factor 8 in step size, not the shaping. Over 200
# seeds (measured separately with the same function) P('4') at step 10 was 0.09 for the
# binary reward, 0.88 for binary × 8, 0.89 for the sum and 0.08 for the sum ÷ 8; at step
# 60, 0.87, 1.00, 0.99 and 0.78. On this easy prompt, where a batch of 8 finds `4` in the
# first step 40% of the time, shaping buys little speed; what it changes is *what* moves
# before the first success (next figure), which matters when the right answer is rare
# (the explorer at the end of this lesson). When you change a reward, keep its scale in
# mind, or normalise it (GRPO's group advantages of lesson 05 divide by the spread).
#
# The band around each curve is one standard deviation over seeds, cut at 0 and 1
# because a probability cannot leave them.
#
# Where did the probability go? Early on, the picture is uneven: an answer that was
# *sampled* and scored badly loses probability, and since probabilities sum to 1, the
# answers that were not sampled at all gain a little — even `cat`, if it happened not to
# come up. Only answers that keep being sampled keep being judged. After enough steps
# almost everything sits on `4`.

# %%
shaped_run = runs["number + correctness (spread 8)"][0]
early = train_answer_policy(reward_fn=combined_reward, steps=3, seed=0)
display(plot_answer_distribution(untrained.probs, early.policy.probs, CANDIDATE_ANSWERS,
                                 title="After 3 steps (24 samples): sampled bad answers lose, unsampled ones gain"))
display(plot_answer_distribution(untrained.probs, shaped_run.policy.probs, CANDIDATE_ANSWERS,
                                 title=f"After {steps} steps"))

# %% [markdown]
# ## 7. Probability zero never learns
#
# The patience argument needs `p > 0`. If the model *never* produces the right answer,
# it is never sampled, never rewarded, and no update ever points toward it. RL can only
# sharpen what the model already does sometimes. That is why RL for language models
# starts from a model that already produces good answers some of the time. Most often it
# is an **instruction-tuned** model, one that already follows instructions partly and
# sensibly. It need not be: DeepSeek-R1-Zero (DeepSeek-AI 2025) was trained with RL
# directly from the **base** model DeepSeek-V3-Base, with no supervised fine-tuning
# first; a large base model prompted with a template already solves some maths problems,
# which is all RL needs.

# %%
probs_without_4 = np.r_[np.full(15, 1 / 15), 0.0]  # '4' is the last candidate
zero = train_answer_policy(AnswerPolicy.from_probs(probs_without_4), reward_fn=combined_reward, steps=steps, seed=0)
print(f"P('4') with p = 0 at the start: {zero.prob_correct[0]:.3f} -> {zero.prob_correct[-1]:.3f} after {steps} steps")
print("where the probability went instead:",
      {a: round(float(p), 3) for a, p in zip(CANDIDATE_ANSWERS, zero.policy.probs) if p > 0.05})

# %% [markdown]
# With `4` out of reach, RL still did its job on the reward it was given: it moved
# everything to the *numbers* (+1 each), because that is the best it could find.
#
# ## 8. Verifier vs reward function
#
# The two words are often used interchangeably, and in practice they work together,
# but they do different jobs:
#
# | | verifier | reward function |
# |---|---|---|
# | answers | "is this right?" — yes or no | "how good is this?" — a number |
# | example | the model says `5` for 2 + 2: the verifier marks it wrong | wrong: -1 or -2; right: +1 or +2 |
# | can also | run code (e.g. Python) to test logic, syntax and results, with no human in the loop | penalise things unrelated to correctness: excessive length, poor readability |
# | does not | give a score | necessarily check correctness itself |
#
# A reward function often *calls* a verifier and converts its verdict into a number.

# %%
from course_lib.sandbox import run_tests
from course_lib.toy import verify_answer

print("verifier on '5' for 2 + 2:", verify_answer("5", "4"), "| on '4.0':", verify_answer("4.0", "4"))

# A code verifier: run the model's program against tests in a sandboxed process.
program = "def add(a, b):\n    return a + b\n"
buggy = "def add(a, b):\n    return a * b\n"
tests = ["assert add(2, 2) == 4", "assert add(2, 3) == 5"]
try:
    print("correct program passes:", run_tests(program, tests).passed)
    print("buggy program passes:  ", run_tests(buggy, tests).passed, "(2 * 2 == 4 fools one test)")
except RuntimeError as error:  # the sandbox refuses to run code where it cannot isolate it
    print(error)

# %% [markdown]
# ### Exercise 2 — a reward built on a verifier
#
# Implement `verifier_reward(answer, target, verifier)`: +1 if the answer is a number,
# -1 otherwise, plus +3 if the `verifier` accepts it, -3 otherwise. The verifier is
# passed in: your reward turns its verdict into a score and never re-checks the answer.

# %%
ex = load_exercise("ex01_rl_basics")
feedback(ex01.check_verifier_reward, ex.verifier_reward);

# %% [markdown]
# ## 9. Designing rewards: two examples
#
# **Example 1 — simple arithmetic.** Question `2 + 2`, answer `4`. Reward function 1:
# +1 if a number is detected, -1 if not. Reward function 2: +3 if the number equals the
# right answer, -3 if not. Total reward: the sum of all reward functions. (This is
# exactly Exercise 2.)
#
# **Example 2 — e-mail automation.** The question is an incoming e-mail, the answer is
# the reply. A rubric of small checks, each +1 or -1:
#
# - +1 if the reply contains the required keywords;
# - +1 if the reply matches the ideal reply exactly;
# - -1 if the reply is too long;
# - +1 if it uses the recipient's name;
# - +1 if it has a signature block (phone, e-mail, address).
#
# `course_lib.rewards.rubric` sums such checks, and `predicate_reward` turns a yes/no
# test on the text into a reward.

# %%
import re

from course_lib.rewards import predicate_reward, rubric

ideal_reply = "Hi Dana, your refund for order 1042 was sent today."


def mentions(*words):
    return lambda text: all(word.lower() in text.lower() for word in words)


checks = {
    "has_keywords": (1.0, predicate_reward(mentions("refund", "1042"), name="has_keywords")),
    "exact_match": (1.0, predicate_reward(lambda text: text.strip() == ideal_reply, name="exact_match")),
    "too_long": (-1.0, predicate_reward(lambda text: len(text.split()) > 60, name="too_long")),
    "uses_name": (1.0, predicate_reward(mentions("Dana"), name="uses_name")),
    "signature": (1.0, predicate_reward(lambda text: bool(re.search(r"(phone|tel)[: ]", text, re.I)) and "@" in text,
                                        name="signature")),
}
email_reward = rubric(*checks.values(), name="email_rubric")
replies = [
    ideal_reply,
    "Hi Dana, your refund for order 1042 was sent today.\n--\nSam, Support\nphone: 555-0100, sam@shop.example",
    "Dear customer, we are looking into it. " * 12,
]
print(" ".join(f"{name:>12}" for name in checks), f"{'total':>7}  reply")
for i, (reply, total) in enumerate(zip(replies, email_reward(prompts=None, completions=replies))):
    # "+ 0.0" turns the -0.0 of a weighted zero into 0.0 for printing.
    parts = [weight * check(prompts=None, completions=[reply])[0] + 0.0 for weight, check in checks.values()]
    print(" ".join(f"{part:>+12.0f}" for part in parts), f"{total:>+7.0f}  {reply[:40]!r}...")

# %% [markdown]
# The ideal reply and the signed one tie at +3 for different reasons: one matches
# exactly, the other earns the signature point. A rubric shows *why* a reply scored what
# it did, which makes a reward much easier to debug than one opaque number.

# %% [markdown]
# There is no single right way to design a reward function or a verifier, and a badly
# designed one can quietly make the model worse (it learns what you *scored*, not what
# you *meant*). One practical trick: show a batch of your model's outputs to a strong
# language model (GPT-4o, or an open model such as Llama 3.1 8B) and have it help you
# write scoring rules, for example "if the answer sounds too robotic, subtract 3
# points". Lesson 09 builds a full reward toolbox.
#
# ## 10. RLHF, RLVR and RFT
#
# - **RLHF** — *RL from human feedback*. People compare or rate answers; a **reward
#   model** is trained to predict their preferences, and the policy is optimised
#   against it, classically with **PPO** (lesson 03).
# - **RLVR** — *RL with verifiable rewards*. The reward comes from a check that can be
#   computed: math answers are easy to verify (2 + 2 = 4), code can be run to see if it
#   executes correctly. Writing verifiable rewards is hard in general, so most examples
#   are math or code — but the same recipe (with GRPO, lesson 05) improves e-mail
#   automation, database queries, law or medicine when you can write a **rubric**: many
#   small verifiable rewards instead of one all-knowing score.
# - **RFT** — *reinforcement fine-tuning*, OpenAI's service that fine-tunes a model
#   with RL against graders you define: the rubric idea, offered as a product.
#
# ## 11. Bandits: one prompt, many answers
#
# A model answering one fixed prompt is a **multi-armed bandit**: one state, many actions
# (arms), each paying a random reward. The agent must **explore** (try arms it knows
# little about) and **exploit** (pull the arm that looks best). Epsilon-greedy is the
# simplest compromise: explore with probability epsilon, exploit otherwise.
#
# ### Exercise 3 — epsilon-greedy
#
# Implement `epsilon_greedy_action(values, epsilon, rng)`.

# %%
ex = load_exercise("ex01_rl_basics")
feedback(ex01.check_epsilon_greedy_action, ex.epsilon_greedy_action);

# %% [markdown]
# Now four agents play the 10-armed testbed of Sutton & Barto (each run a freshly drawn
# bandit, arm means from N(0, 1)). The pure greedy agent (epsilon = 0) locks onto the
# first arm that paid well; epsilon = 0.1 keeps exploring; UCB1 explores where it is
# uncertain. **Regret** is the reward lost compared with always pulling the best arm.

# %%
from course_lib.toy import UCB1, EpsilonGreedy, RandomAgent, compare_agents, make_testbed
from course_lib.toy.plots import plot_bandit_comparison

agents = {
    "random": RandomAgent,
    "greedy (eps=0)": lambda k: EpsilonGreedy(k, epsilon=0.0),
    "eps-greedy (eps=0.1)": lambda k: EpsilonGreedy(k, epsilon=0.1),
    "UCB1": UCB1,
}
comparison = compare_agents(agents, make_testbed, steps=scaled(300, 1000), seeds=range(scaled(20, 200)))
display(plot_bandit_comparison(comparison, title="10-armed testbed"))

# %% [markdown]
# ## 12. Learning curves on the grid
#
# Back to beans and ghosts. Four agents learn from scratch: a random walker (the floor),
# REINFORCE with and without a baseline (lesson 02), and Q-learning. The dashed line is
# the score of the optimal policy from value iteration. A **learning curve** plots the
# score of each training episode; the band is one standard deviation over seeds.
#
# **Q-learning** (Watkins 1989; Sutton & Barto, section 6.5) is the classic *value-based*
# method, here as the contrast to the policy-gradient methods this course builds on. It
# learns a table `Q(s, a)`: the discounted score to expect after taking action `a` in
# state `s` and acting as well as possible afterwards. After every single move
# `(s, a, r, s')` it nudges that entry toward a target built from its own estimates,
#
# $$Q(s, a) \leftarrow Q(s, a) + \alpha\,\big(r + \gamma \max_{a'} Q(s', a') - Q(s, a)\big)$$
#
# (here `α = 0.5`, `γ = 0.95`), and it acts ε-greedily on `Q` (ε = 0.1, section 11's
# explore/exploit rule); its policy is whatever action `Q` rates highest. REINFORCE
# instead learns the action probabilities directly and waits for the end of an episode.
# On a grid of 80 states (positions × beans left) and 4 moves a table is cheap. Its
# curve stays a little below the optimum because 10% of its moves are random (full mode,
# last 100 of 1,000 episodes, mean of 10 seeds: 1.57 against the optimal 1.68; REINFORCE
# with a baseline 1.66). For a
# language model the "actions" are a vocabulary and the states every possible prefix, far
# too many for a table, which is why RL for LLMs uses the policy-gradient family
# (lessons 02 to 08).

# %%
from course_lib.toy import train_gridworld

episodes, grid_seeds = scaled(300, 1000), range(scaled(3, 10))
methods = ["random", "reinforce", "reinforce_baseline", "q_learning"]
curves = {m: [train_gridworld(m, episodes=episodes, seed=s) for s in grid_seeds] for m in methods}
display(plot_learning_curves([[c.returns for c in curves[m]] for m in methods], methods,
                             title="Beans and ghosts", ylabel="score of the episode", smooth=20,
                             optimal=curves["random"][0].optimal_score, optimal_label="optimal (value iteration)"))

# %% [markdown]
# What the REINFORCE agent learned, drawn as arrows (longer, darker = more certain):

# %%
learned = curves["reinforce_baseline"][0].policy
display(plot_gridworld(world, learned, title="Learned by REINFORCE with baseline: both beans on the board"))
# Bean 1 is the bottom-left one: with only bean 0 left (mask 0b01) the arrows lead to it.
display(plot_gridworld(world, learned, bean_mask=0b01, title="... and after eating the bottom-left bean"))

# %% [markdown]
# ### Explore: how much does the starting probability matter?
#
# Move the sliders: the initial probability of `4` (the rest is spread evenly over the
# other 15 answers), the reward, and the learning rate. The smaller the starting
# probability, the longer the wait, and with a tiny one RL may settle on other numbers
# before it finds `4` (at exactly 0, as in section 7, it never does).

# %%
def patience_figure(p_correct=0.02, reward="number + correctness", lr=0.5, steps=150):
    probs = np.r_[np.full(15, (1 - p_correct) / 15), p_correct]
    reward_fn = binary_reward if reward == "binary" else combined_reward
    traces = [train_answer_policy(AnswerPolicy.from_probs(probs), reward_fn=reward_fn, steps=steps, lr=lr, seed=s)
              for s in range(10)]
    return plot_learning_curves([[t.prob_correct for t in traces]], [f"P('4') starts at {p_correct:g}"],
                                title=f"{reward} reward, lr={lr:g}", xlabel="training step", ylabel="P('4')",
                                limits=(0.0, 1.0))


try:
    import ipywidgets as widgets
except ImportError:  # no widgets here: the static figure below shows the idea
    widgets = None
if widgets is not None:
    display(widgets.interactive(
        lambda p_correct, reward, lr: display(patience_figure(p_correct, reward, lr, steps=scaled(60, 150))),
        p_correct=widgets.FloatLogSlider(value=0.02, base=10, min=-4, max=-0.3, description="P('4')",
                                         continuous_update=False),
        reward=widgets.Dropdown(options=["number + correctness", "binary"], description="reward"),
        lr=widgets.FloatSlider(value=0.5, min=0.05, max=2.0, step=0.05, description="lr", continuous_update=False)))
else:
    display(patience_figure(steps=scaled(60, 150)))

# %% [markdown]
# ## Questions
#
# 1. The stream of answers in section 5 had rewards 0, 0, ..., 0, 1 under the binary
#    reward. Which answers in it would the number + correctness reward already rank,
#    and how does that change what RL can learn before the first `4`?
# 2. In section 7 the policy without `4` put its probability on numbers. Write a reward
#    for which that same policy would instead drift toward `3` and `9`. Is that good?
# 3. A verifier for code runs the program against tests. How could a policy earn a high
#    reward without writing correct code, and what would you add to the reward to stop
#    it?
# 4. Pure greedy (epsilon = 0) did worse than epsilon = 0.1 on the testbed. For a
#    language model, what plays the role of epsilon — where does its exploration come
#    from?
# 5. The e-mail rubric gives +1 for an exact match with the ideal reply. What happens to
#    the learning signal if almost no sampled reply ever matches exactly?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("01", k)`
# prints the answer to question k (`show_answer("01")` prints them all). They are also in
# `notebooks/answers/01_rl_basics.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("01", 1)
