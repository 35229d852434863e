"""Time per GRPO optimizer step: ``course_lib.trainer.Trainer`` against TRL 1.16's ``GRPOTrainer``.

Both trainers get the same model (fresh loads of the same folder, so identical starting
weights), the same prompts task, the same reward functions and the same settings
(``GRPOConfig.to_trl_grpo_config`` translates ours into TRL's), on CPU in float32 with
one torch thread. Each runs ``warmup + steps`` optimizer steps; only the last ``steps``
are timed, from one optimizer step's end to the next (ours: the ``on_step`` callback;
TRL: a ``TrainerCallback.on_step_end``), so model loading, trainer construction and the
final save are outside the clock. Rounds alternate the order (ours, TRL, TRL, ours, ...)
so that background load falls on both sides alike.

The workload is the same on both sides: per optimizer step, one generation batch of
``per_device_train_batch_size`` completions (``per_device_train_batch_size /
num_generations`` prompts x ``num_generations``) capped at ``max_completion_length``
tokens, sampled with ``generate``; the rewards; one forward + backward over the batch; one
AdamW step (``gradient_accumulation_steps = steps_per_generation = 1``,
``num_iterations = 1``, ``beta = 0``, so neither side computes old or reference log-probs).

Setups (``--models``):

- ``tiny``: the embedded ~1M-parameter Llama, task ``arithmetic``, reward
  ``correctness_first_number_reward``; batch 16 = 2 prompts x 8, 8 new tokens, lr 3e-4,
  temperature 1.0, full fine-tuning.
- ``smollm2``: SmolLM2-135M-Instruct, task ``arithmetic-tagged`` (system prompt + one
  worked example), rewards ``answer_tag_format_reward`` + ``correctness_reward``; batch
  4 = 1 prompt x 4, 32 new tokens, temperature 0.7, lr 1e-4, LoRA r=16 (alpha 32, dropout
  0.05) on all projections (TRL gets the same ``peft.LoraConfig``).

What still differs (the printed columns show it):

- The prompt order: TRL's ``RepeatSampler`` and our ``PromptSampler`` draw different
  prompts from the same dataset, so the completions (and their lengths, which set how many
  decoding steps ``generate`` runs) differ; the ``tokens`` column is the mean number of
  completion tokens generated per step on each side.
- Log-probs: TRL asks the model for ``fused_lm_head`` log-probs and entropies (its
  ``entropy`` metric); ours runs the decoder body and a chunked fused log-softmax, and
  estimates the entropy from the sampled tokens' log-probs.
- TRL patches the model's ``forward`` in place (its fused LM head), so every run loads a
  fresh copy of the model; the digests printed under each model show that both trainers
  started from the same weights (LoRA adapters included: both are created right after
  ``torch.manual_seed(seed)``).
- Both train with dropout on (LoRA's 0.05; TRL's ``disable_dropout`` is off by default).
- Bookkeeping: TRL gathers metrics through ``accelerate``, keeps completion tables and
  shuffles the batch; ours writes one ``history.jsonl`` row per step.

Columns, per side, means over the timed steps: ``s/step`` wall seconds per optimizer step
(``cpu``: this process's CPU seconds per step, which background load on a shared machine
inflates far less than wall time); the wall seconds inside each phase, timed by wrapping
the call that does it: ``gen`` the generation call (chat template, tokenisation,
``generate``), ``rew`` the rewards, ``for`` the log-prob forward passes, ``bac`` every
``Tensor.backward``, ``opt`` the AdamW step; ``oth`` the rest (loss arithmetic, gradient
clipping, batching, logging); ``tokens`` completion tokens generated per step. The last
line per model is ``ratio ours/TRL`` of the mean wall seconds per step (below 1: ours is
faster), with the CPU-time ratio beside it.

    OMP_NUM_THREADS=1 python benchmarks/step_vs_trl.py                      # tiny 20 steps, smollm2 3
    OMP_NUM_THREADS=1 python benchmarks/step_vs_trl.py --models tiny --steps 1 --warmup 0
    OMP_NUM_THREADS=1 python benchmarks/step_vs_trl.py --models tiny --profile   # cProfile of ours
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 threads are slower here

import argparse
import contextlib
import cProfile
import hashlib
import io
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETUPS = {
    "tiny": {
        "model": "tiny", "task": "arithmetic", "rewards": ["correctness_first_number_reward"],
        "default_steps": 20,
        "config": dict(per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
                       learning_rate=3e-4, beta=0.0, loss_type="dapo", temperature=1.0),
    },
    "smollm2": {
        "model": "smollm2-135m", "task": "arithmetic-tagged",
        "rewards": ["answer_tag_format_reward", "correctness_reward"],
        "default_steps": 3,
        "config": dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=32,
                       learning_rate=1e-4, beta=0.0, loss_type="dapo", temperature=0.7, use_lora=True, lora_r=16,
                       lora_alpha=32, lora_dropout=0.05),
    },
}


PHASES = ("generate", "reward", "forward", "backward", "optimizer")


@dataclass
class StepClock:
    """Wall and CPU time at each optimizer step's end, and the wall seconds of each phase in it.

    Phases are timed by wrapping the call that does them (``timed``); what no phase covers
    (loss arithmetic, gradient clipping, batching, logging) is the step's ``other``.
    """

    started: float = 0.0
    started_cpu: float = 0.0
    ends: list[float] = field(default_factory=list)
    cpu_ends: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    _open: dict[str, float] = field(default_factory=dict)
    _tokens: int = 0
    cuda: bool = False  # wait for the GPU's queued work at each step's end, so that it counts in its step

    def start(self) -> None:
        self.started, self.started_cpu = time.perf_counter(), time.process_time()

    def tick(self, *_args, **_kwargs) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        self.phases.append({name: self._open.get(name, 0.0) for name in PHASES})
        self.tokens.append(self._tokens)
        self._open, self._tokens = {}, 0

    def add(self, phase: str, seconds: float) -> None:
        self._open[phase] = self._open.get(phase, 0.0) + seconds

    def timed(self, function, phase: str, count_tokens=None):
        """``function`` with its wall time added to ``phase`` of the current step."""
        def wrapper(*args, **kwargs):
            begin = time.perf_counter()
            out = function(*args, **kwargs)
            self.add(phase, time.perf_counter() - begin)
            if count_tokens is not None:
                self._tokens += count_tokens(out)
            return out
        return wrapper

    def summary(self, warmup: int) -> dict:
        """Means over the steps after ``warmup``: seconds per step, per phase, tokens per step."""
        edges, cpu_edges = [self.started, *self.ends], [self.started_cpu, *self.cpu_ends]
        durations = [b - a for a, b in zip(edges, edges[1:])][warmup:]
        cpu = [b - a for a, b in zip(cpu_edges, cpu_edges[1:])][warmup:]
        if not durations:
            raise RuntimeError(f"no timed step: the run made {len(self.ends)} steps with warmup={warmup}.")
        mean = statistics.fmean
        out = {"steps": len(durations), "step": mean(durations), "cpu": mean(cpu), "tokens": mean(self.tokens[warmup:]),
               "durations": durations}
        for name in PHASES:
            out[name] = mean(p[name] for p in self.phases[warmup:])
        return out


@contextlib.contextmanager
def timed_backward(clock: StepClock):
    """Time every ``Tensor.backward`` call (both trainers call it once per micro-batch)."""
    import torch

    original = torch.Tensor.backward
    torch.Tensor.backward = clock.timed(original, "backward")
    try:
        yield
    finally:
        torch.Tensor.backward = original


def _base_config(setup: dict, steps: int, seed: int, output_dir: str):
    from course_lib.algos import GRPOConfig

    return GRPOConfig(model_name_or_path=setup["model"], output_dir=output_dir, seed=seed,
                      device=setup.get("device", "cpu"), dtype=setup.get("dtype", "float32"),
                      max_steps=steps, save_steps=0, logging_steps=10**6, report_to="none",
                      lr_scheduler_type="linear", **setup["config"])


def _load(setup: dict):
    """(model, tokenizer, task, reward functions) of a setup, the model in the setup's dtype.

    Both trainers get the model already in ``setup["dtype"]`` (float32 unless the setup says
    otherwise), so that a bfloat16 run trains bfloat16 weights on both sides (given float32
    weights, TRL would keep them and compute under autocast). ``setup["load"]``, when given,
    replaces ``load_policy`` (a name -> (model, tokenizer) function).
    """
    import torch

    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions

    model, tokenizer = setup.get("load", load_policy)(setup["model"])
    model = model.to(getattr(torch, setup.get("dtype", "float32")))
    return model, tokenizer, get_task(setup["task"], n=512), get_reward_functions(setup["rewards"])


def weights_digest(model) -> str:
    """SHA-1 of every parameter (sorted by name): equal digests mean identical starting weights."""
    digest = hashlib.sha1()
    for name, parameter in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(parameter.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def run_ours(setup: dict, total_steps: int, seed: int, profile: bool = False) -> tuple[StepClock, str, str | None]:
    """Train ``total_steps`` steps with ``course_lib.trainer.Trainer``; return (clock, weights digest, cProfile)."""
    import torch

    import course_lib.policy as policy_module
    import course_lib.run.sampled_batches as batches_module
    import course_lib.trainer as trainer_module
    from course_lib.trainer import Trainer

    model, tokenizer, dataset, reward_funcs = _load(setup)
    clock = StepClock(cuda=setup.get("device", "cpu") == "cuda")
    originals = {"compute_rewards": batches_module.compute_rewards, "completion_forward": trainer_module.completion_forward}
    # The training forward goes through `PolicyForward`, which calls policy.completion_forward.
    policy_forward = policy_module.completion_forward
    with tempfile.TemporaryDirectory() as output_dir:
        config = _base_config(setup, total_steps, seed, output_dir)
        torch.manual_seed(seed)
        trainer = Trainer(config, reward_funcs, dataset, model, tokenizer, progress=False, on_step=clock.tick)
        digest = weights_digest(trainer.model)
        trainer.engine.generate = clock.timed(trainer.engine.generate, "generate",
                                              lambda batch: int(batch.completion_mask.sum()))
        trainer.optimizer.step = clock.timed(trainer.optimizer.step, "optimizer")
        batches_module.compute_rewards = clock.timed(originals["compute_rewards"], "reward")  # the batch generator's
        trainer_module.completion_forward = clock.timed(originals["completion_forward"], "forward")
        policy_module.completion_forward = clock.timed(policy_forward, "forward")
        profiler = cProfile.Profile() if profile else None
        try:
            with timed_backward(clock):
                clock.start()
                if profiler is not None:
                    profiler.enable()
                trainer.train()
        finally:
            if profiler is not None:
                profiler.disable()
            batches_module.compute_rewards = originals["compute_rewards"]
            trainer_module.completion_forward = originals["completion_forward"]
            policy_module.completion_forward = policy_forward
    report = None
    if profiler is not None:
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats(40)
        report = stream.getvalue()
    return clock, digest, report


def run_trl(setup: dict, total_steps: int, seed: int) -> tuple[StepClock, str]:
    """Train ``total_steps`` steps with TRL's ``GRPOTrainer``; return (clock, weights digest)."""
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    model, tokenizer, dataset, reward_funcs = _load(setup)
    clock = StepClock(cuda=setup.get("device", "cpu") == "cuda")

    class Tick(TrainerCallback):
        """Step ends, and the optimizer's step between TRL's pre/post optimizer-step events."""

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.begin = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            clock.add("optimizer", time.perf_counter() - self.begin)

        def on_step_end(self, args, state, control, **kwargs):
            clock.tick()

    with tempfile.TemporaryDirectory() as output_dir:
        config = _base_config(setup, total_steps, seed, output_dir)
        dtype = setup.get("dtype", "float32")
        args = config.to_trl_grpo_config(use_cpu=setup.get("device", "cpu") == "cpu", bf16=dtype == "bfloat16",
                                         fp16=dtype == "float16", report_to="none",
                                         logging_steps=10**6, save_strategy="no", dataloader_num_workers=0,
                                         use_vllm=False, disable_tqdm=True, seed=seed, output_dir=output_dir)
        peft_config = None
        if config.use_lora:
            from peft import LoraConfig

            peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                     target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
        torch.manual_seed(seed)
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=peft_config, callbacks=[Tick()])
        trainer.remove_callback(PrinterCallback)  # its end-of-training metrics dump is noise here
        digest = weights_digest(trainer.model)
        trainer._generate = clock.timed(trainer._generate, "generate", lambda out: sum(len(ids) for ids in out[1]))
        trainer._calculate_rewards = clock.timed(trainer._calculate_rewards, "reward")
        trainer._get_per_token_logps_and_entropies = clock.timed(trainer._get_per_token_logps_and_entropies,
                                                                 "forward")
        with timed_backward(clock):
            clock.start()
            trainer.train()
    return clock, digest


