# %% [markdown]
# # Lesson 10 — Fast inference and memory
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/10_inference_memory.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 53 s of CPU time, measured on a
# 2-core CPU; the wall time grows with the machine's load.*
#
# An RL step for a language model does two very different things: it **generates**
# completions (one token at a time, for every sample of every prompt) and it **trains** on
# them (all tokens at once). This lesson is about making both fit and run fast on one GPU.
#
# In this lesson you will:
# 1. measure **when generation dominates** the cost of a step (and when it does not), and
#    what a colocated **vLLM engine** changes: throughput, shared memory, weight sync
#    after every optimizer step;
# 2. measure the **sampling/training mismatch** between an inference engine and the
#    trainer, and correct it: **truncated importance sampling**, then TRL 1.16's four
#    modes and its default, **`sequence_mask` with `clip_max=3.0`**;
# 3. choose between **fp16 and bf16**: range versus precision;
# 4. do the **memory arithmetic** of GRPO at 20K context — 78.3 GB of logits, 2.5 GB of KV
#    cache per sequence — and read Unsloth's 510.8 GB → 54.3 GB table;
# 5. compute log-probs **in chunks** so the full logits never exist, and **measure** the
#    memory it saves;
# 6. know the other levers: **gradient checkpointing**, **LoRA / QLoRA**, and the VRAM
#    rules of thumb.

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
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from transformers.utils import logging as hf_logging

from course_lib.machine import device_info, engines_available, fast_mode, scaled

hf_logging.disable_progress_bar()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
print("fast mode:", fast_mode(), "| device:", device_info(), "| engines:", engines_available())

# %% [markdown]
# ## 1. Where the time goes
#
# Training on a completion of T tokens is **one** forward and backward pass over all T
# positions at once: big matrix products. Generating it is **T sequential** forward
# passes, each producing one token per sequence and each re-reading every weight (and the
# KV cache) from memory. Which of the two costs more depends on the hardware, the model
# size, the number of sequences sampled together and their length. Here is the
# measurement on the machine running this notebook, with the course's tiny model, forced
# to a fixed completion length, for three batch sizes.

# %%
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.policy import completion_forward
from course_lib.rollout import tokenize_prompts
from course_lib.rollout.base import left_pad

model, tokenizer = load_policy("tiny", device=DEVICE)
prompts = get_task("arithmetic", n=16)["prompt"]
length = 96  # the tiny model has 128 positions: prompt + completion must fit


def time_generate_and_train(policy, num_prompts: int, samples: int, new_tokens: int) -> dict:
    """Seconds to sample `num_prompts x samples` completions of `new_tokens` tokens, and for one
    forward + backward pass over them (a stand-in loss with the real loss's work)."""
    ids = [row for row in tokenize_prompts(tokenizer, prompts[:num_prompts]) for _ in range(samples)]
    prompt_ids, prompt_mask = (t.to(DEVICE) for t in left_pad(ids, tokenizer.pad_token_id))
    start = time.perf_counter()
    with torch.no_grad():
        generated = policy.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
                                    max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                    pad_token_id=tokenizer.pad_token_id)
    generate_s = time.perf_counter() - start
    completion_ids = generated[:, prompt_ids.shape[1]:]
    policy.train()
    start = time.perf_counter()
    logps, _, _ = completion_forward(policy, prompt_ids, prompt_mask, completion_ids, torch.ones_like(completion_ids))
    (-logps.sum()).backward()
    train_s = time.perf_counter() - start
    policy.eval()
    policy.zero_grad(set_to_none=True)
    return {"sequences": len(ids), "generate_s": generate_s, "train_s": train_s,
            "batch": (prompt_ids, prompt_mask, completion_ids)}


time_generate_and_train(model, 2, 2, 8)  # warm-up: the first call pays one-off costs
timings = [time_generate_and_train(model, n, k, length) for n, k in ((16, 4), (2, 2), (1, 1))]
for row in timings:
    print(f"{row['sequences']:3d} sequences x {length} tokens on {DEVICE}: generate {row['generate_s']:5.2f} s "
          f"({1000 * row['generate_s'] / length:4.1f} ms per decoding step), forward + backward "
          f"{row['train_s']:5.2f} s; generate / train = {row['generate_s'] / row['train_s']:4.1f}")
prompt_ids, prompt_mask, completion_ids = timings[0]["batch"]  # the 64 x 96 batch, reused below
completion_mask = torch.ones_like(completion_ids)

