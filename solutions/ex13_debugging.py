"""Lesson 13 exercises: write a run-doctor rule, and name failures from their dashboards.

`truncation_rule` reads logged metric rows (dicts with TRL's names, one per optimizer step)
and the run's config (a dict), like every rule in `course_lib/doctor/rules.py`.
`name_the_failures` is your reading of the four dashboards the notebook draws.
"""


def truncation_rule(rows: list[dict], config: dict) -> str | None:
    """Fire when too many completions hit the completion budget; say the fix.

    Args:
        rows: metric rows, oldest first. Read `completions/clipped_ratio` (the fraction of
            completions cut at `max_completion_length` before their end-of-sequence token).
            A row may lack the key, or hold `None` (a value that was not finite): skip those.
        config: the run's config as a dict; it may lack `max_completion_length`.

    Returns:
        None when fewer than 3 rows carry a value, or when the mean of the values in the
        LAST 10 rows that carry one (all of them if fewer) is at most 0.2. Otherwise a
        message that contains the mean as a percentage with no decimals (e.g. `"40%"`) and
        the fix `"max_completion_length=N"` with N twice the config's value, or the words
        `"a larger max_completion_length"` when the config does not say it.
    """
    # BEGIN SOLUTION
    # HINT: collect [r["completions/clipped_ratio"] for r in rows if it is a number], keep [-10:].
    seen = [r["completions/clipped_ratio"] for r in rows
            if isinstance(r.get("completions/clipped_ratio"), (int, float))][-10:]
    if len(seen) < 3:
        return None
    mean = sum(seen) / len(seen)
    if mean <= 0.2:
        return None
    budget = config.get("max_completion_length")
    fix = f"max_completion_length={2 * budget}" if isinstance(budget, int) else "a larger max_completion_length"
    return f"{mean:.0%} of completions are truncated. Fix: {fix}."
    # END SOLUTION


#: The failures the notebook's dashboards can show (the doctor's rule names).
FAILURES = ("completions_truncated", "zero_spread_groups", "policy_moves_too_fast", "nothing_moves",
            "dead_reward_function", "sampler_mismatch")


def name_the_failures() -> dict[str, str]:
    """Your diagnosis of the notebook's dashboards "A", "B", "C" and "D".

    Returns a dict mapping each letter to one name of `FAILURES`: the failure that
    dashboard shows. Read the curves, not the doctor's markers (the notebook hides them).
    """
    # BEGIN SOLUTION
    # HINT: which curve sits at a value no healthy run shows? clipped_ratio near 1, entropy
    # HINT: near 0, a clip fraction far above 0.2, a log-prob gap that grows...
    return {"A": "policy_moves_too_fast", "B": "completions_truncated", "C": "sampler_mismatch",
            "D": "zero_spread_groups"}
    # END SOLUTION