def _line(label: str, s: dict) -> str:
    other = s["step"] - sum(s[name] for name in PHASES)
    phases = "  ".join(f"{name[:3]} {s[name]:.4f}" for name in PHASES)
    return (f"  {label:<5} {s['step']:.4f} s/step (cpu {s['cpu']:.4f})  {phases}  oth {other:.4f}  "
            f"gen% {100 * s['generate'] / s['step']:4.1f}  tokens {s['tokens']:5.1f}  ({s['steps']} steps)")


def benchmark(name: str, steps: int, warmup: int, rounds: int, seed: int, profile: bool) -> float:
    """Run both trainers ``rounds`` times on setup ``name``, print the table; return ours / TRL s/step."""
    import torch

    setup = SETUPS[name]
    total = warmup + steps
    print(f"\n== {name}: model={setup['model']} task={setup['task']} rewards={','.join(setup['rewards'])}")
    print(f"   {', '.join(f'{k}={v}' for k, v in setup['config'].items())}; warmup={warmup} timed={steps} "
          f"rounds={rounds} seed={seed} torch threads={torch.get_num_threads()}")
    durations = {"ours": [], "trl": []}
    parts = {"ours": [], "trl": []}
    digests: set[tuple[str, str]] = set()
    for round_index in range(rounds):
        order = ("ours", "trl") if round_index % 2 == 0 else ("trl", "ours")
        for side in order:
            if side == "ours":
                clock, digest, report = run_ours(setup, total, seed, profile=profile and round_index == 0)
                if report:
                    print(f"-- cProfile of ours (round 1, all {total} steps, cumulative):\n{report}")
            else:
                clock, digest = run_trl(setup, total, seed)
            digests.add((side, digest))
            summary = clock.summary(warmup)
            durations[side] += summary["durations"]
            parts[side].append(summary)
            print(f" round {round_index + 1} {_line(side, summary)}")
    ours_digests = sorted(d for side, d in digests if side == "ours")
    trl_digests = sorted(d for side, d in digests if side == "trl")
    same = len({d for _, d in digests}) == 1
    print(f"   starting weights: ours {','.join(ours_digests)}  TRL {','.join(trl_digests)}  "
          f"({'identical' if same else 'DIFFERENT'})")
    means = {}
    for side in ("ours", "trl"):
        runs = parts[side]
        weight = [r["steps"] for r in runs]
        merged = {k: sum(r[k] * w for r, w in zip(runs, weight)) / sum(weight)
                  for k in ("step", "cpu", "tokens", *PHASES)}
        merged["steps"] = sum(weight)
        means[side] = merged
        print(f" all    {_line(side, merged)}")
    ratio = means["ours"]["step"] / means["trl"]["step"]
    cpu_ratio = means["ours"]["cpu"] / means["trl"]["cpu"]
    print(f"ratio ours/TRL [{name}]: {ratio:.3f}x wall  (ours {means['ours']['step']:.4f} s/step, "
          f"TRL {means['trl']['step']:.4f} s/step; median step ours {statistics.median(durations['ours']):.4f} s, "
          f"TRL {statistics.median(durations['trl']):.4f} s); {cpu_ratio:.3f}x CPU time")
    return ratio


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,smollm2", help=f"comma-separated, from {', '.join(SETUPS)}")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed optimizer steps per run (default: tiny 20, smollm2 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed optimizer steps before the timed ones")
    parser.add_argument("--rounds", type=int, default=2, help="runs per trainer, alternating which goes first")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both trainers")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of our first run")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETUPS]
    if unknown or not names:
        parser.error(f"--models={args.models!r}: unknown {unknown}; use a comma-separated list of {', '.join(SETUPS)}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps={args.steps}: time at least one step")
    if args.warmup < 0 or args.rounds < 1:
        parser.error(f"--warmup={args.warmup} --rounds={args.rounds}: use warmup >= 0 and rounds >= 1")
    args.names = names
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    # TRL warns about the vLLM version and transformers about generation flags on every run;
    # none of it bears on the timing, and it would bury the table.
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    ratios = {}
    for name in args.names:
        steps = args.steps if args.steps is not None else SETUPS[name]["default_steps"]
        ratios[name] = benchmark(name, steps, args.warmup, args.rounds, args.seed, args.profile)
    print("\nsummary: " + "  ".join(f"{name} {ratio:.3f}x" for name, ratio in ratios.items()) + "  (ours/TRL s/step)")


if __name__ == "__main__":
    main()
