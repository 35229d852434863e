"""Does RL add anything over more supervision? A guessing game whose demonstrations are suboptimal.

Task: a secret integer from 1 to ``N`` lives only inside the environment; the model finds it
with a ``guess(number)`` tool that answers ``higher``, ``lower`` or ``correct``, at most
``K`` guesses (``max_tool_calling_iterations = K``, one call per round). Binary search finds
every secret of 1..15 in 4 guesses; the scripted demonstrator does not bisect: it guesses
uniformly among the numbers still consistent with the feedback, which finds the secret
within 4 guesses 60.4% of the time on 1..15 (67.8% on 1..7 with 3; exact expectation,
:func:`random_consistent_success`). So supervised training on its traces can at best copy
a 60% policy, while the reward (``get_reward``: 1 when the secret was found within the
budget) pays for the better one the traces never show. Why this task: it is multi-round
(the feedback of round t decides round t+1), stateful (``environment_factory``, the answer is
only in the environment), CPU/GPU-small (135M model, < 200 tokens per trajectory), and the
best behaviour is known and checkable.

Four stages, each evaluated greedily on the same held-out problems (every secret under
prompt phrasings that training never uses), scored from the environment's state
(``evaluate_tool_accuracy(..., score="environment")``):

1. **base**: SmolLM2-135M-Instruct as shipped;
2. **warm**: ``supervised_warmup`` on ``--warmup-steps`` batches of scripted traces;
3. **sft**: warm + ``--steps`` more supervised steps on ``--batch`` new scripted traces each
   (the same number of trajectories, optimizer steps and roughly the same tokens as GRPO);
4. **grpo**: warm + ``--steps`` GRPO steps of ``--batch`` rollouts (``--generations`` per
   problem), reward ``get_reward`` alone.

Reported per stage: solved within the budget [95% Wilson], guesses (calls) per problem,
rounds, failed calls; paired lifts (``lift_interval``), sft - warm, grpo - warm and the
comparison that matters, grpo - sft.

    python benchmarks/guess_rl_vs_sft.py --device cuda                     # the measured run
    python benchmarks/guess_rl_vs_sft.py --warmup-steps 2 --steps 1 --batch 4 --generations 2   # a smoke run
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import re
import tempfile
import time
from functools import lru_cache

import torch

TRAIN_PHRASINGS = (
    "I am thinking of a number from 1 to {n}. Find it with the guess tool (it answers higher, lower or correct); "
    "you have {k} guesses.",
    "Guess my secret number between 1 and {n}. The guess tool says higher, lower or correct. At most {k} guesses.",
    "There is a hidden integer in 1..{n}. Use guess to find it; the feedback is higher, lower or correct. "
    "Budget: {k} guesses.",
    "Find the secret number (1 to {n}) in at most {k} guesses with the guess tool: higher, lower or correct.",
)
HELD_OUT_PHRASINGS = (
    "A number between 1 and {n} is hidden. You may call guess up to {k} times; it replies higher, lower or correct. "
    "Find the number.",
    "Play a guessing game: the secret is an integer from 1 to {n}, you get {k} guesses, and guess tells you higher, "
    "lower or correct.",
    "Secret number, range 1-{n}, {k} tries. Call guess; it answers higher, lower or correct.",
    "Work out my number: it is between 1 and {n}. guess reports higher, lower or correct, and you have {k} guesses.",
)


def make_game(budget: int):
    """The environment class for a budget of ``budget`` guesses (TRL's ``environment_factory``)."""

    class GuessingGame:
        """A secret number; ``guess`` answers higher / lower / correct; the reward is finding it in budget."""

        def reset(self, secret, **row):
            self.secret, self.guesses, self.found = int(secret), [], False
            return None

        def guess(self, number: int) -> str:
            """Guess the secret number.

            Args:
                number: the number you guess
            """
            if self.found:
                return "already found"
            if len(self.guesses) >= budget:
                return "no guesses left"
            try:
                number = int(number)
            except (TypeError, ValueError):
                return "not a number"
            self.guesses.append(number)
            if number == self.secret:
                self.found = True
                return "correct"
            return "higher" if self.secret > number else "lower"

        def get_reward(self) -> float:
            return 1.0 if self.found else 0.0

    return GuessingGame


@lru_cache(maxsize=None)
def random_consistent_success(n: int, k: int) -> float:
    """P(find a uniform secret among ``n`` candidates within ``k`` guesses) for the demonstrator,
    which guesses uniformly among the candidates consistent with the feedback so far."""
    if n == 0:
        return 1.0
    if k == 0:
        return 0.0
    return sum(1 + g * random_consistent_success(g, k - 1) + (n - g - 1) * random_consistent_success(n - g - 1, k - 1)
               for g in range(n)) / n / n


def scripted_player(n: int, budget: int, seed: int):
    """The demonstrator: a uniformly random guess among the numbers the feedback leaves, then
    ``The number is X.`` once it hears ``correct`` (or ``I ran out of guesses.``)."""
    rng = random.Random(seed)

    def respond(text: str) -> str:
        conversation = text.rsplit("<|im_start|>user", 1)[-1]  # the question and the game so far
        guesses = [int(g) for g in re.findall(r'"number": (-?\d+)', conversation)]
        feedback = re.findall(r"<\|im_start\|>tool\n([^<]*)<\|im_end\|>", conversation)
        low, high = 1, n
        for g, answer in zip(guesses, feedback):
            if answer == "correct":
                return f"The number is {g}."
            if answer == "higher":
                low = max(low, g + 1)
            elif answer == "lower":
                high = min(high, g - 1)
        if len(feedback) >= budget or low > high:
            return "I ran out of guesses."
        return f'<tool_call>{{"name": "guess", "arguments": {{"number": {rng.randint(low, high)}}}}}</tool_call>'

    return respond


def problems(n: int, budget: int, phrasings, secrets):
    from datasets import Dataset

    rows = [(p, s) for p in phrasings for s in secrets]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p.format(n=n, k=budget)}] for p, _ in rows],
                              "secret": [s for _, s in rows]})