# %% [markdown]
# How to read it (three runs of this cell on a shared 2-core CPU, one thread): a
# decoding step for 4 sequences costs less than twice one for 1 (3.5 to 8 ms), because at
# that size a step is mostly fixed overhead: reading the weights, launching each layer,
# Python. So with few sequences and long completions generation dominates:
# generate/train was 9.3 to 11.9 for one sequence and 4.0 to 4.7 for four. With 64
# sequences a decoding step is real work for a CPU (23 to 50 ms), and since a forward +
# backward pass costs about three forward passes, training catches up: the ratio fell
# to 1.2 to 2.9 (background load on a shared machine moves single timings by ±50%).
#
# A real small model crosses over. SmolLM2-135M on the same CPU (the function above with
# `load_policy("smollm2-135m")`, one thread, measured once each): 64 sequences × 32
# tokens took 58 s to generate and 99 s to train (ratio 0.6: training dominates), while
# 1 sequence × 96 tokens took 14.1 s against 3.1 s (ratio 4.5). So on a CPU generation
# dominates **only** with few sequences per batch and long completions; with a batch
# of the size RL uses, a 135M-parameter model spends more time training.
#
# On a GPU the balance moves toward generation **when completions are long**, because
# the two passes are limited by different things. The training pass is one big
# batch of matrix products, limited by arithmetic, which a GPU has in abundance. A
# decoding step is limited by memory traffic: it must read all weights, plus every
# sequence's KV cache, to produce a single token per sequence, and the GPU's arithmetic
# units mostly wait. For an 8B model in 16-bit that is 16 GB read per step; at the
# 3.35 TB/s of an H100's memory that is about 4.8 ms per step before any KV cache, so a
# 1,000-token completion takes at least 4.8 s of strictly sequential steps, and the same
# 4.8 s for 8 sequences as for 64 as long as a step stays memory-bound. That sequential
# floor, which grows with the completion length, is why RL frameworks generate with a
# dedicated inference engine (next section) and why long reasoning completions make
# generation the larger part of a step. With short completions and a large batch the
# floor is small and the decoding steps turn compute-bound too, so training can still
# take the larger share on a GPU, as it did on the CPU above. (This paragraph is arithmetic, not a measurement:
# the timing cell above measures whatever machine runs it; run it on a GPU to see the
# ratio there.)
#
# ## 2. vLLM, colocated
#
# **vLLM** is such an engine: paged KV cache (the cache is allocated in small fixed-size
# blocks as a sequence grows, instead of one slab per sequence reserved for the maximum
# length, so the waste is at most one partly filled block per sequence), continuous
# batching (a finished sequence's slot is reused at once), fused kernels. Reported
# throughputs with Unsloth's dynamic 4-bit Llama 3.2 3B Instruct: about **4,000 tokens/s
# on one A100 40GB**, about **300 tokens/s on a free Colab Tesla T4 (16 GB)**.
#
# **Colocated** means the engine lives in the trainer's process and on the same GPU. Two
# consequences:
#
# - **weight sync**: after each optimizer step the trainer's new weights must reach the
#   engine before it samples again. `course_lib.rollout.VLLMEngine.sync_weights` reloads
#   them in place (LoRA adapters merged first) and clears the prefix cache, whose entries
#   were computed with the old weights; the trainer calls it before the next generation
#   that follows an optimizer step;
# - **memory**: by default the engine holds its own copy of the weights next to the
#   trainer's. Unsloth makes the two share one GPU memory space, which saves about
#   **5 GB for Llama 3.1 8B** and **3 GB for Llama 3.2 3B**; it is how Llama 3.3 70B
#   Instruct (40 GB of weights) fine-tunes on one 48 GB GPU, where two copies would need
#   80 GB or more.
#
# **Server mode** is the other way, and how TRL runs vLLM across several GPUs: with
# `use_vllm=True, vllm_mode="server"` (TRL 1.16's default is `"colocate"`) the engine is a
# separate vLLM server on GPUs of its own (TRL 1.16 starts it with vLLM's own
# `VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "nccl"}' ...`,
# `--tensor-parallel-size N` to shard it; `trl vllm-serve` still works but is deprecated),
# the training processes run on the other GPUs and send it prompts over HTTP
# (`vllm_server_host`, `vllm_server_port`), and after each optimizer step the trainer
# broadcasts the new weights to the server over NCCL. Generation and training then no longer
# share memory, and each side can be sized on its own; `vllm_mode="colocate"` is the
# one-GPU choice this section describes. `course_lib` implements the colocated engine only.
#
# The course ships two engines with one interface: `hf` (`model.generate` on the
# trainer's own model) and `vllm` (in-process; the CPU build of vLLM here, the GPU build on
# CUDA). `make_config(..., engine="vllm")` switches a run to it. Starting vLLM takes tens
# of seconds, so fast mode skips the demonstration below.

# %%
from course_lib.algos import make_config
from course_lib.rollout import SamplingConfig, make_engine, vllm_available

for engine in ("hf", "vllm"):
    config = make_config("grpo", engine=engine)
    correction = config.effective_vllm_importance_sampling_correction
    print(f"engine={engine}: vllm_importance_sampling_correction -> {correction}, "
          f"mode {config.vllm_importance_sampling_mode}, clip_max {config.vllm_importance_sampling_clip_max}")

if vllm_available() and not fast_mode():
    cpu_model, cpu_tokenizer = load_policy("tiny")
    engine = make_engine("vllm", cpu_model, cpu_tokenizer, kv_cache_gib=0.5, seed=0)
    sampling = SamplingConfig(temperature=1.0, max_tokens=8, seed=1)
    batch = engine.generate(list(prompts[:8]), n=4, sampling=sampling)
    print("vLLM samples:", batch.texts[:8])
    with torch.no_grad():  # the trainer's log-probs of the same tokens, same weights
        trainer_logps, _, _ = completion_forward(cpu_model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                                 batch.completion_mask)
    gap = (trainer_logps - batch.sampling_logps)[batch.completion_mask.bool()].abs()
    print(f"vLLM vs trainer log-probs, same weights: mean gap {gap.mean():.2e}, max {gap.max():.2e}")
    with torch.no_grad():  # one "optimizer step": perturb the weights, then push them to the engine
        for parameter in cpu_model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    engine.sync_weights(cpu_model)
    after = engine.generate(list(prompts[:8]), n=4, sampling=sampling)
    print("after the weight sync, same seed:", after.texts[:8])
    engine.shutdown()
else:
    print("vLLM demonstration skipped (fast mode, or vLLM not installed).")

