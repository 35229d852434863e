# %% [markdown]
# # Lesson 14 — When RL pays: SFT, rejection sampling, DPO and distillation beside GRPO
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/14_post_training.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 22 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# Every lesson so far trained with RL. A real project starts with another question: *should I
# use RL here at all, and what do I try first?* TRL ships `SFTTrainer`, `DPOTrainer` and
# `DistillationTrainer` next to `GRPOTrainer`, and so does `course_lib`: the same loop, the
# same history, checkpoints and command line, with `--algo sft|rejection|dpo|distill`.
#
# In this lesson you will:
# 1. see what each method optimises and what it needs (demonstrations, a verifier, pairs, a teacher);
# 2. build the pieces: SFT's completion-only loss and packing without cross-example attention,
#    the rejection-sampling filter, DPO's loss from log-prob sums, on-policy distillation's
#    dense per-token signal;
# 3. compare the five methods on one task from the same start at the **same compute**, and read
#    the measured table honestly, including where RL loses.

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
import tempfile
import warnings

import matplotlib.pyplot as plt
import torch

from course_lib.algos import make_config
from course_lib.algos.distill import check_teacher, generalized_jsd, reverse_kl_token_advantages
from course_lib.algos.dpo import dpo_loss
from course_lib.post_training.data import demonstrations, preference_pairs
from course_lib.algos.rejection import rejection_filter
from course_lib.algos.sft import pack_examples, packed_attention_mask, packed_logps, sft_loss, tokenize_prompt_and_output
from course_lib.checks import ex14
from course_lib.data import get_task
from course_lib.feedback import feedback
from course_lib.grading import load_exercise
from course_lib.machine import fast_mode, scaled
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer

warnings.filterwarnings("ignore")
torch.manual_seed(0)
base, tokenizer = load_policy("tiny", dtype="float32")
CORRECT = get_reward_functions(["correctness_first_number_reward"])
train = get_task("arithmetic", split="train", n=200, seed=0)
print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. Five objectives, four kinds of data
#
# Write $\pi_\theta$ for the policy, $x$ for a prompt, $y$ for a completion.
#
# | method | maximises | needs |
# |---|---|---|
# | **SFT** | $\mathbb{E}_{(x,y)\sim D}\,\log\pi_\theta(y\mid x)$: the likelihood of demonstrations, on the completion tokens only | demonstrations $y$ |
# | **rejection sampling** (STaR, RAFT, ReST-EM) | the same likelihood, on the policy's *own* samples that a verifier accepts: $\mathbb{E}_{y\sim\pi}\,[\,\mathbb{1}[r(x,y)\ge\tau]\,\log\pi_\theta(y\mid x)\,]$, sample again, repeat | a verifier |
# | **DPO** | the Bradley-Terry likelihood of preferences with the implicit reward $\beta\log\frac{\pi_\theta(y\mid x)}{\pi_{\text{ref}}(y\mid x)}$ | pairs (chosen, rejected) and a frozen reference |
# | **GRPO** | $\mathbb{E}_{y\sim\pi}[r(x,y)]$ by policy gradient with group-relative advantages (lessons 05-06) | a verifier (or reward model) |
# | **on-policy distillation** | $-\mathbb{E}_{y\sim\pi}\sum_t \mathrm{KL}\big(\pi_\theta(\cdot\mid x,y_{<t})\,\Vert\,\pi_{T}(\cdot\mid x,y_{<t})\big)$, the reverse KL to a teacher on the student's own samples | a teacher with the same tokenizer |
#
# Rejection sampling is a policy gradient whose advantage is 1 on accepted and 0 on rejected
# samples: no baseline, no push *away* from wrong answers, so it can only sharpen what the
# policy already samples. DPO comes from the KL-regularised RL objective
# $\max_\pi \mathbb{E}[r] - \beta\,\mathrm{KL}(\pi\Vert\pi_{\text{ref}})$, whose optimum is
# $\pi^*(y\mid x) \propto \pi_{\text{ref}}(y\mid x)\,e^{r(x,y)/\beta}$; so
# $r(x,y) = \beta\log\frac{\pi^*(y\mid x)}{\pi_{\text{ref}}(y\mid x)} + \beta\log Z(x)$, and in the
# Bradley-Terry likelihood $\sigma(r(x,y_w) - r(x,y_l))$ the partition function $Z(x)$
# cancels: DPO fits that reward without sampling (Rafailov et al. 2023, eq. 7). Distillation's
# reward is per token and dense: every position of every sample says how far the student is
# from the teacher, where GRPO's verifier gives one number per completion.

