"""Builds the second failure museum: runs the doctor's rules were not written against.

The first museum (``course_lib.museum``) holds runs made to fail one way each, on this
trainer, with the preset's settings; the rules were tuned on it. This one adds runs of both
trainers (this one and TRL 1.16's ``GRPOTrainer``, run in a child process on the CPU), TRL's
defaults (``beta=0``, ``logging_steps=10``, ``learning_rate=1e-6``), SmolLM2-135M where a
short run is affordable, failures outside the first museum (learning rate 1e-2 under
``beta=0``, a wrong-sign reward, data too hard for the model, ``beta=5``,
``num_generations=2``, a length-only reward, ``epsilon=0`` with 4 passes, a constant 0.5)
and healthy runs (presets with other seeds, lesson 11's capstone config, lesson 04's PPO, and
two logs too long to train here, written from a stated model: a slow KL drift over 2,000
steps and an R1-Zero-like run whose reward and length rise together).

Only the histories are kept (``history.jsonl`` for this trainer, ``trainer_state.json`` for
TRL), with ``manifest.json``: per run, the trainer, model, whether it is broken, the rules that
name its cause, and its split (``seen``: read while the rules were revised; ``held_out``:
scored once at the end, never read before). ``benchmarks/doctor_museum.py --museum 2`` scores
the doctor on it; ``tests/lib/test_doctor_museum2.py`` replays it.

    OMP_NUM_THREADS=1 python benchmarks/doctor_museum2_build.py [--runs NAME ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "doctor_museum2"
GSM8K = str(ROOT.parent / "shared" / "data" / "gsm8k")

# Rule names that name each cause (a run's first finding must be one of its cause's rules).
LR_HIGH = ["learning_rate_too_high", "entropy_explosion", "policy_moves_too_fast", "non_finite_values"]

#: name -> spec. trainer: "course" | "trl" | "synthetic"; model: "tiny" | "smollm2-135m";
#: causes: rules that name the cause ([] for a healthy run); split: "seen" | "held_out".
RUNS: dict[str, dict] = {
    # ------------------------------------------------------------------ broken, this trainer
    "course_lr1e-2_beta0": dict(trainer="course", causes=LR_HIGH, split="seen",
                                story="learning_rate=1e-2 under beta=0, doctor every 5 steps",
                                config=dict(learning_rate=1e-2, beta=0.0, max_steps=40, logging_steps=5)),
    "course_lr3e-3_spike": dict(trainer="course", causes=LR_HIGH, split="seen",
                                story="learning_rate=3e-3, beta=0, 60 steps: a blow-up that may fade",
                                config=dict(learning_rate=3e-3, beta=0.0, max_steps=60)),
    "course_wrong_sign": dict(trainer="course", causes=["wrong_sign_reward"], split="seen",
                              story="the correctness reward with its sign flipped (1 for right becomes -1)",
                              rewards=["wrong_sign_correctness"], config=dict(max_steps=50)),
    "course_too_hard": dict(trainer="course", causes=["zero_spread_groups", "no_learning_signal"], split="seen",
                            story="GSM8K word problems for the 2-layer tiny model (prompts cut to the last 112 "
                                  "tokens to fit its 128 positions): it solves none",
                            task="gsm8k", config=dict(max_steps=20, max_completion_length=16, max_prompt_length=112)),
    "course_beta5": dict(trainer="course", causes=["kl_penalty_dominates"], split="held_out",
                         story="beta=5: the KL penalty outweighs the reward",
                         config=dict(beta=5.0, learning_rate=3e-4, max_steps=60)),
    "course_g2": dict(trainer="course", causes=["zero_spread_groups"], split="seen",
                      story="num_generations=2: half of all pairs agree whatever the policy",
                      config=dict(num_generations=2, per_device_train_batch_size=8, max_steps=50)),
    "course_length_only": dict(trainer="course", causes=["reward_hacking", "length_only_reward"],
                               split="held_out", story="the only reward pays 0.1 per character",
                               rewards=["length_reward"],
                               config=dict(max_completion_length=16, learning_rate=3e-4, max_steps=60)),
    "course_eps0_4passes": dict(trainer="course", causes=["policy_moves_too_fast", "clip_too_tight"],
                                split="seen", story="epsilon=0 with num_iterations=4: every later pass is clipped",
                                config=dict(epsilon=0.0, epsilon_high=0.0, num_iterations=4, max_steps=30)),
    "course_constant_half": dict(trainer="course", causes=["no_learning_signal", "dead_reward_function"],
                                 split="seen", story="the only reward returns 0.5 for everything",
                                 rewards=["half_reward"], config=dict(max_steps=20)),
    # ------------------------------------------------------------------ broken, TRL's GRPOTrainer
    "trl_lr1e-2_beta0": dict(trainer="trl", causes=LR_HIGH, split="seen",
                             story="TRL defaults (beta=0) but learning_rate=1e-2, logged every step",
                             config=dict(learning_rate=1e-2, max_steps=30, logging_steps=1)),
    "trl_lr1e-2_log10": dict(trainer="trl", causes=LR_HIGH, split="held_out",
                             story="TRL defaults (beta=0, logging_steps=10) but learning_rate=1e-2, 60 steps",
                             config=dict(learning_rate=1e-2, max_steps=60, logging_steps=10)),
    "trl_wrong_sign": dict(trainer="trl", causes=["wrong_sign_reward"], split="held_out",
                           story="the correctness reward with its sign flipped, learning_rate=3e-5",
                           rewards=["wrong_sign_correctness"], config=dict(learning_rate=3e-5, max_steps=30)),
    "trl_constant_half": dict(trainer="trl", causes=["no_learning_signal", "dead_reward_function"], split="seen",
                              story="the only reward returns 0.5 for everything (TRL defaults)",
                              rewards=["half_reward"], config=dict(max_steps=20, logging_steps=2)),
    "trl_g2": dict(trainer="trl", causes=["zero_spread_groups"], split="held_out",
                   story="num_generations=2, learning_rate=3e-5",
                   config=dict(num_generations=2, per_device_train_batch_size=8, learning_rate=3e-5, max_steps=30)),
    "trl_eps0_4passes": dict(trainer="trl", causes=["policy_moves_too_fast", "clip_too_tight"], split="held_out",
                             story="epsilon=0, num_iterations=4, learning_rate=3e-5",
                             config=dict(epsilon=0.0, epsilon_high=0.0, num_iterations=4, learning_rate=3e-5,
                                         max_steps=16)),
    "trl_too_hard": dict(trainer="trl", causes=["zero_spread_groups", "no_learning_signal"], split="seen",
                         story="the word-problem task for the tiny model, trained on bare sums only (TRL defaults, "
                               "logging_steps=2)",
                         task="word-problems", config=dict(max_steps=20, logging_steps=2, max_completion_length=16)),
    "trl_beta5": dict(trainer="trl", causes=["kl_penalty_dominates"], split="seen",
                      story="beta=5, learning_rate=3e-4", config=dict(beta=5.0, learning_rate=3e-4, max_steps=24)),
    "smol_trl_lr1e-2": dict(trainer="trl", model="smollm2-135m", causes=LR_HIGH, split="held_out",
                            story="SmolLM2-135M, TRL defaults (beta=0) but learning_rate=1e-2",
                            config=dict(learning_rate=1e-2, max_steps=10, logging_steps=1, per_device_train_batch_size=8,
                                        num_generations=4, max_completion_length=16)),
    # ------------------------------------------------------------------ healthy
    "course_grpo_seed1": dict(trainer="course", causes=[], split="held_out",
                              story="the tiny model's GRPO preset, seed 1, 60 steps", seed=1, config=dict(max_steps=60)),
    "course_vllm_bf16": dict(trainer="course", causes=[], split="seen",
                             story="the demo's sampler on the tiny model: vLLM with a bfloat16 sampler (training in "
                                   "float32: this CPU has no native bfloat16 for training), GRPO preset",
                             config=dict(engine="vllm", vllm_dtype="bfloat16", max_steps=60)),
    "course_rloo_seed1": dict(trainer="course", algo="rloo", causes=[], split="seen",
                              story="the tiny model's RLOO preset, seed 1, 60 steps", seed=1, config=dict(max_steps=60)),
    "course_capstone_fast": dict(trainer="course", causes=[], split="seen",
                                 story="lesson 11's capstone config (fast budget, 60 of its 200 steps: tiny model, dapo, "
                                       "beta=0.04, correctness + proximity + its tidy_rubric, weights 1, 0.5, 0.25)",
                                 rewards=["correctness_first_number_reward", "proximity_reward", "tidy_rubric"],
                                 config=dict(reward_weights=[1.0, 0.5, 0.25], loss_type="dapo", scale_rewards="group", epsilon=0.2, epsilon_high=0.28,
                                             beta=0.04, max_completion_length=8, learning_rate=3e-5,
                                             max_grad_norm=1.0, max_steps=60, logging_steps=100)),
    "course_ppo_lesson04": dict(trainer="course", algo="ppo", causes=[], split="seen",
                                story="lesson 04's PPO run (kl_coef=0.05, 4 epochs, linear schedule; 60 of its 200 steps)",
                                rewards=["correctness_first_number_reward", "proximity_reward"],
                                config=dict(max_steps=60, learning_rate=3e-5, lr_scheduler_type="linear",
                                            per_device_train_batch_size=16, num_ppo_epochs=4, kl_coef=0.05,
                                            missing_eos_penalty=1.0, max_completion_length=8)),
    "trl_preset_tiny": dict(trainer="trl", causes=[], split="held_out",
                            story="TRL with the tiny model's GRPO learning rate (3e-5), 2 prompts x 8 a step",
                            config=dict(learning_rate=3e-5, per_device_train_batch_size=16, num_generations=8,
                                        max_completion_length=6, max_steps=30, logging_steps=1)),
    "trl_defaults_beta004": dict(trainer="trl", causes=[], split="seen",
                                 story="TRL defaults with beta=0.04 and the tiny preset's learning rate, "
                                       "logging_steps=10",
                                 config=dict(learning_rate=3e-5, beta=0.04, per_device_train_batch_size=8,
                                             num_generations=8, max_completion_length=6, max_steps=40)),
    "smol_trl_defaults": dict(trainer="trl", model="smollm2-135m", causes=[], split="seen",
                              story="SmolLM2-135M with TRL's defaults (lr 1e-6, beta=0), logged every 2 steps",
                              config=dict(max_steps=12, logging_steps=2, per_device_train_batch_size=8,
                                          num_generations=4, max_completion_length=16)),
    "synthetic_slow_kl_drift": dict(trainer="synthetic", causes=[], split="seen",
                                    story="a TRL-style log of 2,000 steps, beta=0.04, KL rising linearly to 0.6 "
                                          "while reward climbs slowly (written from a model, not trained)"),
    "synthetic_r1zero_length": dict(trainer="synthetic", causes=[], split="seen",
                                    story="an R1-Zero-like log: reward 0.2 -> 0.6 with completions x2.5 longer, "
                                          "entropy falling after the rise (written from a model, not trained)"),
}


# ---------------------------------------------------------------------- this trainer
def _course_config(spec: dict, folder: Path):
    """The run's config: the tiny model's preset for the algorithm, then the run's own values."""
    from course_lib.algos import make_config
    from course_lib.presets import run_settings

    algo = spec.get("algo", "grpo")
    model, task = spec.get("model", "tiny"), spec.get("task", "arithmetic")
    settings = dict(run_settings(model, task if task != "gsm8k" else "arithmetic",
                                 algo if algo in ("grpo", "rloo") else "grpo"),
                    model_name_or_path=model, output_dir=str(folder), seed=spec.get("seed", 0), save_steps=0,
                    logging_steps=1, overwrite_output_dir=True)
    if algo == "ppo":
        for key in ("num_generations", "temperature"):
            settings.pop(key, None)
    settings.update(spec.get("config", {}))
    return make_config(algo, **settings)