# %% [markdown]
# ## 3. The sampling/training mismatch, and its correction
#
# Even with identical weights, the inference engine and the trainer do not compute the same
# probabilities: different kernels, different precision, different order of additions. In
# float32 on a CPU the gap is tiny (around 1e-6 in log-prob for the tiny model, when the
# cell above runs); with bf16 kernels on a GPU it is orders of magnitude larger.
# The tokens are sampled from `π_sampler` but the loss assumes `π_old` (the trainer's), so
# the batch is slightly **off-policy**. The first correction proposed for this
# sampler/trainer mismatch, **truncated importance sampling** (TIS, Yao et al., 2025),
# weighs each token's loss by the importance ratio, truncated from above so that a rare
# large ratio cannot blow up the update. (Truncating importance weights is much older:
# off-policy RL used it before, e.g. IMPALA's V-trace in 2018; what Yao et al. added is
# applying it to the gap between an inference engine and the trainer.)
#
# $$w_t = \min\left(\frac{\pi_\text{old}(y_t)}{\pi_\text{sampler}(y_t)},\ C\right).$$
#
# That is TRL's `vllm_importance_sampling_mode="token_truncate"` with `C =
# vllm_importance_sampling_clip_max`. It is **not** TRL's default: in TRL 1.16 the fields
# default to `vllm_importance_sampling_correction=True`,
# **`vllm_importance_sampling_mode="sequence_mask"`**, `vllm_importance_sampling_clip_max=3.0`
# and `vllm_importance_sampling_clip_min=None` (read them in `trl/trainer/grpo_config.py`;
# its docstring still calls `token_truncate` the default, the dataclass field says
# `sequence_mask`). The older single knob, `vllm_importance_sampling_cap`, is deprecated
# since TRL 1.6 (to be removed in 2.0): setting it only copies its value into `clip_max`,
# and the mode stays `sequence_mask`. The course's config does the same and warns. You
# implement the token-level form first, because the others are built from it.
#
# Unsloth's GRPO documentation describes other defaults for the same knobs, so a recipe
# copied from one library does not behave the same in the other:
#
# | | TRL 1.16 | Unsloth's guide |
# |---|---|---|
# | correction on | `True` always | `True` with vLLM / `fast_inference`, `False` otherwise |
# | form | `sequence_mask` (drop completions outside the bounds) | TIS: truncate at the cap |
# | cap | `clip_max=3.0` | `vllm_importance_sampling_cap=2.0` |
#
# With the vLLM engine the correction is on automatically (cell above); the HF engine
# records its sampling log-probs too, so `vllm_importance_sampling_correction=True` works
# there. Here is a real mismatch without vLLM: the same tiny model scoring the same tokens
# in float32 (the trainer) and in bfloat16 (a sampler running in half precision).

# %%
from course_lib.ops.importance import truncated_is_ratio

half_model = copy.deepcopy(model).to(torch.bfloat16)
with torch.no_grad():
    trainer_logps, _, _ = completion_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    sampler_logps, _, _ = completion_forward(half_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
sampler_logps = sampler_logps.float()
valid = completion_mask.bool()
log_ratio = (trainer_logps - sampler_logps)[valid]
weights = truncated_is_ratio(trainer_logps, sampler_logps, completion_mask, cap=3.0)[valid]  # C = clip_max
print(f"|log pi_train - log pi_sampler|: mean {log_ratio.abs().mean():.4f}, max {log_ratio.abs().max():.4f}")
print(f"TIS weights: min {weights.min():.3f}, max {weights.max():.3f}, capped at 3.0: {(weights == 3.0).sum().item()} "
      f"of {weights.numel()} tokens")

fig, ax = plt.subplots(figsize=(6, 2.8))
ax.hist(log_ratio.cpu().numpy(), bins=60, color="tab:blue")
ax.set_yscale("log")  # most tokens agree closely; the log scale shows the rare large gaps
ax.set(xlabel="log pi_train - log pi_sampler (fp32 vs bf16, same weights)", ylabel="tokens (log scale)",
       title=f"Sampling/training mismatch on {valid.sum().item()} tokens")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ### Exercise 1 — `truncated_is_weight(old_logps, sampling_logps, mask, cap)`
#
# Open `exercises/ex10_inference_memory.py`. Mind the direction of the ratio, the padding,
# and the gradient.

# %%
from course_lib.checks import ex10
from course_lib.grading import load_exercise
from course_lib.feedback import feedback

ex = load_exercise("ex10_inference_memory")
feedback(ex10.check_truncated_is_weight, ex.truncated_is_weight);

# %% [markdown]
# ### 3b. TRL 1.16's four correction modes
#
# `vllm_importance_sampling_mode` picks two things:
#
# | | truncate: clamp into `[clip_min, clip_max]` (TIS) | mask: weight 0 outside (MIS) |
# |---|---|---|
# | **token**: `exp(d_t)` per token | `token_truncate` (the TIS above) | `token_mask` |
# | **sequence**: `exp(Σ_t d_t)` per completion | `sequence_truncate` | **`sequence_mask`** (default) |
#
# with `d_t = log π_old(y_t) − log π_sampler(y_t)`. Why would one prefer the sequence?
# The reward belongs to the whole completion, and the probability of a completion is the
# *product* of its token probabilities: the correct importance weight of a sampled
# completion is the product of its token ratios, `exp(Σ_t d_t)`. Per-token weights are
# a lower-variance approximation that ignores how mismatches add up along a long answer.
# Why **mask** rather than truncate? A sequence ratio of 10 means the sampler and the
# trainer disagree badly about this completion: truncating to 3 still trains on it with a
# large weight, masking drops it (a tiny fraction of completions in a healthy run). The
# defaults, `clip_min=None` and `clip_max=3.0`, mask only completions the trainer finds
# much more likely than the sampler did. Each algorithm applies the mode at its own
# level: GRPO and PPO multiply each token's loss by the weight. For RLOO, whose action is
# the completion, `course_lib` always uses the sequence form; TRL 1.16's `RLOOTrainer`
# applies no sampler correction at all (its `RLOOConfig` has no such field).
#
# Below, the four modes on the fp32-vs-bf16 batch above: how many tokens or completions
# each changes.

# %%
from course_lib.ops.importance import IS_MODES, sampling_correction

for mode in IS_MODES:
    weight, stats = sampling_correction(trainer_logps, sampler_logps, completion_mask, mode=mode, clip_max=3.0)
    rows = weight if mode.startswith("sequence") else weight[valid]
    changed = (rows == 0).float().mean() if mode.endswith("mask") else (rows == 3.0).float().mean()
    what = "dropped (weight 0)" if mode.endswith("mask") else "truncated to 3.0"
    print(f"{mode:18} shape {tuple(weight.shape)}  {100 * changed:5.1f}% {what}; "
          f"weight mean {stats['sampling/importance_sampling_ratio/mean']:.3f}, "
          f"max {stats['sampling/importance_sampling_ratio/max']:.3f}")

# %% [markdown]
# ### Exercise 1b — `correction_weight(old_logps, sampling_logps, mask, mode, clip_min, clip_max)`
#
# All four modes in one function; the check compares it with
# `course_lib.ops.importance.importance_sampling_ratio`, itself checked against TRL 1.16.

# %%
feedback(ex10.check_correction_weight, ex.correction_weight);

# %% [markdown]
# ## 4. fp16 or bf16?
#
# Both take 2 bytes a value. They split the bits differently:
#
# - **fp16**: 5 exponent bits, 10 mantissa bits — more **precision**, little **range**
#   (largest value 65,504). Logits, exponentials and squared gradients overflow to `inf`;
#   training needs loss scaling.
# - **bf16**: 8 exponent bits (fp32's range), 7 mantissa bits — coarse **precision**,
#   enormous **range**. No overflow, but `1 + 1/256` rounds to 1.
#
# bf16 needs a GPU from NVIDIA's **Ampere** generation or later (A100, RTX 30xx, H100);
# the free Colab T4 (Turing) has no bf16, so there the choice is fp16 or fp32. The
# trainer's `dtype="auto"` picks bf16 where supported, fp32 otherwise.

# %%
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):15} max {info.max:10.3e}  smallest step after 1: {info.eps:.1e}")
logits = torch.tensor([10.0, 12.0, 80.0])
print("exp(logits) in fp16:", torch.exp(logits.half()).tolist(), "| in bf16:", torch.exp(logits.bfloat16()).tolist())
print("1 + 1/256 in bf16:", (torch.tensor(1.0, dtype=torch.bfloat16) + 1 / 256).item(),
      "| in fp16:", (torch.tensor(1.0, dtype=torch.float16) + 1 / 256).item())