# %% [markdown]
# ## 2. SFT: the completion-only loss, normalised like TRL, and packing
#
# `tokenize_prompt_and_output` tokenises a prompt and its output separately (joining the
# strings first could merge a token across the boundary), joins them, shifts by one, and marks
# the labels that belong to the output: the loss is taken there only.

# %%
rows = tokenize_prompt_and_output(["What is 2 + 3? ", "7 - 4 = "], ["5", "3"], tokenizer)
for ids, labels, mask in zip(rows.input_ids, rows.labels, rows.response_mask):
    print("reads  ", repr(tokenizer.decode(ids)))
    print("predicts", [tokenizer.decode([t]) if m else "." for t, m in zip(labels.tolist(), mask.tolist())])

# %% [markdown]
# **Normalisation under gradient accumulation.** TRL's `SFTTrainer.compute_loss` sums the
# token losses of a micro-batch and divides by `num_items_in_batch`, the completion tokens of
# *every* micro-batch of the optimizer step. Dividing each micro-batch by its own token count
# instead would weigh a token of a short micro-batch more than one of a long micro-batch.
# Here two micro-batches of 1 and 3 rows (3 and 13 tokens) give exactly the gradient of the
# whole batch only with the window's count; `tests/lib/test_losses_trl_parity_post_training.py`
# checks the loss, every parameter's gradient and TRL's logged metrics against
# `SFTTrainer.compute_loss` itself.

# %%
logps = -torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
mask = torch.tensor([[1, 1, 1, 0, 0, 0]] + [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]])
whole = sft_loss(logps, mask)
window = sft_loss(logps[:1], mask[:1], 16) + sft_loss(logps[1:], mask[1:], 16)
own = (sft_loss(logps[:1], mask[:1]) + sft_loss(logps[1:], mask[1:])) / 2
print(f"whole batch {whole:.4f} | two micro-batches / window tokens {window:.4f} | each / its own tokens, averaged {own:.4f}")

# %% [markdown]
# **Packing.** Short examples waste most of a padded row. TRL's `packing=True` lays several
# examples end to end; the position ids restart at each example, and the attention must not
# cross from one example into the previous one: a block-diagonal causal mask. Without the
# blocks the second example of a row would read the first, and the model would learn from a
# context it never sees at inference. The trainer packs this way with
# `make_config("sft", packing=True)`: each micro-batch's examples in one row, the same loss and
# gradients as unpacked (`tests/lib/test_sft_packing.py`). For multi-turn chats, SFT reads
# `messages` rows, and `assistant_only_loss=True` trains only the assistant's turns: the mask
# comes from rendering prefixes of the conversation (`course_lib.post_training.conversations`).

# %%
examples = [[2, 10, 11, 12, 30, 3], [2, 13, 31, 3], [2, 14, 15, 32, 33, 3], [2, 16, 34]]
masks = [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 1]]
packed = pack_examples(examples, masks, max_length=12)
print("segments ", packed.segment_ids[0].tolist())
print("positions", packed.position_ids[0].tolist())
with torch.no_grad():
    together = packed_logps(base.eval(), packed)
    alone = torch.log_softmax(base(input_ids=torch.tensor([examples[1]])).logits[0, :-1], -1)
    alone = alone.gather(-1, torch.tensor(examples[1][1:]).unsqueeze(-1)).squeeze(-1)
