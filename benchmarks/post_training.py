"""SFT, rejection sampling, DPO, GRPO and on-policy distillation on one task, at equal compute.

Every method starts from the same model (the embedded ``tiny`` policy by default: 32% greedy
accuracy on two-digit additions, so there is room to learn, and a verifier exists) and may
spend the same **budget**, counted in tokens through the model:

- tokens *sampled* (prompt + completion of every sample: GRPO's groups, rejection sampling's
  rounds, distillation's student samples, the samples DPO's pairs are built from), plus
- tokens *in forward passes that learn or score* (prompt + completion of every trained row,
  and of every reference / teacher pass: DPO's reference, distillation's teacher).

So per optimizer step a method costs ``rows x tokens x passes``: SFT 1 pass (the trained
rows), DPO 2 (policy + reference), GRPO and rejection sampling 2 (sampling + training),
distillation 3 (sampling + training + teacher). DPO's pair building is paid up front. The
teacher of distillation is the start model after a longer SFT run (no download); its own cost
is reported beside, not charged to the student. Wall time is reported too.

Measured: held-out greedy accuracy (Wilson 95% interval) and the paired lift over the start
model (course_lib.evaluation.lift_interval), pass@1 and pass@k from ``k`` samples at
temperature 1 (does a method sharpen or widen what the model can do?), and accuracy on a
**shifted** held-out set (three-digit operands after training on two) at the end; accuracy
against budget at a few points of the run, one curve per method (``curves.png``).

Run (the small configuration measured on a shared 2-core CPU; see benchmarks/README.md)::

    python benchmarks/post_training.py --budget 60000 --eval-n 200 --out runs/post_training

On SmolLM2-135M (LoRA, the demo's tagged additions, demonstrations in the prompt's worked-example
format; best on a GPU; the measured run is in benchmarks/README.md and
``benchmarks/data/post_training_smollm2/``)::

    python benchmarks/post_training.py --model smollm2-135m --budget 150000 --eval-n 200 --out runs/pt_smollm2

``results.json`` and ``curves.png`` are rewritten after each method, so a run stopped early keeps
what it measured; a method that fails is reported and the others still run (exit status 1).
One seed; the table says so.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.algos import make_config  # noqa: E402
from course_lib.post_training.data import demonstrations, preference_pairs  # noqa: E402
from course_lib.data import arithmetic_dataset, get_task  # noqa: E402
from course_lib.evaluation import evaluate_accuracy, lift_interval, wilson_interval  # noqa: E402
from course_lib.models import load_policy  # noqa: E402
from course_lib.rewards import get_reward_functions  # noqa: E402
from course_lib.rewards.answers import is_correct  # noqa: E402
from course_lib.sampled_evaluation import evaluate_sampled  # noqa: E402
from course_lib.trainer import Trainer  # noqa: E402

METHODS = ("sft", "rejection", "dpo", "grpo", "distill")
MODEL = "tiny"
#: Forward passes per trained row (see the module docstring).
PASSES = {"sft": 1, "dpo": 2, "grpo": 2, "rejection": 2, "distill": 3}
#: Per-method settings on the tiny model: one batch of 32 rows a step; GRPO's are the measured
#: preset (course_lib.presets, lr 3e-5: larger steps collapsed it); the supervised methods take a
#: larger learning rate, as a supervised loss has a bounded, low-variance gradient.
TINY_SETTINGS = {
    "sft": dict(learning_rate=3e-4),
    "rejection": dict(learning_rate=3e-4, num_generations=8, temperature=1.0),
    "dpo": dict(learning_rate=1e-4, beta=0.1),
    "grpo": dict(learning_rate=3e-5, num_generations=8, temperature=1.0, beta=0.0),
    "distill": dict(learning_rate=3e-4, num_generations=1, temperature=1.0, beta=1.0),
}
#: SmolLM2-135M-Instruct with LoRA on every projection, on the demo's task (two-digit addition
#: answered inside <answer> tags, one worked example in the prompt). Every method takes the
#: learning rate the demo measured for GRPO (course_lib.presets.MEASURED, 1e-4: 3e-4 collapsed
#: GRPO) and 16 rows a step, chosen before any run of this benchmark: one rate for all, so no
#: method is helped by a search the others did not get. Rejection sampling keeps samples with
#: the full reward (format 1 + correct 1).
SMOLLM2_SETTINGS = {
    "sft": dict(learning_rate=1e-4),
    "rejection": dict(learning_rate=1e-4, num_generations=8, temperature=1.0, reward_threshold=2.0),
    "dpo": dict(learning_rate=1e-4, beta=0.1),
    "grpo": dict(learning_rate=1e-4, num_generations=8, temperature=1.0, beta=0.0),
    "distill": dict(learning_rate=1e-4, num_generations=1, temperature=1.0, beta=1.0),
}
TINY_COMMON = dict(per_device_train_batch_size=32, max_completion_length=6, logging_steps=1, save_steps=0,
                   lr_scheduler_type="constant", max_steps=100000)
SMOLLM2_COMMON = dict(per_device_train_batch_size=16, max_completion_length=32, logging_steps=1, save_steps=0,
                      lr_scheduler_type="constant", max_steps=100000, use_lora=True, lora_r=16, lora_alpha=32,
                      lora_dropout=0.0)


def answer_only(dataset):
    """The tiny model's demonstrations: the reference answer itself (the format it writes)."""
    return demonstrations(dataset)