def _course_run(name: str, spec: dict, folder: Path) -> None:
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.presets import task_settings
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer
    from course_lib import museum

    config = _course_config(spec, folder)
    seed, task = spec.get("seed", 0), spec.get("task", "arithmetic")
    names = spec.get("rewards") or (["correctness_first_number_reward"] if task in ("arithmetic", "gsm8k")
                                    else task_settings(task)["rewards"])
    rewards = [_capstone_tidy_rubric() if n == "tidy_rubric" else getattr(museum, n) if hasattr(museum, n)
               else get_reward_functions([n])[0] for n in names]
    data = "gsm8k:" + GSM8K if task == "gsm8k" else task
    model, tokenizer = load_policy(spec.get("model", "tiny"))
    Trainer(config, rewards, get_task(data, split="train", n=500 if task == "gsm8k" else 4000, seed=seed),
            model, tokenizer, progress=False).train()


def _capstone_tidy_rubric():
    """Lesson 11's rubric for the tiny model: a number (1.0), minus 0.5 past 8 characters."""
    import re

    from course_lib.rewards import number_reward, predicate_reward, rubric

    def rambles(text: str) -> bool:
        return len(re.sub(r"</?answer>", "", text).strip()) > 8

    return rubric((1.0, number_reward), (-0.5, predicate_reward(rambles, name="rambles")), name="tidy_rubric")