print("example 2 packed vs alone, largest difference:", f"{(together[0, 7:10] - alone).abs().max():.2e}")
fig, ax = plt.subplots(figsize=(3.2, 3.2))
ax.imshow(packed_attention_mask(packed.segment_ids)[0, 0] == 0, cmap="Greens")
ax.set_title("who reads whom (row 1)")
ax.set_xlabel("key token")
ax.set_ylabel("query token")
plt.show()

# %% [markdown]
# ## 3. Rejection sampling (expert iteration)
#
# Sample `num_generations` completions per prompt from the current policy, keep those the
# verifier accepts, train on them with the SFT loss; one generation batch is one round. A
# round that keeps nothing is logged (`rejection/kept_fraction` 0, loss 0) with a warning, not
# an error: on a hard task with a weak model that is the usual first sign that it cannot
# bootstrap.

# %%
print(rejection_filter(torch.tensor([1.0, 0.0, float("nan"), 1.0]), threshold=1.0))
with tempfile.TemporaryDirectory() as folder:
    config = make_config("rejection", output_dir=folder, learning_rate=3e-4, per_device_train_batch_size=32,
                         num_generations=8, max_completion_length=6, max_steps=scaled(2, 20), logging_steps=1)
    history = Trainer(config, CORRECT, train, copy.deepcopy(base), tokenizer, progress=False).train()
print("kept fraction per round:", [round(r["rejection/kept_fraction"], 2) for r in history])

# %% [markdown]
# ## 4. DPO
#
# `dpo_loss` takes the *summed* completion log-probs of the chosen and rejected answers under
# the policy and the reference. The pairs here come from the start model's own samples: four
# answers per prompt, scored by the verifier; a prompt with a right and a wrong answer gives a
# pair. TRL's logged `rewards/chosen`, `rewards/rejected`, `rewards/margins` and
# `rewards/accuracies` are the implicit rewards $\beta\log\pi/\pi_{\text{ref}}$: at the first
# step the policy is the reference, so every reward and margin is 0. DPO's KL is the reverse
# KL; `f_divergence_type` (TRL's field, f-DPO) puts another divergence's $f'(\pi/\pi_{\text{ref}})$
# where the log-ratio stands, e.g. `js_divergence`: $\log 2 + \log\sigma(\log\pi/\pi_{\text{ref}})$
# (`course_lib.algos.dpo.f_divergence_scores`).

# %%
out = dpo_loss(torch.tensor([-2.0]), torch.tensor([-5.0]), torch.tensor([-3.0]), torch.tensor([-4.0]), beta=0.1)
print(f"delta = (-2 + 3) - (-5 + 4) = 2: loss -log sigmoid(0.2) = {out.loss:.4f}", out.metrics)
pairs, stats = preference_pairs(base, tokenizer, train.select(range(scaled(24, 200))), CORRECT, k=4, max_tokens=6)
print(stats)
from datasets import Dataset  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    config = make_config("dpo", output_dir=folder, learning_rate=1e-4, per_device_train_batch_size=16,
                         max_completion_length=6, max_steps=scaled(2, 20), logging_steps=1)
    history = Trainer(config, None, Dataset.from_list(pairs), copy.deepcopy(base), tokenizer, progress=False).train()
print("rewards/margins per step:", [round(r["rewards/margins"], 3) for r in history])

# %% [markdown]
# ## 5. On-policy distillation
#
# The student samples; the teacher scores every token of those samples. TRL 1.16's
# `DistillationTrainer` minimises the generalized Jensen-Shannon divergence with `beta`: the
# mixture is $m = (1-\beta)\,p_s + \beta\,p_t$ and the divergence
# $\beta\,\mathrm{KL}(p_t\Vert m) + (1-\beta)\,\mathrm{KL}(p_s\Vert m)$, with $\beta=1$ the
# reverse KL $\mathrm{KL}(p_s\Vert p_t)$ (its default: mode seeking, the student is punished
# for putting mass where the teacher puts none), $\beta=0$ the forward KL (mode covering) and
# $\beta=0.5$ the JSD. Below, a teacher that splits its mass between two tokens and students
# that put a share $q$ on the first: the reverse KL is smallest when the student commits to
# one mode, the forward KL when it covers both.

