"""Checks for lesson 07 (the batch schedule): batch arithmetic and the micro-batch table.

Expected values are the lesson's example tables (from Unsloth's RL documentation) written
out by hand, `course_lib.schedule`'s formula helpers and `schedule_table`; typical
mistakes are reproduced to name them.
"""

from ..schedule import (
    effective_batch_size,
    generation_batch_size,
    optimizer_steps_per_generation,
    schedule_table,
    unique_prompts_per_generation,
)
from ..feedback import Hint

KEYS = ("steps_per_generation", "generation_batch_size", "effective_batch_size", "optimizer_steps_per_generation",
        "unique_prompts_per_generation")


def _expected_arithmetic(per_device, accumulation, generations, processes=1, steps=None, generation=None) -> dict:
    if generation is not None:
        steps = generation // (per_device * processes)
    steps = steps or accumulation
    batch = generation_batch_size(per_device, steps, processes)
    return {
        "steps_per_generation": steps,
        "generation_batch_size": batch,
        "effective_batch_size": effective_batch_size(per_device, accumulation, processes),
        "optimizer_steps_per_generation": optimizer_steps_per_generation(steps, accumulation),
        "unique_prompts_per_generation": unique_prompts_per_generation(batch, generations),
    }


def _arithmetic_hint(key: str, got, expected: dict, args: dict) -> str:
    per_device, accumulation = args["per_device_train_batch_size"], args["gradient_accumulation_steps"]
    processes, generations = args.get("num_processes", 1), args["num_generations"]
    steps = expected["steps_per_generation"]
    known = {
        "effective_batch_size": [
            (per_device * accumulation, "forgot num_processes: every process contributes its micro-batches."),
            (per_device * steps * processes, "that is the generation batch; the effective batch counts the "
                                             "gradient_accumulation_steps micro-batches of one optimizer step."),
        ],
        "optimizer_steps_per_generation": [
            (accumulation / steps, "inverted: it is steps_per_generation / gradient_accumulation_steps."),
        ],
        "unique_prompts_per_generation": [
            (expected["effective_batch_size"] / generations, "divided the effective batch by num_generations; the "
             "prompts of one generation cycle fill the generation batch, generation_batch_size / num_generations."),
            (expected["generation_batch_size"] * generations, "multiplied; divide the generation batch by "
                                                              "num_generations."),
        ],
        "generation_batch_size": [
            (per_device * steps, "forgot num_processes: each process generates its own slice."),
            (per_device * accumulation * processes, "used gradient_accumulation_steps; the generation batch spans "
                                                    "steps_per_generation micro-steps."),
        ],
        "steps_per_generation": [
            (accumulation, "steps_per_generation defaults to gradient_accumulation_steps only when neither it nor "
                           "generation_batch_size is given; derive it from generation_batch_size / (per_device * "
                           "num_processes)."),
        ],
    }.get(key, [])
    for wrong, message in known:
        if got == wrong and wrong != expected[key]:
            return message
    return ""


def _call_legal(fn, call: str, *args, **kwargs):
    """Call the learner's function on a configuration both libraries accept: a ValueError there is a hint."""
    try:
        return fn(*args, **kwargs)
    except ValueError as error:
        raise Hint(f"{call} is a legal configuration (TRL and course_lib accept it), but your function raised "
                   f"ValueError: {error}. Check the default: steps_per_generation=None (and no "
                   "generation_batch_size) means steps_per_generation = gradient_accumulation_steps, and a "
                   "generation batch is per_device_train_batch_size * steps_per_generation * num_processes "
                   "completions.") from None


def check_batch_arithmetic(fn) -> None:
    got = fn(3, 2, 3, steps_per_generation=4)
    if not isinstance(got, dict):
        raise Hint(f"return a dict with the keys {KEYS}, got {type(got).__name__}.")
    missing = [key for key in KEYS if key not in got]
    if missing:
        raise Hint(f"the dict lacks {missing}; it must have the keys {KEYS}.")
    cases = [
        dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3, steps_per_generation=4),
        dict(per_device_train_batch_size=6, gradient_accumulation_steps=2, num_generations=3, steps_per_generation=2),
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=8),
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=8, num_processes=2,
             steps_per_generation=1),
        dict(per_device_train_batch_size=2, gradient_accumulation_steps=3, num_generations=4, num_processes=2,
             generation_batch_size=24),
    ]
    for args in cases:
        got = _call_legal(fn, f"batch_arithmetic({', '.join(f'{k}={v}' for k, v in args.items())})", **args)
        expected = _expected_arithmetic(args["per_device_train_batch_size"], args["gradient_accumulation_steps"],
                                        args["num_generations"], args.get("num_processes", 1),
                                        args.get("steps_per_generation"), args.get("generation_batch_size"))
        for key in KEYS:
            if key not in got or abs(float(got[key]) - float(expected[key])) > 1e-9:
                diagnosis = _arithmetic_hint(key, got.get(key), expected, args)
                raise Hint(f"batch_arithmetic({', '.join(f'{k}={v}' for k, v in args.items())}): {key} should be "
                           f"{expected[key]}, got {got.get(key)}. {diagnosis}".rstrip())
    errors = [
        (dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=3,
              steps_per_generation=4, generation_batch_size=12),
         "steps_per_generation and generation_batch_size set together"),
        (dict(per_device_train_batch_size=3, gradient_accumulation_steps=2, num_generations=4),
         "num_generations=4 does not divide the generation batch of 6"),
        (dict(per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=2,
              generation_batch_size=10), "generation_batch_size=10 is not a multiple of 4"),
        (dict(per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=1),
         "num_generations=1 (a group needs 2)"),
    ]
    for args, reason in errors:
        try:
            fn(**args)
        except ValueError:
            continue
        raise Hint(f"expected a ValueError for {reason}.")