def worked_answer(dataset):
    """SmolLM2's demonstrations in the prompt's worked-example format: ``12 + 7 = 19. <answer>19</answer>``."""
    sums = [question.removeprefix("What is ").rstrip("?") for question in dataset["question"]]
    return dataset.add_column("completion", [f"{expr} = {answer}. <answer>{answer}</answer>"
                                             for expr, answer in zip(sums, dataset["answer"])])


#: What changes with the model: its task and rewards, lengths, per-method settings, demonstrations.
PROFILES = {
    "tiny": dict(task="arithmetic", tagged=False, rewards=["correctness_first_number_reward"], eval_tokens=8,
                 common=TINY_COMMON, settings=TINY_SETTINGS, demonstrations=answer_only),
    "smollm2-135m": dict(task="arithmetic-tagged", tagged=True, rewards=["answer_tag_format_reward",
                                                                          "correctness_reward"],
                         eval_tokens=32, common=SMOLLM2_COMMON, settings=SMOLLM2_SETTINGS,
                         demonstrations=worked_answer),
}
#: The profile of this run (set by main from --model).
PROFILE = PROFILES["tiny"]
SETTINGS = PROFILE["settings"]
COMMON = PROFILE["common"]


class BudgetSpent(Exception):
    """Raised from the step callback when a method has spent its budget."""


def correct_list(model, tokenizer, dataset) -> list[bool]:
    """Per-problem greedy correctness (for Wilson and paired intervals)."""
    _, completions = evaluate_accuracy(model, tokenizer, dataset, max_new_tokens=PROFILE["eval_tokens"],
                                       return_completions=True, progress=False)
    return [bool(is_correct(c, a)) for c, a in zip(completions, dataset["answer"])]


def summary(correct: list[bool]) -> dict:
    low, high = wilson_interval(sum(correct), len(correct))
    return {"accuracy": sum(correct) / len(correct), "wilson": [low, high], "n": len(correct)}


def sampled(model, tokenizer, dataset, k: int, seed: int) -> dict:
    result = evaluate_sampled(model, tokenizer, dataset, n=k, ks=[1, k], temperature=1.0,
                              max_new_tokens=PROFILE["eval_tokens"], seed=seed)
    return {"pass@1": result.pass_at[1], f"pass@{k}": result.pass_at[k]}


def train_teacher(base, tokenizer, train, steps: int, seed: int) -> tuple[torch.nn.Module, dict]:
    """The distillation teacher: the start model after ``steps`` of SFT on the demonstrations."""
    model = copy.deepcopy(base)
    started, tokens = time.time(), {}
    with tempfile.TemporaryDirectory() as folder:
        config = make_config("sft", model_name_or_path=MODEL, output_dir=folder, seed=seed,
                             **{**COMMON, "max_steps": steps, "learning_rate": SETTINGS["sft"]["learning_rate"]})
        trainer = Trainer(config, None, PROFILE["demonstrations"](train), model, tokenizer, progress=False)
        rows = trainer.train()
        tokens = rows[-1]["num_tokens"]
    return model, {"steps": steps, "tokens": tokens, "seconds": time.time() - started}