# ---------------------------------------------------------------------- TRL's GRPOTrainer, in a child process
_TRL_CHILD = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer
from course_lib import museum
from course_lib.data import get_task
from course_lib.rewards import get_reward_functions

spec, out = json.loads(sys.argv[1]), sys.argv[2]
if spec.get("model", "tiny") == "tiny":
    from course_lib.models import TINY_DIR
    path = str(TINY_DIR)
else:
    from course_lib.models import resolve_model_path
    path = str(resolve_model_path(spec["model"]))
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(path)
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
settings = dict(output_dir=out, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
                per_device_train_batch_size=8, num_generations=4, max_completion_length=8)
settings.update(spec.get("config", {}))
names = spec.get("rewards", ["correctness_first_number_reward"])
rewards = [getattr(museum, n) if hasattr(museum, n) else get_reward_functions([n])[0] for n in names]
task = "gsm8k:" + spec["gsm8k"] if spec.get("task") == "gsm8k" else spec.get("task", "arithmetic")
data = get_task(task, split="train", n=500, seed=0)
Config, Trainer = (RLOOConfig, RLOOTrainer) if spec.get("algo") == "rloo" else (GRPOConfig, GRPOTrainer)
trainer = Trainer(model=model, reward_funcs=rewards, args=Config(**settings), train_dataset=data,
                  processing_class=tokenizer)