# %%
q = torch.linspace(0.02, 0.98, 49)
teacher = torch.log(torch.tensor([0.5, 0.45, 0.05])).expand(len(q), 1, 3)
student = torch.log(torch.stack([q * 0.97, (1 - q) * 0.97, torch.full_like(q, 0.03)], -1)).unsqueeze(1)
fig, ax = plt.subplots(figsize=(5, 3))
for beta, name in ((1.0, "reverse KL (beta=1)"), (0.5, "JSD (beta=0.5)"), (0.0, "forward KL (beta=0)")):
    _, per_token = generalized_jsd(student, teacher, torch.ones(len(q), 1), beta)
    ax.plot(q, per_token[:, 0], label=name)
ax.set_xlabel("student's probability of token 1")
ax.set_ylabel("divergence")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# **Dense signal.** Seen as RL, the per-token reward is $\log p_t(y_t) - \log p_s(y_t)$ on each
# sampled token (`reverse_kl_token_advantages`): every token of every sample carries its own
# signal, where a verifier gives one number per completion. The teacher here is the start model
# after a short SFT run (the benchmark trains its teacher the same way, no download).

# %%
teacher_model = copy.deepcopy(base)
with tempfile.TemporaryDirectory() as folder:
    config = make_config("sft", output_dir=folder, learning_rate=3e-4, per_device_train_batch_size=32,
                         max_completion_length=6, max_steps=scaled(3, 100))
    Trainer(config, None, demonstrations(train), teacher_model, tokenizer, progress=False).train()
from course_lib.policy import completion_forward  # noqa: E402
from course_lib.rollout import HFEngine, SamplingConfig  # noqa: E402

sample = HFEngine(base, tokenizer).generate(train["prompt"][:1], n=1, sampling=SamplingConfig(max_tokens=6, seed=1))
with torch.no_grad():
    args = (sample.prompt_ids, sample.prompt_mask, sample.completion_ids, sample.completion_mask)
    s_logps = completion_forward(base, *args)[0]
    t_logps = completion_forward(teacher_model.eval(), *args)[0]
advantages = reverse_kl_token_advantages(s_logps, t_logps, sample.completion_mask)
tokens = [tokenizer.decode([t]) for t in sample.completion_ids[0][sample.completion_mask[0].bool()].tolist()]
print(train["question"][0], "-> sampled", repr(sample.texts[0]), "answer", train["answer"][0])
print("per-token advantage:", {tok: round(a, 2) for tok, a in zip(tokens, advantages[0].tolist())})
other = copy.deepcopy(tokenizer)
other.add_tokens(["<other>"])
try:
    check_teacher(tokenizer, other, base, teacher_model)
except ValueError as error:
    print("refused:", str(error)[:160], "...")

# %% [markdown]
# ## 6. The measurement: five methods, one task, the same budget
#
# `benchmarks/post_training.py` trains each method from the same start (the tiny model, 32%
# greedy accuracy on two-digit additions) until it has spent the same number of tokens through
# the model: tokens sampled plus tokens in forward passes that learn or score (the reference
# of DPO, the teacher of distillation). Below, a small version runs here (fast mode: SFT and
# GRPO, a budget of a few thousand tokens, 20 held-out problems); the full table follows.

# %%
# The benchmark lives beside the package in the course folder (found from course_lib itself,
# so the cell works whatever folder the notebook was opened from).
import course_lib  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(course_lib.__file__))), "benchmarks"))
import post_training  # noqa: E402

post_training.main(["--methods", scaled("sft,grpo", "sft,rejection,dpo,grpo,distill"),
                    "--budget", str(scaled(2500, 40000)), "--eval-n", str(scaled(16, 200)),
                    "--curve-n", str(scaled(8, 100)), "--curve-points", str(scaled(1, 4)),
                    "--pass-n", str(scaled(4, 50)), "--k", str(scaled(2, 8)), "--train-rows", str(scaled(200, 2000)),
                    "--teacher-steps", "200"]);