def run_method(method, base, tokenizer, train, reward_funcs, budget, curve_set, curve_points, seed, teacher,
               pair_rows, pair_cost) -> dict:
    """Train a copy of ``base`` with ``method`` until its cost reaches ``budget``; the accuracy curve."""
    model = copy.deepcopy(base)
    dataset = {"sft": PROFILE["demonstrations"](train), "dpo": pair_rows}.get(method, train)
    start_cost = pair_cost if method == "dpo" else 0
    curve, marks = [], [budget * (i + 1) / curve_points for i in range(curve_points)]
    state = {"cost": start_cost, "steps": 0}
    started = time.time()

    def on_step(row):
        state["cost"] = start_cost + PASSES[method] * row["num_tokens"]
        state["steps"] = row["step"]
        while marks and state["cost"] >= marks[0]:
            marks.pop(0)
            was_training = model.training
            model.eval()
            accuracy = sum(correct_list(model, tokenizer, curve_set)) / len(curve_set)
            model.train(was_training)
            curve.append({"cost": state["cost"], "accuracy": accuracy, "step": row["step"]})
        if not marks:
            raise BudgetSpent

    with tempfile.TemporaryDirectory() as folder:
        config = make_config(method, model_name_or_path=MODEL, output_dir=folder, seed=seed,
                             **{**COMMON, **SETTINGS[method]})
        extra = {"teacher_model": teacher} if method == "distill" else {}
        needs_rewards = method in ("rejection", "grpo")
        trainer = Trainer(config, reward_funcs if needs_rewards else None, dataset, model, tokenizer,
                          progress=False, on_step=on_step, **extra)
        try:
            trainer.train()
        except BudgetSpent:
            pass
    model.eval()
    return {"model": model, "curve": curve, "cost": state["cost"], "steps": state["steps"],
            "seconds": time.time() - started}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--model", default="tiny", choices=sorted(PROFILES),
                        help="start model (smollm2-135m: LoRA, the demo's tagged task; best on a GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", type=int, default=60000, help="tokens through the model per method")
    parser.add_argument("--train-rows", type=int, default=2000)
    parser.add_argument("--eval-n", type=int, default=200, help="held-out problems (and shifted ones)")
    parser.add_argument("--curve-n", type=int, default=100, help="held-out problems per point of the curves")
    parser.add_argument("--curve-points", type=int, default=4)
    parser.add_argument("--k", type=int, default=8, help="samples per problem for pass@k")
    parser.add_argument("--pass-n", type=int, default=50, help="problems for pass@1 / pass@k")
    parser.add_argument("--teacher-steps", type=int, default=200)
    parser.add_argument("--pair-prompts", type=int, default=100, help="prompts DPO's pairs are sampled from (k=4 each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="METHOD.FIELD=VALUE",
                        help="change one method's setting, e.g. --set rejection.learning_rate=3e-5 (repeatable)")
    parser.add_argument("--out", default=None, help="folder for results.json and curves.png")
    args = parser.parse_args(argv)
    global MODEL, PROFILE, SETTINGS, COMMON
    MODEL, PROFILE = args.model, PROFILES[args.model]
    SETTINGS, COMMON = {m: dict(v) for m, v in PROFILE["settings"].items()}, PROFILE["common"]
    for item in args.overrides:
        key, _, value = item.partition("=")
        method, _, name = key.partition(".")
        if method not in SETTINGS or not name or not value:
            parser.error(f"--set {item!r}: use METHOD.FIELD=VALUE with METHOD one of {', '.join(METHODS)}")
        SETTINGS[method] = {**SETTINGS[method], name: json.loads(value) if value[0] in "[{" else _number(value)}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    torch.manual_seed(args.seed)

    base, tokenizer = load_policy(MODEL, dtype="float32", device=args.device)
    reward_funcs = get_reward_functions(PROFILE["rewards"])
    train = get_task(PROFILE["task"], split="train", n=args.train_rows, seed=args.seed)
    held_out = get_task(PROFILE["task"], split="test", n=args.eval_n, seed=1)
    shifted = arithmetic_dataset(n=args.eval_n, split="test", seed=1, digits=3, tagged=PROFILE["tagged"])
    curve_set = held_out.select(range(min(args.curve_n, len(held_out))))
    pass_set = held_out.select(range(min(args.pass_n, len(held_out))))

    base.eval()
    before = correct_list(base, tokenizer, held_out)
    results = {"setup": {**vars(args), "task": f"{PROFILE['task']} (2-digit +)", "seeds": 1,
                         "passes": PASSES, "settings": SETTINGS, "torch_threads": torch.get_num_threads()},
               "start": {"held_out": summary(before), "shifted": summary(correct_list(base, tokenizer, shifted)),
                         **sampled(base, tokenizer, pass_set, args.k, args.seed)}}
    print(f"start: held-out {results['start']['held_out']['accuracy']:.3f}  shifted "
          f"{results['start']['shifted']['accuracy']:.3f}", flush=True)

    teacher = None
    if "distill" in methods:
        teacher, cost = train_teacher(base, tokenizer, train, args.teacher_steps, args.seed)
        teacher.eval()
        results["teacher"] = {**cost, "held_out": summary(correct_list(teacher, tokenizer, held_out))}
        print(f"teacher: {json.dumps(results['teacher'])}", flush=True)
    pair_rows, pair_cost = None, 0
    if "dpo" in methods:
        started = time.time()
        prompts = train.select(range(min(args.pair_prompts, len(train))))
        rows, stats = preference_pairs(base, tokenizer, prompts, reward_funcs, k=4,
                                       max_tokens=COMMON["max_completion_length"], seed=args.seed)
        from datasets import Dataset

        pair_rows, pair_cost = Dataset.from_list(rows), stats["tokens_sampled"]
        results["dpo_pairs"] = {**stats, "seconds": time.time() - started}
        print(f"dpo pairs: {json.dumps(results['dpo_pairs'])}", flush=True)
        needed = make_config("dpo", model_name_or_path=MODEL, **COMMON, **SETTINGS["dpo"]).unique_prompts_per_generation
        if pair_cost >= args.budget:
            print(f"dpo: building the pairs cost {pair_cost} tokens, the whole budget; DPO is left out", flush=True)
            methods = [m for m in methods if m != "dpo"]
        elif len(rows) < needed:
            print(f"dpo: {len(rows)} pairs, fewer than the {needed} one batch needs; DPO is left out (raise "
                  "--pair-prompts)", flush=True)
            methods = [m for m in methods if m != "dpo"]

    failed = []
    for method in methods:
        try:
            run = run_method(method, base, tokenizer, train, reward_funcs, args.budget, curve_set,
                             args.curve_points, args.seed, teacher, pair_rows, pair_cost)
        except Exception:  # one method's failure is reported and the others still run
            traceback.print_exc()
            print(f"{method}: failed (traceback above); the other methods go on", flush=True)
            failed.append(method)
            continue
        model = run.pop("model")
        after = correct_list(model, tokenizer, held_out)
        lift, low, high = lift_interval(before, after)
        results[method] = {**run, "held_out": summary(after), "lift": [lift, low, high],
                           "shifted": summary(correct_list(model, tokenizer, shifted)),
                           **sampled(model, tokenizer, pass_set, args.k, args.seed)}
        r = results[method]
        print(f"{method}: steps {r['steps']} cost {r['cost']} wall {r['seconds']:.0f}s held-out "
              f"{r['held_out']['accuracy']:.3f} lift {lift:+.3f} [{low:+.3f}, {high:+.3f}] shifted "
              f"{r['shifted']['accuracy']:.3f} pass@1 {r['pass@1']:.3f} pass@{args.k} {r[f'pass@{args.k}']:.3f}",
              flush=True)

        save(results, methods, args.out)  # after each method: a long run that stops keeps what it measured

    print(table(results, methods, args.k))
    save(results, methods, args.out)
    return 1 if failed else 0


