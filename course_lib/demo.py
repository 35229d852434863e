"""``make demo``: evaluate the embedded models on the embedded task, with a table and a plot."""

from __future__ import annotations

import json
import time
from pathlib import Path

MODELS_AND_TASKS = (("tiny", "arithmetic"), ("smollm2-135m", "arithmetic-tagged"))


def run_demo(model: str = "smollm2-135m", output_dir: str = "outputs/demo", n: int = 50) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .data import get_task
    from .evaluation import evaluate_accuracy
    from .models import load_policy

    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    results = []
    for name, task in MODELS_AND_TASKS:
        start = time.time()
        policy, tokenizer = load_policy(name)
        dataset = get_task(task, split="test", n=n, seed=0)
        accuracy, completions = evaluate_accuracy(policy, tokenizer, dataset, max_new_tokens=48,
                                                  return_completions=True, progress=True)
        results.append({"model": name, "task": task, "n": n, "accuracy": accuracy,
                        "seconds": round(time.time() - start, 1),
                        "samples": [{"question": q[-1]["content"], "completion": c.strip(), "answer": a}
                                    for q, c, a in list(zip(dataset["prompt"], completions, dataset["answer"]))[:3]]})
    print(f"\n{'model':<14} {'task':<18} {'accuracy':>9} {'time (s)':>9}")
    for r in results:
        print(f"{r['model']:<14} {r['task']:<18} {r['accuracy']:>9.1%} {r['seconds']:>9}")
    for r in results:
        print(f"\n{r['model']} samples:")
        for s in r["samples"]:
            print(f"  Q: {s['question']}\n  A: {s['completion']!r} (reference {s['answer']})")
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.bar([r["model"] for r in results], [100 * r["accuracy"] for r in results], color=["#4c72b0", "#dd8452"])
    axis.set_ylabel("greedy accuracy on held-out problems (%)")
    axis.set_title(f"Embedded models before RL (n={n})")
    axis.set_ylim(0, 100)
    figure.tight_layout()
    figure.savefig(output / "accuracy.png", dpi=120)
    (output / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nsaved {output / 'accuracy.png'} and {output / 'results.json'}")
    return 0