print("bf16 supported here:", device_info()["bf16_supported"])

# %% [markdown]
# For RL the precision matters too: a log-prob difference of 0.004 is a 0.4% change in
# probability, which is what an update step often is, and it is below bf16's resolution
# near 1. That is one reason the course computes log-probs and ratios in float32 even when
# the model runs in bf16, and one source of the mismatch measured above.
#
# **The mismatch argument for fp16.** bf16 became the default for training because its
# range spares loss scaling. RL adds a cost that supervised training does not have: the
# sampler and the trainer round differently, and with 7 mantissa bits each rounding is
# 8 times coarser than with fp16's 10. Qi et al. (2025, "Defeating the Training-Inference
# Mismatch via FP16") argue that running both engine and trainer in fp16 shrinks the
# sampler/trainer gap so much that most of the correction machinery of section 3 becomes
# unnecessary, at the price of loss scaling (fp16's range). The cell measures the gap
# both ways on the batch of section 3: the float32 trainer against a sampler running the
# same weights in bf16, then in fp16. On this tiny model and CPU kernels the fp16 gap is
# smaller by the printed factor, less than the 8× of one rounding, because the gap also
# builds up through every layer's activations; measure it on your own model and engine
# before choosing, and remember that fp16 then needs loss scaling in the trainer.

