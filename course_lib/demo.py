"""``make demo``: GRPO on an embedded model, with a held-out before/after table that beats its noise.

- ``smollm2-135m`` (default): SmolLM2-135M-Instruct with LoRA on every projection, trained
  with GRPO on two-digit addition with an ``<answer>`` tag (format + correctness rewards),
  2 prompts x 8 completions at temperature 1.0 per step, 30 steps
  (:data:`course_lib.presets.MEASURED`). Rollouts and evaluation run in the vLLM CPU engine
  with bfloat16 weights, and training runs in bfloat16, where the CPU has native bfloat16
  (:func:`course_lib.presets.fast_engine_settings`); elsewhere Hugging Face ``generate``
  and float32 do the same work, slower.
- ``tiny``: the embedded 0.9M-parameter model on plain two-digit addition; about a minute.

The demo measures greedy accuracy on the same 200 held-out problems before and after
training and prints a table: each accuracy with its 95% Wilson interval, and the lift
with its paired 95% interval (:func:`course_lib.evaluation.lift_interval`). A lift whose
interval excludes 0 is larger than the evaluation's noise. Beyond greedy accuracy it
samples :data:`PASS_AT_K` ``n`` answers per problem on the first held-out problems, at the
run's temperature, and reports pass@1 and pass@n (Chen et al. 2021's unbiased estimator)
before and after. It also prints a few answers
before and after, and saves ``reward.png`` (reward curves) and ``results.json`` in the
output folder.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from .presets import MEASURED, fast_engine_settings, task_settings

#: The demo's runs: a model, its task, and how many held-out problems measure it.
DEMOS = {"smollm2-135m": {"task": "arithmetic-tagged", "eval_n": 200},
         "tiny": {"task": "arithmetic", "eval_n": 200}}
#: Sampled evaluation: n answers per problem on the first `problems` held-out problems.
PASS_AT_K = {"n": 8, "problems": 50}
# What the demo prints along the way.
_LOGGING = {"smollm2-135m": dict(logging_steps=10, log_completions=True, num_completions_to_print=2),
            "tiny": dict(logging_steps=50)}


def demo_settings(model: str, output_dir: str | os.PathLike, max_steps: int | None = None,
                  engine: str | None = None, asynchronous: bool | None = None) -> dict[str, Any]:
    """The config values of a demo run: the measured preset, the fast engine, logging and paths.

    ``asynchronous`` (None: where it is faster) samples in a second process while the trainer
    learns (``async_generation``): SmolLM2 on Hugging Face ``generate`` on a CPU, where
    ``benchmarks/async_vs_sync.py`` measured 1.67x the synchronous steps per minute. The vLLM
    engine stays synchronous, and so does the tiny model: its whole run (200 steps, ~16 s) is shorter
    than the worker's start-up (~10 s of imports) could repay.
    """
    demo = DEMOS[model]
    settings = dict(MEASURED[(model, demo["task"], "grpo")], **_LOGGING[model], model_name_or_path=model,
                    output_dir=str(Path(output_dir) / model), save_steps=0, seed=0,
                    overwrite_output_dir=True)  # the demo's own folder: a new demo replaces the last one
    if model != "tiny":  # the tiny model's rollouts are 6 characters: HF generate is as fast
        settings.update(fast_engine_settings())
    if engine is not None:
        settings["engine"] = engine
        if engine == "hf":  # HF generate in float32, the set-up without vLLM
            settings.pop("vllm_dtype", None)
            settings.pop("dtype", None)
    if max_steps is not None:
        settings["max_steps"] = max_steps
    if asynchronous is None:
        import torch

        asynchronous = model != "tiny" and settings.get("engine", "hf") == "hf" and not torch.cuda.is_available()
    if asynchronous:
        settings.update(async_generation=True, max_staleness=1)
    return settings


# Held-out prompts per generate call during an evaluation: large enough for the engine to
# batch well, small enough that the progress line moves every few seconds.
EVAL_CHUNK = 25


def greedy_correct(trainer, dataset, desc: str = "eval") -> tuple[list[bool], list[str]]:
    """Greedy completions of every row by the trainer's current policy, and whether each is correct.

    Generated in chunks of ``EVAL_CHUNK`` prompts with a progress bar (periodic lines where
    no bar can be drawn): a 200-problem evaluation takes minutes on a CPU.
    """
    from .evaluation import is_correct
    from .progress import progress_bar

    prompts = list(dataset["prompt"])
    texts: list[str] = []
    with progress_bar(total=len(prompts), desc=desc, unit="problem") as bar:
        for start in range(0, len(prompts), EVAL_CHUNK):
            chunk = trainer.generate(prompts[start:start + EVAL_CHUNK]).texts
            texts += chunk
            bar.update(len(chunk))
    return [is_correct(text, answer) for text, answer in zip(texts, dataset["answer"])], texts


#: Seconds per held-out problem (one greedy evaluation) and per training step of the
#: smollm2-135m demo on each path, and its start-up (model load, engine warm-up), measured
#: with ``benchmarks/demo_paths.py`` (the demo's real settings) on 2 shared cores of an Intel
#: Xeon with AVX-512 and AMX, under the load average in ``load`` (see the README). A quiet
#: machine is faster: the whole bf16 demo took 4 min 9 s there.
MEASURED_PACE = {
    "vllm-bf16": {"eval_s": 0.10, "step_s": 10.35, "start_s": 54.7, "load": 7.4},
    "vllm-fp32": {"eval_s": 0.447, "step_s": 28.68, "start_s": 78.0, "load": 15.8},
    "hf-fp32": {"eval_s": 2.163, "step_s": 45.88, "start_s": 23.0, "load": 7.4},
    # `--engine hf` with and without `--sync`, 4 steps and 10 problems, side by side in a quiet moment
    "hf-fp32-async": {"eval_s": 0.629, "step_s": 6.05, "start_s": 17.7, "load": 1.4},
}


def path_and_estimate(model: str, settings: dict[str, Any], eval_n: int) -> tuple[str, str, float | None]:
    """Which path the demo takes on this machine, why, and about how many seconds it will run."""
    from .machine import cpu_supports_bfloat16

    if settings.get("engine") == "vllm" and settings.get("vllm_dtype") == "bfloat16":
        path, why = "vllm-bf16", ("vLLM CPU engine with a bfloat16 sampler, bfloat16 training "
                                  "(this CPU has native bfloat16)")
    elif settings.get("engine") == "vllm":
        path, why = "vllm-fp32", f"vLLM engine, {settings.get('vllm_dtype', 'auto')} sampler"
    else:
        reason = ("--engine hf" if settings.get("engine") == "hf" else
                  "this CPU has no native bfloat16 (AVX512-BF16 or AMX)" if not cpu_supports_bfloat16() else
                  "vLLM is not installed")
        path, why = "hf-fp32", f"Hugging Face generate and float32 training ({reason})"
        if settings.get("async_generation"):
            path, why = "hf-fp32-async", why + "; a second process samples while the trainer learns (--sync: one)"
    pace = MEASURED_PACE.get(path) if model == "smollm2-135m" else None
    if pace is None:
        return path, why, None
    seconds = pace["start_s"] + 2 * eval_n * pace["eval_s"] + settings["max_steps"] * pace["step_s"]
    return path, why, seconds


def example_rows(before: list[bool], after: list[bool], fixed: int = 2, broken: int = 1) -> list[tuple[int, str]]:
    """Which held-out problems to show: the first ``fixed`` that training fixed and the first
    ``broken`` it broke (both kinds exist in a real run), else the first ones unchanged."""
    rows = ([(i, "fixed") for i, (b, a) in enumerate(zip(before, after)) if a and not b][:fixed]
            + [(i, "broken") for i, (b, a) in enumerate(zip(before, after)) if b and not a][:broken])
    return rows or [(i, "unchanged") for i in range(min(3, len(before)))]


def results_table(before: list[bool], after: list[bool]) -> tuple[str, dict[str, Any]]:
    """The before/after table (Wilson intervals, paired lift interval) as text, and its numbers.

    Args:
        before, after: correctness of each held-out problem, in the same order, before and
            after training.
    """
    from .evaluation import format_accuracy, lift_interval, wilson_interval

    n = len(before)
    lift, low, high = lift_interval(before, after)
    verdict = ("larger than its noise: the interval excludes 0" if low > 0 else
               "worse, beyond noise" if high < 0 else "within the noise: the interval contains 0")
    lines = [f"held-out greedy accuracy, {n} problems (95% Wilson interval)",
             f"  before training   {format_accuracy(sum(before), n)}",
             f"  after training    {format_accuracy(sum(after), n)}",
             f"  lift              {100 * lift:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}] "
             f"(paired 95% interval; {verdict})",
             f"  problems fixed {sum(a and not b for b, a in zip(before, after))}, "
             f"broken {sum(b and not a for b, a in zip(before, after))}"]
    numbers = {"n": n, "accuracy_before": sum(before) / n, "accuracy_after": sum(after) / n,
               "interval_before": wilson_interval(sum(before), n), "interval_after": wilson_interval(sum(after), n),
               "lift": lift, "lift_interval": [low, high]}
    return "\n".join(lines), numbers


def pass_at_k_table(before, after) -> tuple[str, dict[str, Any]]:
    """pass@1 and pass@n before and after (paired intervals over problems), as text and numbers.

    Args:
        before, after: :class:`course_lib.evaluation.SampledEvaluation` of the same problems
            with the same ``n``.
    """
    from .evaluation import lift_interval

    n, problems = before.n, len(before.correct_counts)
    lines = [f"held-out sampled accuracy, {problems} problems x {n} samples at temperature {before.temperature:g}"]
    numbers: dict[str, Any] = {"pass_at_k_problems": problems, "pass_at_k_samples": n}
    for k in sorted({1, n}):
        lift, low, high = lift_interval(before.per_problem_pass_at(k), after.per_problem_pass_at(k))
        lines.append(f"  pass@{k:<3} before {100 * before.pass_at[k]:5.1f}%, after {100 * after.pass_at[k]:5.1f}%, "
                     f"lift {100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]")
        numbers[f"pass@{k}_before"], numbers[f"pass@{k}_after"] = before.pass_at[k], after.pass_at[k]
        numbers[f"pass@{k}_lift_interval"] = [low, high]
    return "\n".join(lines), numbers


def _quiet_vllm() -> None:
    # vLLM logs one warning per weight tensor at every weight sync (a float32 tensor loaded
    # into a bfloat16 engine, which is the point): keep the demo's output readable.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    for name in ("vllm", "vllm.model_executor"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run_demo(model: str = "smollm2-135m", output_dir: str = "outputs/demo", max_steps: int | None = None,
             engine: str | None = None, eval_n: int | None = None, asynchronous: bool | None = None) -> dict[str, Any]:
    """Evaluate, train with GRPO, evaluate again; print the table and return ``results.json``'s content."""
    import matplotlib

    matplotlib.use("Agg")

    from .algos import GRPOConfig
    from .data import get_task
    from .models import load_policy
    from .progress import heartbeat
    from .rewards import get_reward_functions
    from .trainer import Trainer
    from .widgets.dashboard import plot_training_history

    if model not in DEMOS:
        raise SystemExit(f"make demo MODEL={model}: choose one of {', '.join(DEMOS)}.")
    demo = DEMOS[model]
    settings = demo_settings(model, output_dir, max_steps, engine, asynchronous)
    if settings.get("engine") == "vllm":
        _quiet_vllm()
    config = GRPOConfig(**settings)
    rewards = task_settings(demo["task"])["rewards"]
    output = Path(config.output_dir)
    start = time.time()
    n_test = eval_n or demo["eval_n"]
    path, why, seconds = path_and_estimate(model, settings, n_test)
    print(f"GRPO demo: {model} on {demo['task']}, {config.max_steps} steps of "
          f"{config.unique_prompts_per_generation} prompts x {config.num_generations} completions")
    print(f"path: {why}")
    if seconds is not None:
        print(f"expect about {max(1, round(seconds / 60))} min in all (start-up, evaluation of {n_test} problems, "
              f"{config.max_steps} steps, evaluation again): the pace measured on 2 shared cores at a load average "
              f"of {MEASURED_PACE[path]['load']}; a quieter or faster machine takes less")
    with heartbeat("loading the model and starting the rollout engine"):
        policy, tokenizer = load_policy(model)
        test = get_task(demo["task"], split="test", n=n_test, seed=0)
        train = get_task(demo["task"], split="train", n=2000, seed=0)
        trainer = Trainer(config, get_reward_functions(rewards), train, policy, tokenizer)
    sampler = ("vLLM, " + str(trainer._engine_options()["dtype"]) if config.engine == "vllm"
               else "Hugging Face generate")
    print(f"rollouts and evaluation with {sampler}")

    def evaluate(label: str) -> tuple[list[bool], list[str]]:
        correct, texts = greedy_correct(trainer, test, desc=f"{label} (greedy, held-out)")
        print(f"\n{label}: {sum(correct)}/{len(correct)} held-out problems right (greedy)")
        return correct, texts

    from .evaluation import group_texts, score_samples
    from .rollout import SamplingConfig

    pass_rows = test.select(range(min(PASS_AT_K["problems"], len(test))))
    pass_sampling = SamplingConfig(temperature=config.temperature, max_tokens=config.max_completion_length, seed=0)

    def sample(_model) -> Any:  # through the run's engine (vLLM where the run samples with it)
        began = time.time()
        texts = trainer.generate(pass_rows["prompt"], n=PASS_AT_K["n"], sampling=pass_sampling).texts
        print(f"sampled {len(texts)} completions for pass@k in {time.time() - began:.0f} s")
        return score_samples(group_texts(texts, PASS_AT_K["n"]), pass_rows["answer"], (1, PASS_AT_K["n"]),
                             config.temperature)

    before, texts_before = evaluate("Before GRPO")
    sampled_before = sample(trainer.model)
    history = trainer.train()
    after, texts_after = evaluate("After GRPO")
    sampled_after = sample(trainer.model)
    for index, verdict in example_rows(before, after):
        row = test[index]
        print(f"  {verdict}: {row['question']} (reference {row['answer']})\n"
              f"     before: {texts_before[index].strip()!r}\n     after:  {texts_after[index].strip()!r}")

    reward_keys = ["reward"] + [f"rewards/{name}/mean" for name in rewards]
    figure = plot_training_history(history, keys=reward_keys, smooth=5,
                                   title=f"GRPO on {model}: reward per optimizer step")
    output.mkdir(parents=True, exist_ok=True)
    figure.savefig(output / "reward.png", dpi=120)
    table, numbers = results_table(before, after)
    pass_table, pass_numbers = pass_at_k_table(sampled_before, sampled_after)
    table, numbers = f"{table}\n{pass_table}", {**numbers, **pass_numbers}
    first, last = history[: max(1, len(history) // 5)], history[-max(1, len(history) // 5):]
    mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    results = {"model": model, "task": demo["task"], "engine": sampler, "steps": len(history),
               "seconds": round(time.time() - start, 1), **numbers,
               "reward_first_fifth": mean(first, "reward"), "reward_last_fifth": mean(last, "reward")}
    (output / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\n{table}")
    print(f"training reward {results['reward_first_fifth']:.3f} (first fifth of the steps) -> "
          f"{results['reward_last_fifth']:.3f} (last fifth); {len(history)} steps, {results['seconds']:.0f} s in all")
    print(f"saved {output / 'reward.png'}, {output / 'results.json'} and {output / 'history.jsonl'}")
    return results