def _table(per_device, accumulation, generations, steps, cycles) -> list[tuple[list[int], bool]]:
    rows = schedule_table(per_device, accumulation, generations, steps_per_generation=steps, cycles=cycles)
    return [(row.prompts, row.optimizer_step) for row in rows]


def _schedule_hint(got, expected, per_device, accumulation, generations, steps) -> str:
    got_prompts = [list(p) for p, _ in got]
    got_flags = [bool(f) for _, f in got]
    exp_prompts = [p for p, _ in expected]
    exp_flags = [f for _, f in expected]
    if got_prompts == exp_prompts and got_flags != exp_flags:
        per_cycle = [(k % steps + 1) % accumulation == 0 for k in range(len(expected))]
        if got_flags == per_cycle:
            return ("the prompts are right but the optimizer steps are counted from the start of each cycle; "
                    "count micro-steps from the start of training (accumulation can straddle two cycles).")
        before = [k % accumulation == 0 for k in range(len(expected))]
        before_per_cycle = [(k % steps) % accumulation == 0 for k in range(len(expected))]
        if got_flags in (before, before_per_cycle):
            return ("the optimizer-step flags are one micro-step early: True at the FIRST micro-step of each "
                    "accumulation window. Count the micro-step first, then test: the update comes after the "
                    "gradient_accumulation_steps-th backward pass ((k + 1) % gradient_accumulation_steps == 0 for "
                    "micro-step k counted from 0).")
        return ("the prompts are right but the optimizer-step flags are not: True after every "
                "gradient_accumulation_steps-th micro-step.")
    if len(got) != len(expected):
        return (f"expected {len(expected)} micro-steps (steps_per_generation x cycles), got {len(got)}. "
                "steps_per_generation=None means gradient_accumulation_steps.")
    flat = [p for batch in got_prompts for p in batch]
    batch_size = per_device * steps
    unique = batch_size // generations
    cycles = len(flat) // batch_size
    generation_major = [c * unique + i % unique for c in range(cycles) for i in range(batch_size)]
    restarting = [i // generations for _ in range(cycles) for i in range(batch_size)]
    if flat == generation_major:
        return ("generation-major order ([0, 1, 2, 0, 1, 2, ...]); the layout is prompt-major: the "
                "num_generations completions of a prompt are contiguous ([0, 0, 0, 1, 1, 1, ...]).")
    if flat == restarting:
        return "the prompt numbers restart at 0 in every cycle; each cycle takes new prompts, numbered on."
    return ""


def check_micro_batches(fn) -> None:
    example_1 = [([0, 0, 0], False), ([1, 1, 1], True), ([2, 2, 2], False), ([3, 3, 3], True),
                 ([4, 4, 4], False), ([5, 5, 5], True), ([6, 6, 6], False), ([7, 7, 7], True)]
    example_4 = [([0, 0, 0, 1, 1, 1], False), ([2, 2, 2, 3, 3, 3], True),
                 ([4, 4, 4, 5, 5, 5], False), ([6, 6, 6, 7, 7, 7], True)]
    cases = [
        ("Example 1 of the lesson", (3, 2, 3, 4), example_1),
        ("Example 4 of the lesson", (6, 2, 3, 2), example_4),
        ("Example 3 of the lesson (typo corrected)", (3, 4, 4, 4), _table(3, 4, 4, 4, 2)),
        ("steps_per_generation=None", (4, 2, 4, None), _table(4, 2, 4, None, 2)),
        ("accumulation straddling two cycles", (2, 2, 2, 3), _table(2, 2, 2, 3, 2)),
        ("three cycles", (4, 3, 2, 2), _table(4, 3, 2, 2, 3)),
    ]
    for label, (per_device, accumulation, generations, steps), expected in cases:
        cycles = 3 if label == "three cycles" else 2
        got = _call_legal(fn, f"micro_batches({per_device}, {accumulation}, {generations}, {steps}, cycles={cycles})",
                          per_device, accumulation, generations, steps, cycles=cycles)
        normalized = [(list(p), bool(f)) for p, f in got]
        if normalized != expected:
            diagnosis = _schedule_hint(normalized, expected, per_device, accumulation, generations,
                                       steps or accumulation)
            raise Hint(f"{label}: micro_batches({per_device}, {accumulation}, {generations}, {steps}, "
                       f"cycles={cycles})\nexpected {expected}\ngot      {normalized}\n{diagnosis}".rstrip())
    try:
        fn(3, 2, 5, 4, cycles=1)
    except ValueError:
        return
    raise Hint("micro_batches(3, 2, 5, 4): 5 generations do not divide a generation batch of 12 completions, "
               "so a prompt's group would be split; raise ValueError.")