trainer.train()
trainer.state.save_to_json(out + "/trainer_state.json")
"""


def _trl_run(name: str, spec: dict, folder: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = {**spec, "gsm8k": GSM8K}
    subprocess.run([sys.executable, "-c", _TRL_CHILD, json.dumps(child), str(folder)], check=True, env=env,
                   timeout=3000)


# ---------------------------------------------------------------------- logs written from a model
def _synthetic(name: str, spec: dict, folder: Path) -> None:
    """TRL-style ``log_history`` of a long healthy run, from a stated model with seeded noise."""
    rng = random.Random(0)
    rows = []
    if name == "synthetic_slow_kl_drift":
        # 2,000 steps logged every 10; KL to the reference grows linearly 0 -> 0.6 (beta=0.04);
        # a 0/1 reward on 64 completions climbs 0.30 -> 0.45 (batch noise sd 0.06).
        for step in range(10, 2010, 10):
            t = step / 2000
            rows.append(dict(step=step, loss=rng.gauss(0, 0.01), grad_norm=abs(rng.gauss(0.3, 0.05)),
                             learning_rate=1e-6, reward=min(1, max(0, 0.30 + 0.15 * t + rng.gauss(0, 0.06))),
                             reward_std=0.45, frac_reward_zero_std=min(1, max(0, 0.3 + rng.gauss(0, 0.05))),
                             kl=0.6 * t + abs(rng.gauss(0, 0.01)), entropy=0.6 - 0.1 * t + rng.gauss(0, 0.02),
                             **{"completions/mean_length": 180 + rng.gauss(0, 10),
                                "completions/clipped_ratio": 0.02, "clip_ratio/region_mean": 0.0,
                                "rewards/correctness/mean": 0.0, "rewards/correctness/std": 0.45}))
    else:
        # 60 logged steps: reward 0.2 -> 0.6 and completion length 200 -> 500 tokens rise together
        # (the R1-Zero picture: longer reasoning, more right answers); entropy falls from 0.5 to 0.15
        # once the reward has risen (the learned task sharpens the policy); beta=0, no kl.
        for i in range(60):
            t = i / 59
            rows.append(dict(step=i + 1, loss=rng.gauss(0, 0.01), grad_norm=abs(rng.gauss(0.25, 0.05)),
                             learning_rate=1e-6, reward=0.2 + 0.4 * t + rng.gauss(0, 0.03),
                             frac_reward_zero_std=min(1, max(0, 0.35 - 0.1 * t + rng.gauss(0, 0.04))),
                             entropy=0.5 - 0.35 * max(0.0, (t - 0.4) / 0.6) + rng.gauss(0, 0.01),
                             **{"completions/mean_length": 200 + 300 * t + rng.gauss(0, 10),
                                "completions/clipped_ratio": 0.01, "clip_ratio/region_mean": 0.0}))
    rows.append({"train_runtime": 1.0, "step": rows[-1]["step"]})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": rows}, indent=0))


# ---------------------------------------------------------------------- keep only the histories
def _keep(name: str, spec: dict, work: Path, out: Path = OUT) -> str:
    target = out / name
    target.mkdir(parents=True, exist_ok=True)
    if spec["trainer"] == "course":
        lines = [json.loads(line) for line in (work / "history.jsonl").read_text().splitlines() if line.strip()]
        # The live doctor's own findings are the old rules' output: the museum keeps the metrics
        # and the config row only, so a report on it is always the current rules'.
        kept = [r for r in lines if r.get("type", "metrics") in ("metrics", "config")]
        if not any(r.get("type") == "config" for r in kept):  # the live doctor never ran (logging_steps > steps)
            kept.insert(0, {"type": "config", "step": 0, "config": _course_config(spec, work).to_dict()})
        (target / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        return str((target / "history.jsonl").relative_to(out))
    shutil.copy(work / "trainer_state.json", target / "trainer_state.json")
    return str((target / "trainer_state.json").relative_to(out))


def main() -> None:
    build(RUNS, OUT, "museum2", __doc__)


def build(runs: dict[str, dict], out: Path, prefix: str, description: str) -> None:
    """The command line of a museum builder: train the named ``runs`` (or ``--reindex``) into ``out``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=list(runs), choices=list(runs))
    parser.add_argument("--reindex", action="store_true",
                        help="rewrite manifest.json from RUNS and the histories present, training nothing")
    args = parser.parse_args()
    out.mkdir(parents=True, exist_ok=True)
    for name in [] if args.reindex else args.runs:
        spec = runs[name]
        started = time.time()
        with tempfile.TemporaryDirectory(prefix=f"{prefix}-{name}-") as work:
            work = Path(work)
            {"course": _course_run, "trl": _trl_run, "synthetic": _synthetic}[spec["trainer"]](name, spec, work)
            path = _keep(name, spec, work, out)
        _write_manifest({name: round(time.time() - started, 1)}, runs, out)
        print(f"{name:28s} {time.time() - started:7.1f} s -> {path}", flush=True)
    if args.reindex:
        _write_manifest({}, runs, out)


def _write_manifest(seconds: dict[str, float], runs: dict[str, dict] = RUNS, out: Path = OUT) -> None:
    """manifest.json from ``runs``, for every run whose history is present (read just before the write,
    so two builders running at once keep each other's seconds), keeping entries of runs built elsewhere."""
    path = out / "manifest.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    manifest = {}
    for name, spec in runs.items():
        file = next((f for f in ("history.jsonl", "trainer_state.json") if (out / name / f).is_file()), None)
        if file is None:
            continue
        manifest[name] = {"file": f"{name}/{file}", "trainer": spec["trainer"], "model": spec.get("model", "tiny"),
                          "broken": bool(spec["causes"]), "causes": spec["causes"], "split": spec["split"],
                          "story": spec["story"], "seconds": seconds.get(name, old.get(name, {}).get("seconds"))}
    # Runs built elsewhere (lesson 09's reward-hack pair by benchmarks/reward_hack.py) have no spec here:
    # their entries stay while their history does.
    manifest.update({name: entry for name, entry in old.items()
                     if name not in runs and (out / entry["file"]).is_file()})
    path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