def save(results: dict, methods: list[str], out: str | None) -> None:
    """``results.json`` and ``curves.png`` in ``out`` (nothing without ``--out``)."""
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "results.json").write_text(json.dumps(results, indent=1))
        plot(results, methods, Path(out) / "curves.png")


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def table(results: dict, methods: list[str], k: int) -> str:
    """The markdown table of README/benchmarks: one row per method, the start model first."""
    def pct(x):
        return f"{100 * x:.1f}"

    def acc(entry):
        low, high = entry["wilson"]
        return f"{pct(entry['accuracy'])} [{pct(low)}, {pct(high)}]"

    start = results["start"]
    lines = [f"| method | budget tokens | steps | wall s | held-out greedy % [95% CI] | paired lift, points [95% CI] "
             f"| pass@1 % | pass@{k} % | shifted (3-digit) % |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| start model | 0 | 0 | 0 | {acc(start['held_out'])} | - | {pct(start['pass@1'])} | "
             f"{pct(start[f'pass@{k}'])} | {acc(start['shifted'])} |"]
    for method in methods:
        if method not in results:
            continue
        r = results[method]
        lift, low, high = r["lift"]
        lines.append(f"| {method} | {r['cost']} | {r['steps']} | {r['seconds']:.0f} | {acc(r['held_out'])} | "
                     f"{100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | {pct(r['pass@1'])} | "
                     f"{pct(r[f'pass@{k}'])} | {acc(r['shifted'])} |")
    return "\n".join(lines)


def plot(results: dict, methods: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    start = results["start"]["held_out"]["accuracy"]
    for method in methods:
        if method in results:
            curve = results[method]["curve"]
            ax.plot([0] + [p["cost"] for p in curve], [start] + [p["accuracy"] for p in curve], marker="o",
                    label=method)
    ax.set_xlabel("budget: tokens sampled + tokens in forward passes")
    ax.set_ylabel("held-out greedy accuracy")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