# %% [markdown]
# ### The measured table
#
# The full run (`benchmarks/post_training.py --budget 40000 --eval-n 200 --curve-n 100
# --curve-points 4 --pass-n 50 --k 8 --teacher-steps 200`, one seed, a shared 2-core CPU;
# `benchmarks/README.md` has the settings and the whole reading): 40,000 tokens each, 200
# held-out problems, pass@k from 8 samples on 50 problems, the shifted set three-digit additions.
#
# | method | steps | held-out greedy % [95% CI] | paired lift, points [95% CI] | pass@1 % | pass@8 % | shifted % |
# |---|---|---|---|---|---|---|
# | start model | 0 | 32.0 [25.9, 38.8] | - | 15.5 | 66.0 | 0.0 |
# | SFT (lr 3e-4) | 33 | 59.0 [52.1, 65.6] | +27.0 [+18.8, +35.2] | 35.8 | 92.0 | 0.0 |
# | rejection sampling (lr 3e-4) | 17 | 9.0 [5.8, 13.8] | -23.0 [-29.9, -16.1] | 7.0 | 36.0 | 0.0 |
# | DPO (lr 1e-4, beta 0.1) | 10 | 16.0 [11.6, 21.7] | -16.0 [-23.3, -8.7] | 11.2 | 44.0 | 0.0 |
# | GRPO (lr 3e-5, the preset) | 17 | 35.5 [29.2, 42.3] | +3.5 [-1.2, +8.2] | 20.0 | 66.0 | 0.0 |
# | distillation (lr 3e-4, beta 1) | 11 | 42.0 [35.4, 48.9] | +10.0 [+2.8, +17.2] | 25.2 | 80.0 | 0.0 |
#
# Read it with its intervals:
#
# - **SFT wins**: the only lift far from 0, and it widens the model too (pass@8 66% -> 92%). When
#   the right answers are known, demonstrations are the cheapest signal there is.
# - **RL loses here**: GRPO's +3.5 points is inside its noise at this budget; half of each step
#   pays for sampling, and its stable learning rate needs about 200 steps for +21.5 points
#   (`tests/lib/test_learning.py`), not 17.
# - **Distillation beats GRPO** (+10 [+2.8, +17.2]) with no reward at all, because every token
#   carries a signal; but its teacher (the start model after 200 SFT steps, 95% held out) cost
#   six times this budget to make.
# - **Rejection sampling and DPO got worse** at the learning rates chosen for them. A few accepted
#   3-token answers a step, or 54 pairs, at a learning rate ten or three times GRPO's, move the
#   model off what it knew. A second run at GRPO's learning rate (3e-5) for SFT, rejection
#   sampling and DPO measured SFT +8.5 [+2.5, +14.5], rejection sampling +5.5 [+0.5, +10.5] and
#   DPO +5.5 [+0.6, +10.4] beside GRPO's +3.5 [-1.2, +8.2]: all up, intervals overlapping, so at
#   one learning rate the table cannot order them. The collapse was the setting, not the method.
# - **The shifted set says nothing**: every method stays at 0% on three-digit additions, so this
#   table is no evidence for or against "SFT memorises, RL generalises" (Chu et al. 2025).
#
# ### The same comparison on SmolLM2-135M
#
# `benchmarks/post_training.py --model smollm2-135m --budget 150000` (LoRA, the demo's tagged
# additions, one learning rate for all, 1e-4, chosen before the run; one seed, on a GPU):
#
# | method | tokens | held-out greedy % [95% CI] | paired lift, points [95% CI] | shifted % |
# |---|---|---|---|---|
# | start model | 0 | 21.5 [16.4, 27.7] | - | 5.5 |
# | SFT | 150,952 | 80.5 [74.5, 85.4] | +59.0 [+51.4, +66.6] | 50.0 |
# | rejection sampling | 151,442 | 68.5 [61.8, 74.5] | +47.0 [+39.0, +55.0] | 36.5 |
# | DPO | 150,385 | 16.0 [11.6, 21.7] | -5.5 [-11.1, +0.1] | 7.5 |
# | GRPO (stopped at 41,656 tokens by the run's time limit) | 41,656 | 38.0 [31.6, 44.9] | +16.5 [+10.2, +22.8] | 17.5 |
#
# The larger model tells the same story more loudly. At the first quarter of the budget (about
# 38,000 tokens; 47,521 for DPO, whose pairs are paid first) SFT stood at 60%, rejection sampling at 29%, GRPO at 27% and DPO at 16%
# (100 problems). Rejection sampling, SFT on the policy's own right answers, catches up as the
# policy improves (2.5% of the start model's samples at temperature 1 are right, so its first
# rounds keep a row or two). DPO on 89 off-policy pairs did not help. And this time the shifted
# set moved: three-digit additions went from 5.5% to 50.0% after SFT, the method that saw the
# most correct worked answers, not the least. GRPO's run is too short to say where it would
# end; the table does not show RL paying on this task.
#
# What to try first on a task like this one (known answers, an exact verifier, a model that is
# right a third of the time or less): SFT. RL earns its cost when demonstrations are missing or are not
# the behaviour you want, and the model already succeeds sometimes; lesson 12's tool use is that
# kind of task.