def sampled_problems(n: int, budget: int, count: int, seed: int, repeat: int = 1):
    """``count`` training problems (train phrasings, uniform secrets), each row ``repeat`` times in a row."""
    from datasets import Dataset

    rng = random.Random(seed)
    picks = [(rng.choice(TRAIN_PHRASINGS), rng.randint(1, n)) for _ in range(count)]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p.format(n=n, k=budget)}] for p, _ in picks],
                              "secret": [s for _, s in picks]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=15, help="secrets are 1..n")
    parser.add_argument("--budget", type=int, default=4, help="guesses allowed (max_tool_calling_iterations)")
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--warmup-lr", type=float, default=5e-5)
    parser.add_argument("--steps", type=int, default=40, help="GRPO steps, and the control's extra SFT steps")
    parser.add_argument("--batch", type=int, default=32, help="trajectories per step (both stages)")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-5, help="GRPO learning rate")
    parser.add_argument("--max-completion-length", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-base", action="store_true", help="skip the base evaluation (slow: it never stops early)")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    from course_lib.algos import make_config
    from course_lib.evaluation import format_accuracy, lift_interval
    from course_lib.models import load_policy
    from course_lib.rollout.warmup import ScriptedPolicy, scripted_traces, supervised_warmup
    from course_lib.tool_evaluation import evaluate_tool_accuracy
    from course_lib.trainer import Trainer

    start = time.time()
    torch.manual_seed(args.seed)
    n, budget, length = args.n, args.budget, args.max_completion_length
    Game = make_game(budget)
    model, tokenizer = load_policy(args.model, device=args.device)
    held_out = problems(n, budget, HELD_OUT_PHRASINGS, range(1, n + 1))
    options = dict(environment_factory=Game, max_completion_length=length, max_tool_calling_iterations=budget,
                   score="environment", batch_size=len(held_out))
    print(f"task: secrets 1..{n}, {budget} guesses; demonstrator's expected success "
          f"{100 * random_consistent_success(n, budget):.1f}%, binary search 100%; {len(held_out)} held-out problems",
          flush=True)

    def evaluate(name, policy, engine=None):
        t = time.time()
        result = evaluate_tool_accuracy(policy, tokenizer, held_out, engine=engine, **options)
        print(f"[{time.time() - start:6.0f} s] {name:6s} solved {format_accuracy(sum(result.correct), len(result.correct))}"
              f", {result.call_frequency:.2f} guesses/problem, {result.rounds_per_problem:.2f} rounds, "
              f"{100 * result.failure_frequency:.0f}% failed calls, stops "
              f"{ {s: result.stops.count(s) for s in sorted(set(result.stops))} }  ({time.time() - t:.0f} s)", flush=True)
        print(f"         e.g. {result.texts[0][:220]!r}", flush=True)
        return result

    def traces(count, seed):
        rows = sampled_problems(n, budget, count, seed)
        return scripted_traces(tokenizer, scripted_player(n, budget, seed), rows, environment_factory=Game,
                               max_tool_calling_iterations=budget, max_completion_length=length)

    results = {"script": evaluate("script", model, ScriptedPolicy(tokenizer, scripted_player(n, budget, 999)))}
    if not args.skip_base:
        results["base"] = evaluate("base", model)
    warm_batches = [traces(args.batch, 10_000 + s) for s in range(args.warmup_steps)]
    tokens = sum(int(r.tool_mask.sum()) for r in warm_batches)
    losses = supervised_warmup(model, warm_batches, epochs=1, learning_rate=args.warmup_lr, seed=args.seed)
    print(f"[{time.time() - start:6.0f} s] warm-up: {len(losses)} steps x {args.batch} traces ({tokens} model tokens), "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    results["warm"] = evaluate("warm", model)
    warm_state = copy.deepcopy(model.state_dict())

    sft_batches = [traces(args.batch, 20_000 + s) for s in range(args.steps)]
    sft_tokens = sum(int(r.tool_mask.sum()) for r in sft_batches)
    losses = supervised_warmup(model, sft_batches, epochs=1, learning_rate=args.warmup_lr, seed=args.seed + 1)
    print(f"[{time.time() - start:6.0f} s] control: {len(losses)} more SFT steps x {args.batch} traces "
          f"({sft_tokens} model tokens), loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    results["sft"] = evaluate("sft", model)

    model.load_state_dict(warm_state)
    # the run's folder (history, the trained model) goes when the script ends
    run_folder = tempfile.TemporaryDirectory(prefix="guess-")
    config = make_config("grpo", model_name_or_path=args.model, output_dir=run_folder.name,
                         max_steps=args.steps, learning_rate=args.lr, per_device_train_batch_size=args.batch,
                         num_generations=args.generations, temperature=1.0, beta=0.0, max_completion_length=length,
                         max_tool_calling_iterations=budget, save_steps=0, logging_steps=1, seed=args.seed)
    train = sampled_problems(n, budget, args.steps * args.batch // args.generations, seed=args.seed)
    trainer = Trainer(config, None, train, model, tokenizer, progress=False, environment_factory=Game)
    history = trainer.train()
    print("step  reward  calls/completion  frac_reward_zero_std  model tokens")
    for row in history:
        print(f"{row['step']:4d}  {row['rewards/GuessingGame/mean']:6.3f}  {row['tools/call_frequency']:16.2f}  "
              f"{row.get('frac_reward_zero_std', float('nan')):20.2f}  {row.get('num_tokens', float('nan'))}")
    results["grpo"] = evaluate("grpo", trainer.model)

    print(f"\nheld-out problems: {len(held_out)}; lifts with paired 95% intervals (percentage points):")
    for a, b in (("base", "warm"), ("warm", "sft"), ("warm", "grpo"), ("sft", "grpo"), ("script", "grpo")):
        if a not in results:
            continue
        lift, low, high = lift_interval(results[a].correct, results[b].correct)
        verdict = "excludes 0" if low > 0 or high < 0 else "includes 0"
        print(f"  {b} - {a}: {100 * lift:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]  ({verdict})")
    print(f"[{time.time() - start:6.0f} s] done")


if __name__ == "__main__":
    main()