# %%
gaps = {}
for dtype in (torch.bfloat16, torch.float16):
    low_model = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        low_logps, _, _ = completion_forward(low_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    gaps[dtype] = (trainer_logps - low_logps.float())[valid].abs()
    print(f"float32 trainer vs {str(dtype):14} sampler: |log-prob gap| mean {gaps[dtype].mean():.2e}, "
          f"max {gaps[dtype].max():.2e}")
print(f"bf16's mean gap is {gaps[torch.bfloat16].mean() / gaps[torch.float16].mean():.1f} times fp16's")

# %% [markdown]
# ## 5. The memory arithmetic of GRPO at 20K context
#
# Unsloth's guide works out Llama 3.1 8B with a **20K context** and **8 generations** per
# prompt. Its count: a standard implementation has to create "2 logits" of shape
# `(8, 20K)` × vocabulary to compute the GRPO loss, at 2 bytes each:
#
# $$2 \times 2\ \text{bytes} \times 8 \times 20\text{K} \times 128{,}256 \approx 78.3\ \text{GB}.$$
#
# The guide does not say which two tensors these are. The table comes from Unsloth's
# February 2025 post on GRPO, when TRL's default was still `beta=0.04`: a KL penalty,
# so a reference model ran beside the policy, and the two logits are the **policy's and
# the reference's** (exercise 2 below counts them that way). Since then TRL's default
# has become `beta=0.0`, which loads no reference model; at today's defaults the count
# would be one 16-bit copy, 39 GB. Note also that 2 × 2 bytes = 4 bytes: the same
# 78.3 GB is **one** float32 copy of the logits, which is what a log-softmax in float32
# (TRL's and the course's choice, for precision: section 4) materialises,
# 8 × 20,480 × 128,256 = 2.1·10¹⁰ values × 4 bytes = 84.1·10⁹ bytes = 78.3 GiB.
# Section 6 measures how many such tensors a naive forward + backward keeps alive at once.
#
# Generation needs a KV cache, also 16-bit: K and V for 32 layers, 1,024 wide (8 KV heads
# of 128), per token:
#
# $$2 \times 2\ \text{bytes} \times 32 \times 20\text{K} \times 1024 = 2.5\ \text{GB per sequence},$$
#
# 20 GB at a vLLM batch of 8 (the table keeps batch 1). "20K" is 20 × 1024 and "GB" is
# 2^30 bytes in these figures; with 10^9 bytes the logits would read 84.1 GB.
#
# ### Exercise 2 — `logits_memory_bytes(...)` and `kv_cache_bytes(...)`

# %%
ex = load_exercise("ex10_inference_memory")
feedback(ex10.check_logits_memory_bytes, ex.logits_memory_bytes);
feedback(ex10.check_kv_cache_bytes, ex.kv_cache_bytes);

# %%
from course_lib.widgets import kv_cache_gb, logits_memory_gb

print(f"logits: {logits_memory_gb(8, 20 * 1024, 128_256):.1f} GiB"
      f" ({logits_memory_gb(8, 20 * 1024, 128_256, unit='GB'):.1f} GB of 10^9 bytes)")
print(f"KV cache: {kv_cache_gb(32, 1024, 20 * 1024):.1f} GiB per sequence, "
      f"{kv_cache_gb(32, 1024, 20 * 1024, batch=8):.0f} GiB for a batch of 8")

# %% [markdown]
# The whole bill, as reported in the guide (Llama 3.1 8B, 20K context, 8 generations):
#
# | | Unsloth | standard + Flash Attention 2 |
# |---|---|---|
# | training memory | 42 GB | 414 GB |
# | GRPO memory (the logits) | 9.8 GB | 78.3 GB |
# | inference engine | 0 GB | 16 GB |
# | KV cache at 20K | 2.5 GB | 2.5 GB |
# | **total** | **54.33 GB** | **510.8 GB** — a 90% reduction |
#
# Where the savings come from: memory-efficient **linear kernels** for the GRPO loss cut its
# memory by 8× or more (78.3 → 9.8 GB, saving 68.5 GB; with `torch.compile` they are even
# faster); Unsloth's **gradient checkpointing** moves intermediate activations to system
# RAM asynchronously, about 1% slower, saving the whole training-memory drop,
# 414 − 42 = 372 GB; **sharing memory** with vLLM removes the engine's separate 16 GB.
# (The guide prints "52 GB" for the checkpointing line; Unsloth's original post says
# 372 GB, and only 372 makes the table add up.) The cell checks that the three savings
# are the whole difference between the totals:

# %%
parts = ["training memory", "GRPO memory (logits)", "inference engine", "KV cache (20K)"]
reported = {"Unsloth": [42, 9.8, 0, 2.5], "standard + FA2": [414, 78.3, 16, 2.5]}
savings = {part: big - small for part, small, big in zip(parts, reported["Unsloth"], reported["standard + FA2"])}
total_saved = sum(reported["standard + FA2"]) - sum(reported["Unsloth"])
print(" + ".join(f"{value:g} ({part})" for part, value in savings.items() if value),
      f"= {sum(savings.values()):.1f} GB; totals: {sum(reported['standard + FA2']):.1f} - "
      f"{sum(reported['Unsloth']):.1f} = {total_saved:.1f} GB")
fig, ax = plt.subplots(figsize=(7, 2.6))
colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
for row, (name, values) in enumerate(reported.items()):
    left = 0.0
    for part, value, color in zip(parts, values, colors):
        ax.barh(row, value, left=left, color=color, label=part if row == 0 else None)
        left += value
    ax.text(left + 5, row, f"{left:.1f} GB", va="center")
ax.set_yticks([0, 1], list(reported))
ax.set_xlim(0, 580)
ax.set_xlabel("GB (as reported)")
ax.set_title("GRPO on Llama 3.1 8B, 20K context, 8 generations", fontsize=10)
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# ## 6. Log-probs without the logits
#
# The loss needs one number per token, `log π(y_t | y_<t)`, yet the straightforward route
# builds the `(N, V)` logits, a `(N, V)` log-softmax, and more of that size in the backward
# pass — for N = 160K tokens and V = 128K, tens of gigabytes to produce 160K numbers.
#
# Since `log p(y) = logit_y − logsumexp(logits)`, a block of rows at a time suffices. Going
# one step further, `course_lib.ops.logprobs.fused_linear_logprobs` starts from the hidden
# states and the LM-head weight: the forward pass computes each block's logits, keeps
# only its logsumexp and the chosen logit, and the backward pass **recomputes** each
# block's logits to form the gradient `onehot − softmax` on the fly. One extra matrix
# product buys a peak of one `(chunk, V)` block instead of several `(N, V)` tensors.
#
# ### Exercise 3 — `chunked_selective_log_softmax(logits, ids, chunk_size)`
#
# Start with the logits version. The check watches the largest tensor your code creates.

# %%
ex = load_exercise("ex10_inference_memory")
feedback(ex10.check_chunked_selective_log_softmax, ex.chunked_selective_log_softmax);

# %% [markdown]
# The fused version gives the same numbers and gradients as the naive one:

# %%
from course_lib.ops.logprobs import fused_linear_logprobs, selective_log_softmax

generator = torch.Generator().manual_seed(0)
hidden = torch.randn(256, 64, generator=generator, requires_grad=True)
head = (torch.randn(5000, 64, generator=generator) / 8).requires_grad_(True)
ids = torch.randint(0, 5000, (256,), generator=generator)

naive = selective_log_softmax(hidden @ head.T, ids)
naive.sum().backward()
naive_grads = hidden.grad.clone(), head.grad.clone()
hidden.grad, head.grad = None, None
fused = fused_linear_logprobs(hidden, head, ids, chunk_size=32)
fused.sum().backward()
print("same log-probs:", torch.allclose(naive, fused, atol=1e-5),
      "| same gradients:", all(torch.allclose(a, b, atol=1e-5) for a, b in zip(naive_grads, (hidden.grad, head.grad))))

# %% [markdown]
# ### Measured: peak memory versus chunk size
#
# `measure_logprob_memory` runs the naive path and the fused one at several chunk sizes,
# forward and backward, each in a fresh process on CPU (reading the growth of its peak
# resident memory) or with CUDA's allocator counters on a GPU. Fast mode uses small sizes.

# %%
from course_lib.widgets import measure_logprob_memory, plot_memory_vs_chunk_size

measured_tokens, measured_vocab = scaled(2048, 4096), scaled(16_384, 32_768)
results = measure_logprob_memory(chunk_sizes=scaled((None, 1024, 16), (None, 4096, 1024, 256, 64)),
                                 n_tokens=measured_tokens, hidden=scaled(128, 256), vocab=measured_vocab)
for row in results:
    label = "naive (full logits)" if row["chunk_size"] is None else f"fused, chunk {row['chunk_size']}"
    print(f"{label:>22}: peak {row['peak_mib']:7.1f} MiB, {row['seconds']:.2f} s")
display(plot_memory_vs_chunk_size(results))

# %% [markdown]
# The naive peak is several times one float32 `(N, V)` logits tensor (the dotted line):
# logits, log-softmax, and their gradients coexist in the backward pass. The fused peak
# falls with the chunk size, roughly in proportion, down to the floor of the inputs'
# gradients; very small chunks start to cost time. The trainer uses the fused path
# (`logprob_kernel="auto"`, `logprob_chunk_size`).
#
# ### The naive peak at the guide's shapes
#
# Divide the measured naive peak by the size of one float32 `(N, V)` tensor and you get
# how many full-vocabulary tensors a naive forward + backward keeps alive at once. That
# count does not depend on N or V, so it carries over to Llama 3.1 8B at 8 × 20K tokens:

# %%
naive_peak = next(row["peak_mib"] for row in results if row["chunk_size"] is None) * 2**20  # bytes
copies = naive_peak / (measured_tokens * measured_vocab * 4)
tokens, vocab = 8 * 20 * 1024, 128_256  # 8 generations x 20K tokens, Llama 3's vocabulary
one_copy = tokens * vocab * 4 / 2**30  # GiB, the guide's "GB"
print(f"measured: the naive peak holds {copies:.1f} float32 (N, V) tensors")
print(f"at 8 x 20K tokens and V = 128,256: one float32 copy = {one_copy:.1f} GB, "
      f"the naive peak = {copies:.1f} x {one_copy:.1f} = {copies * one_copy:.0f} GB")
print(f"the fused path instead holds one (chunk, V) block: 4,096 rows = {4096 * vocab * 4 / 2**30:.1f} GB")

# %% [markdown]
# The naive peak holds several float32 full-vocabulary tensors at once (the logits, the
# log-softmax and their gradients: the count printed above), so at the guide's shapes a
# naive loss needs several times the 78.3 GB of one copy, against one block of about
# 2 GB for the fused path. That is a measurement of this machine's autograd, scaled by
# the shapes; the guide's table does not itemise the naive loss's backward pass, so do
# not read it into the guide's rows.
#
# On a GPU the same idea goes one level further down. `course_lib.ops.triton_logprobs`
# is a Triton kernel: each program walks the vocabulary tile by tile and keeps, per row,
# only a running maximum, a running sum of exponentials and, for the entropy, a running
# sum of `exp(z) · z` (the online softmax), so not even one chunk of logits is written to
# GPU memory. The backward pass recomputes each tile on chip, forms `onehot − softmax`
# (and the entropy's term) there, and hands blocks to cuBLAS for the two gradient
# products. It also applies the head's logit soft-capping (Gemma 2) and scaling. The
# trainer picks it on CUDA; `benchmarks/logprob_memory.py --device cuda --grid` compares
# it with full logits, the chunked path, TRL's kernel and Liger-Kernel's.
#
# ## 7. Gradient checkpointing, LoRA and QLoRA
#
# **Gradient checkpointing** keeps only some activations in the forward pass and recomputes
# the rest during the backward pass: about a third more compute for a large cut in
# activation memory (`gradient_checkpointing=True`). Unsloth's variant offloads the kept
# activations to system RAM asynchronously.
#
# **LoRA** freezes the weights and trains small low-rank adapters `B·A` beside chosen
# matrices: the optimizer state (two fp32 moments per trainable parameter in AdamW) shrinks
# with the trainable parameters, and with LoRA the *reference* model is the base with the
# adapters switched off — no second copy. **QLoRA** also stores the frozen base in 4 bits.
# GRPO used to mean full fine-tuning; with (Q)LoRA it fits on one small GPU: the "aha
# moment" demos with Qwen2.5 3B first needed two A100s (160 GB), while Unsloth reports the
# same with a 5 GB GPU.

# %%
from course_lib.models import count_parameters
from course_lib.policy import prepare_policy

lora_model = prepare_policy(copy.deepcopy(model), make_config("grpo", use_lora=True, lora_r=8))
trainable, total = count_parameters(lora_model, trainable_only=True), count_parameters(lora_model)
print(f"LoRA r=8 on the tiny model: {trainable:,} trainable of {total:,} parameters ({100 * trainable / total:.1f}%)")

# %% [markdown]
# **VRAM rules of thumb** for GRPO (Unsloth's guide):
#
# - QLoRA 4-bit: the VRAM you need in GB ≈ the parameter count in billions (a safe margin;
#   less can work). Longer contexts need more.
# - 16-bit LoRA: at least 4× that.
# - 5 GB is the minimum to train your own reasoning model, for models of 1.5B parameters or
#   fewer; with 15 GB Unsloth turns models of up to 17B parameters — Llama 3.1 8B, Phi-4 14B,
#   Mistral 7B, Qwen2.5 7B — into reasoning models.

# %%
print(f"{'parameters':>10} {'QLoRA 4-bit rule':>17} {'16-bit LoRA':>12} {'guide: enough with Unsloth':>27}")
for billions in (0.5, 1.5, 3, 7, 8, 14, 17):
    enough = "5 GB" if billions <= 1.5 else "15 GB"
    print(f"{billions:>9}B {billions:>14.1f} GB {4 * billions:>9.0f}+ GB {enough:>27}")

# %% [markdown]
# ## 8. On a GPU: Unsloth with fast inference, and the course's vLLM engine
#
# This cell runs only on a CUDA machine with vLLM and Unsloth installed (`pip install vllm`,
# then Unsloth with `pip install --no-deps -r requirements/unsloth.txt && pip install -r
# requirements/unsloth-deps.txt`, since Unsloth declares an older TRL than the course's; on
# Colab `!python -m course_lib.colab --gpu --unsloth`, which keeps Colab's torch) and network
# access to download the model. In Unsloth's own words, fast inference is
# one flag of its loader:
#
# ```python
# from unsloth import FastLanguageModel
# model, tokenizer = FastLanguageModel.from_pretrained(
#     model_name="unsloth/Llama-3.2-3B-Instruct", fast_inference=True)
# model.fast_generate(["Hello!"])
# ```
#
# `fast_inference=True` starts a vLLM engine that shares the model's memory.
# `course_lib.models.load_unsloth_policy` makes the same call and returns a model the
# course's `Trainer` accepts. (If Unsloth raises an error locally, the guide suggests
# `pip install diffusers` and the latest vLLM.)

# %%
if torch.cuda.is_available() and engines_available()["unsloth"]:
    from course_lib.models import load_unsloth_policy

    fast_model, fast_tokenizer = load_unsloth_policy(
        "unsloth/Llama-3.2-3B-Instruct", max_seq_length=1024, load_in_4bit=True,
        fast_inference=True,  # vLLM inside, sharing the weights' GPU memory
        max_lora_rank=16, gpu_memory_utilization=0.6)
    print(fast_model.fast_generate(["Hello!"]))
    print(f"GPU memory in use: {torch.cuda.memory_allocated() / 2**30:.1f} GiB")
else:
    print("No CUDA GPU with Unsloth here: skipped.")

if torch.cuda.is_available() and vllm_available():
    gpu_model, gpu_tokenizer = load_policy("smollm2-135m", device="cuda")
    engine = make_engine("vllm", gpu_model, gpu_tokenizer, dtype="bfloat16", gpu_memory_utilization=0.2)
    batch = engine.generate(list(get_task("arithmetic-tagged", n=4)["prompt"]), n=4,
                            sampling=SamplingConfig(temperature=1.0, max_tokens=48, seed=0))
    print(batch.texts[:4])
    on = lambda t: t.to("cuda")  # noqa: E731
    with torch.no_grad():
        trainer_logps, _, _ = completion_forward(gpu_model, on(batch.prompt_ids), on(batch.prompt_mask),
                                                 on(batch.completion_ids), on(batch.completion_mask))
    weights = truncated_is_ratio(trainer_logps.float().cpu(), batch.sampling_logps.float(), batch.completion_mask)
    print(f"vLLM (bf16) vs trainer (fp32) TIS weights: min {weights.min():.3f}, max {weights.max():.3f}")
    default, stats = sampling_correction(trainer_logps.float().cpu(), batch.sampling_logps.float(),
                                         batch.completion_mask)  # TRL 1.16's default: sequence_mask, 3.0
    print(f"sequence_mask weights: {(default == 0).sum().item()} of {default.numel()} completions dropped")
    engine.shutdown()
else:
    print("No CUDA GPU with vLLM here: skipped.")

# %% [markdown]
# ## 9. Asynchronous RL: generating and learning at once
#
# The loop so far is strictly *generate, then learn*: while one core (or GPU) samples, the
# other waits, and the other way round. An asynchronous trainer gives generation its own
# process (`async_generation=True`): a worker samples the next generation batch while the
# trainer learns from the previous one. The price is that the worker samples with the
# weights it has, which are already some optimizer steps old: the samples are **off-policy**,
# drawn from an older policy $\pi_v$ than the one being updated.
#
# Two things keep that safe (`course_lib.run.async_rollouts`, names from TRL's
# `AsyncGRPOConfig`):
#
# - **the staleness bound** `max_staleness` $S$: a batch the trainer takes after $s$ optimizer
#   steps was sampled with the weights of a step $v \ge s - S$. Here the worker is never sent
#   a batch before the weights it must use exist, so it runs at most $S$ versions ahead and
#   the trainer waits rather than drops a batch; $S = 0$ samples exactly what the synchronous
#   trainer samples (a test checks the completions, losses and weights).
# - **a correction for the lag**, chosen by `async_old_logps`:
#   - `"sampler"` (the default, as TRL's `AsyncGRPOTrainer`): the worker records the
#     log-probs of what it samples, $\log \pi_v(y_t)$, and they become the clip's old
#     log-probs. The ratio $r_t = \pi_\theta(y_t)/\pi_v(y_t)$ then measures the whole lag,
#     and PPO's clip is exactly the tool for a ratio that has drifted from 1: a token whose
#     ratio left $[1-\epsilon, 1+\epsilon]$ in the advantage's direction stops pushing. The
#     trainer runs no forward pass before learning.
#   - `"recompute"` (in the spirit of decoupled PPO, Hilton et al. 2022, and AReaL): the
#     trainer recomputes the log-probs under its current weights before the update, a frozen
#     *proximal* policy $\pi_{\text{prox}}$, clips around *those*, and corrects the lag with
#     the weight of section 3, $\pi_{\text{prox}}(y)/\pi_v(y)$. The form of that weight is
#     course_lib's choice: TRL's sampler-mismatch default, `sequence_mask` (a completion whose
#     ratio leaves $[0, 3]$ drops out), applied here to staleness. AReaL's decoupled objective
#     weights each *token* by a capped $\pi_{\text{prox}}(y_t)/\pi_v(y_t)$ instead. It costs one
#     forward pass per batch, and separates two questions: how far may one update move
#     ($\epsilon$), and how stale may a sample be (the weight's cap).
#
#   The history logs `sample/staleness_mean` / `_max`, the clip's `clip_ratio/*` and, with
#   `"recompute"`, the correction's `sampling/*` statistics.
#
# This is one design, bounded staleness per batch with waiting. The other common one is
# PipelineRL's in-flight weight updates (Piché et al. 2025): the engine takes new weights
# *while* it generates, without waiting for its sequences to finish, so one long completion
# can hold tokens sampled by several policy versions, each recorded with its own log-prob;
# the lag stays small without the trainer ever waiting. `course_lib` implements only the
# first.
#
# Which weights sample which batch (one optimizer step per batch; with `weight_sync_steps`
# $k$ only the versions that are multiples of $k$ reach the worker):

# %%
from course_lib.run.async_rollouts import sampled_version

print("batch  taken at step  sampled with the weights of step  (S = 0, 1, 2)")
staleness_configs = [make_config("grpo", model_name_or_path="tiny", max_staleness=s) for s in (0, 1, 2)]
for batch_index in range(6):
    taken = sampled_version(batch_index, staleness_configs[0])[0]
    versions = [sampled_version(batch_index, c)[1] for c in staleness_configs]
    print(f"{batch_index:>5} {taken:>14} {str(versions):>34}")

# %% [markdown]
# ### Exercise 4 — `sampling_version(taken_step, max_staleness, weight_sync_steps)`
#
# The bookkeeping behind that table: the oldest weights the worker ever received (a multiple
# of `weight_sync_steps`) that still respect the bound. The check compares it with a search
# over every version the worker could hold.

# %%
feedback(ex10.check_sampling_version, ex.sampling_version);

# %% [markdown]
# Measured with `benchmarks/async_vs_sync.py` on a shared 2-core CPU (load average about 1.5;
# `benchmarks/README.md` has the commands and every column). The synchronous loop runs on
# **one** thread; the asynchronous modes on **two**, the trainer and the worker one thread
# each. So the "x sync" column compares one core with two, the analogue of giving generation
# a device of its own; "per core" divides the asynchronous rate by two. Each mode trains for
# the same wall time, then answers held-out problems greedily:
#
# | SmolLM2-135M LoRA, 180 s each | steps | x sync | per core | held-out accuracy | vs sync [95%] |
# |---|---|---|---|---|---|
# | sync (1 core) | 38 | 1.00 | 1.00 | 60% | - |
# | async, S = 1 (2 cores) | 70 | 1.86 | 0.93 | 56% | −4 points [−21, +13] |
# | async, S = 2 | 71 | 1.88 | 0.94 | 52% | −8 points [−20, +4] |
# | async, S = 1, `"recompute"` | 64 | 1.71 | 0.86 | 52% | −8 points [−23, +7] |
# | tiny model, lesson preset, 30 s each: sync | 371 | 1.00 | 1.00 | 52.5% | - |
# | tiny: async, S = 1 | 627 | 1.69 | 0.85 | 52.0% | −0.5 points [−6.8, +5.8] |
# | tiny: async, S = 2 | 602 | 1.62 | 0.81 | 58.5% | +6.0 points [−0.6, +12.6] |
# | tiny, 16 completions a step: sync | 1134 in 60 s | 1.00 | 1.00 | | |
# | tiny, 16 completions: async, S = 1 | 1399 | 1.23 | 0.62 | | |
#
# On SmolLM2 generation is much of the step, and giving it a second core that works while
# the first one learns nearly doubles the steps per minute of wall time; per core it is a
# little less than the synchronous loop (0.93x: moving weights and batches between two
# processes costs something). A synchronous run on two threads was not measured, so how much
# of the 1.86x a second thread would give the plain loop is open. After the same wall time
# the asynchronous runs are not worse beyond the noise of the evaluation. With only 16 completions a step the tiny
# model generates for 23 ms of a 54 ms step, so the overlap can save little, and moving
# weights and batches between two processes eats part of that. `"recompute"` pays a forward pass per batch for its
# decoupled correction: on SmolLM2 it still gains 1.7x. An overlap never saves more than
# the shorter of the two phases, which is why frameworks built for throughput give
# generation its own GPUs.

# %% [markdown]
# ## Questions
#
# 1. The logits bill grows with context × vocabulary × generations. Which of the three does
#    chunking remove from the peak, and which still costs compute?
# 2. The default weight has `clip_max=3.0` and no `clip_min`. What would a floor (say 0.5)
#    do to completions the trainer finds much *less* likely than the sampler did, with
#    `sequence_truncate` and with `sequence_mask`? When would you want it?
# 3. A 400-token answer whose tokens each differ by +0.003 in log-prob between trainer and
#    sampler: what are its `token_mask` weights, and what is its `sequence_mask` weight
#    (clip_max 3.0)? What does that tell you about long completions under each mode?
# 4. A T4 has no bf16. You train in fp16 and the loss turns into NaN after a few hundred
#    steps. Name two places in an RL step where fp16's range can run out.
# 5. With LoRA, the reference model costs no extra memory. Why, and what changes when you
#    train all weights instead?
# 6. When generation dominates the step (long completions, few sequences per decoding step;
#    section 1 measures where that happens), which batch-schedule knobs of lesson 07 let you
#    reuse one expensive generation batch for several optimizer steps, and what does that
#    reuse cost in "on-policyness"?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("10", k)`
# prints the answer to question k (`show_answer("10")` prints them all). They are also in
# `notebooks/answers/10_inference_memory.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("10", 1)