# %% [markdown]
# ## 7. Lesson 12's case, read again
#
# Lesson 12 warmed SmolLM2 up on scripted tool traces for 4 supervised steps (0% -> 23%) and
# then ran 8 GRPO steps (-> 100%). That shows GRPO *after* the warm-up worked; it does not show
# that RL was needed, because no run spent the same compute on more supervised steps. The
# comparison this lesson's table makes (same start, same budget, several methods) is the one
# that question needs; a learner who wants the answer for lesson 12 reruns its warm-up for the
# same token budget as the GRPO stage and compares the held-out accuracy with its paired
# interval.

# %% [markdown]
# ## 8. Exercises
#
# `exercises/ex14_post_training.py` has four functions, each with the mistake that trains
# without an error and learns the wrong thing: the packing mask, DPO's loss from log-prob
# sums, the distillation advantage, and the rejection filter with a per-prompt cap.

# %%
ex = load_exercise("ex14_post_training")
feedback(ex14.check_packing_mask, ex.packing_mask)
feedback(ex14.check_dpo_sigmoid_loss, ex.dpo_sigmoid_loss)
feedback(ex14.check_distillation_advantages, ex.distillation_advantages)
feedback(ex14.check_rejection_filter, ex.rejection_filter);

# %% [markdown]
# ## Questions
#
# 1. Rejection sampling and GRPO both sample from the policy and score with the verifier. Write
#    the advantage each gives a wrong answer, and say what that changes for a prompt the model
#    gets right 1 time in 8.
# 2. Why does the DPO loss use the *summed* log-probabilities of a completion and not their
#    mean? What does IPO (as TRL computes it) do differently, and why?
# 3. A DPO run logs `rewards/accuracies` = 1.0 and `rewards/margins` growing, yet held-out
#    accuracy falls. Give two explanations.
# 4. With `beta=1` the distillation loss is the reverse KL. Why is a student trained with it
#    less likely to spread probability over answers the teacher never gives, and when would you
#    choose `beta=0`?
# 5. Your SFT batch has micro-batches of 200 and 20 completion tokens. What weight does a token
#    of each get if every micro-batch divides by its own count, and what with TRL's
#    `num_items_in_batch`?
# 6. From the table of section 6: which method would you try first on this task, and what would
#    have to be true of a task for GRPO to be the better first choice?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("14", k)`
# prints the answer to question k (`show_answer("14")` prints them all). They are also in
# `notebooks/answers/14_post_training.md`.

# %%
from course_lib.lesson_answers import show_answer  # noqa: E402

# show_answer("14", 1)
