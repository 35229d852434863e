"""The doctor's rules: one small function per failure of an RL run, with its fix.

Every rule reads the metric rows (TRL's names, so a TRL ``log_history`` works too) and the
run's config, and returns a :class:`~course_lib.doctor.core.Diagnosis` (cause and fix) or
``None``. Thresholds sit next to the reason they have that value. "Recent" means the last
``WINDOW`` logged steps; "start" the first ``WINDOW``. Lesson 13 walks through each rule on a
run made to fail that way (``course_lib.museum``).
"""

from __future__ import annotations

import math

from .core import (Diagnosis, first_key, is_finite, mean, median, pearson, rule, stderr, steps_per_row, values)

#: Logged steps averaged for "recent" and "start": one noisy batch must not fire a rule.
WINDOW = 10
CLIP_KEYS = ("clip_ratio/region_mean", "policy/clipfrac_avg")
APPROX_KL_KEYS = ("policy/approxkl_avg",)
HELD_OUT_KEYS = ("eval/greedy_accuracy", "eval/reward")


def _recent(rows, key, n=WINDOW):
    return values(rows[-n:], key)


def _start(rows, key, n=WINDOW):
    return values(rows, key)[:n]


def _field(config: dict, name: str, fallback: str = "its current value") -> str:
    return f"{name}={config[name]!r}" if name in config else f"{name} ({fallback})"


# ---------------------------------------------------------------------- 1, 2: the loss
@rule("loss_near_zero_is_normal", "info", ("loss", "grad_norm"),
      {"loss_abs": (1e-3, "group advantages sum to 0, so an on-policy GRPO loss is 0 up to length "
                          "weighting; a z-scored advantage is O(1), so 1e-3 is 'zero'"),
       "grad_norm": (1e-6, "below this the update is nothing (see no_learning_signal)")}, stage="normal")
def loss_near_zero_is_normal(rows, config):
    """A loss near 0 with a non-zero gradient: normal for GRPO, not a failure."""
    loss, grad = _recent(rows, "loss"), _recent(rows, "grad_norm")
    if len(loss) < 3 or len(grad) < 3:
        return None
    if median([abs(x) for x in loss]) < 1e-3 and median(grad) > 1e-6:
        return Diagnosis(
            "the loss is about 0 but the gradient is not: this is normal. On the first pass over each batch the "
            "ratio is 1 (with num_iterations=1, on every step), so the loss is minus the mean advantage, and "
            "group advantages sum to 0; its gradient, "
            "the advantage-weighted sum of grad log pi, is not 0. Read reward and grad_norm, not the loss "
            "(lesson 05).", {"median_abs_loss": median([abs(x) for x in loss]), "median_grad_norm": median(grad)})
    return None


@rule("no_learning_signal", "error", ("loss", "grad_norm", "frac_reward_zero_std", "completions/clipped_ratio"),
      {"zero": (1e-8, "float32 round-off of a real gradient is far above this"),
       "rows": (3, "three steps in a row: one all-zero batch can happen by chance")}, stage="symptom")
def no_learning_signal(rows, config):
    """Loss and gradient both 0: the update does nothing, and the likely reason."""
    recent = rows[-3:]
    if len(recent) < 3 or not all(is_finite(r.get("grad_norm")) and abs(r["grad_norm"]) < 1e-8
                                  and is_finite(r.get("loss")) and abs(r["loss"]) < 1e-8 for r in recent):
        return None
    zero_std = mean(values(recent, "frac_reward_zero_std"))
    clipped = mean(values(recent, "completions/clipped_ratio"))
    if not values(recent, "reward"):  # NaN totals are logged as missing
        why = ("no sample was scored: every reward function returned None (or NaN) for every completion, so "
               "the rewards are NaN and every advantage is 0 (an UnscorableSampleWarning shows the first such "
               "sample). Fix: make at least one reward function return a number for each completion.")
    elif zero_std > 0.999:
        why = (f"every group's rewards are equal (frac_reward_zero_std={zero_std:.2f}), so every advantage is 0 "
               "(dead_reward_function names a function that returns one value for everything; zero_spread_groups "
               "says why the groups are alike).")
    elif clipped > 0.999 and config.get("mask_truncated_completions"):
        why = ("every completion is truncated and mask_truncated_completions=True masks them all. Fix: raise "
               f"{_field(config, 'max_completion_length')} or set mask_truncated_completions=False.")
    else:
        why = ("no trainable parameter gets a gradient. Fix: check that the model's parameters (or the LoRA "
               f"adapters: {_field(config, 'lora_target_modules')}) have requires_grad=True.")
    return Diagnosis("loss and grad_norm are 0: the optimizer step changes nothing. Cause: " + why,
                     {"frac_reward_zero_std": zero_std, "clipped_ratio": clipped})


# ---------------------------------------------------------------------- 3, 4, 5: the batch and the rewards
def _generations_for(p: float, target: float = 0.25, limit: int = 64) -> int | None:
    """Smallest G with p**G + (1-p)**G <= target: a 0/1 reward with success rate p."""
    for g in range(2, limit + 1):
        if p ** g + (1 - p) ** g <= target:
            return g
    return None


def looks_binary(means: list[float], stds: list[float], averaged: bool = False) -> bool:
    """Whether batch means and standard deviations are those of a 0/1 reward.

    A 0/1 reward with batch mean p has batch standard deviation sqrt(p(1-p)) (up to the n/(n-1)
    of a sample std: at most 1.07 for 8 completions); a constant 0.5 (std 0), a length score
    (values above 1) or a shaped reward (std well below sqrt(p(1-p))) does not.

    ``averaged``: each row is the mean of several steps' values (TRL logs the mean of the
    steps since the last log, ``logging_steps=10`` by default). The mean of the batch
    standard deviations sqrt(p_i(1-p_i)) is then below sqrt(p(1-p)) of the mean rate p (the
    square root is concave: batches at p_i = 0 or 1 add 0), so only half of it is required;
    the upper bound still holds. A constant 0.5 (std 0) and a score above 1 still fail."""
    if len(means) < 3 or len(stds) != len(means) or not all(0.0 <= m <= 1.0 for m in means):
        return False
    low = 0.5 if averaged else 0.85
    return all(low * math.sqrt(m * (1 - m)) - 1e-9 <= sd <= 1.1 * math.sqrt(m * (1 - m)) + 1e-9
               for m, sd in zip(means, stds))


def rows_are_averages(rows) -> bool:
    """Whether the logged rows stand for several optimizer steps each (median step difference
    above 1): TRL's ``logging_steps`` logs the mean of each metric since the last log."""
    return median(steps_per_row(rows)) > 1


def groups_read(rows) -> int:
    """A lower bound on the groups behind the ``frac_reward_zero_std`` values of ``rows``: the
    run's groups per row, read as the largest over the rows of the smallest k (up to 1024) for
    which the share times k is a whole number (a share of 0.25 comes from at least 4 groups,
    0.95 from at least 20; shares of 0 or 1 say nothing of it), times the rows."""
    shares = values(rows, "frac_reward_zero_std")
    per_row = max((next((k for k in range(1, 1025) if abs(share * k - round(share * k)) < 1e-6 * k), 1024)
                   for share in shares), default=1)
    return per_row * len(shares)


def binary_reward(rows) -> float | None:
    """The recent mean success rate p when the run's one reward function looks 0/1, else None
    (several functions sum to no success rate; a TRL log names its functions too)."""
    names = _reward_names(rows)
    if len(names) != 1:
        return None
    means, stds = _recent(rows, f"rewards/{names[0]}/mean"), _recent(rows, f"rewards/{names[0]}/std")
    return mean(means) if looks_binary(means, stds, rows_are_averages(rows)) else None


@rule("zero_spread_groups", "warning", ("frac_reward_zero_std", "reward", "rewards/<name>/std"),
      {"fraction": (0.5, "above half, most of each batch has advantage 0: the run pays for the "
                         "generations and learns from fewer than half of them"),
       "noise": (2.0, "standard errors of the share: the share read is that of the groups behind the last "
                      "10 rows (counted from the shares themselves: groups_read), and a share of 0.56 over 20 "
                      "groups (2 a step) is p^G + (1-p)^G = 39% by chance as often as not (a healthy TRL run "
                      "at p = 0.11, G = 8); it must be above half by twice sqrt(s(1-s)/groups)"),
       "excess": (0.3, "observed share of equal groups above p^G + (1-p)^G (independent 0/1 draws at "
                       "success rate p) by this much: the completions of a group are not independent draws "
                       "(low temperature, a collapsed policy), which more generations would not fix")},
      stage="data")
def zero_spread_groups(rows, config):
    """Most groups have equal rewards: no signal from them (task too hard or easy, or low diversity).

    Only where the baseline is the group's own rewards (GRPO's mean, RLOO's leave-one-out):
    PPO's advantages come from its critic, so a group of equal rewards still moves it. Only for
    a 0/1 reward does the mean reward read as a success rate p, and only there is the observed
    share compared with p^G + (1-p)^G; a reward that is constant over the whole batch is
    dead_reward_function's case, and said so here.
    """
    if config.get("algo") == "ppo":
        return None
    frac = _recent(rows, "frac_reward_zero_std")
    if len(frac) < 3 or mean(frac) <= 0.5:
        return None
    share, groups = mean(frac), groups_read(rows[-WINDOW:])
    if share - 0.5 <= 2.0 * math.sqrt(share * (1 - share) / groups):
        return None  # above half by less than its sampling noise
    names = _reward_names(rows)
    batch_std = [mean(_recent(rows, f"rewards/{n}/std")) for n in names]
    p = binary_reward(rows)
    if names and all(sd < 1e-9 for sd in batch_std) and p is None:
        return None  # every function is constant over whole batches: dead_reward_function says so
    g = config.get("num_generations")
    lr = config.get("learning_rate")
    hotter = ("" if config.get("temperature", 1.0) >= 1.0 else
              f"a higher temperature ({_field(config, 'temperature')}; 1.0 is the usual), ")
    if p is None:
        story = (" The reward is not a 0/1 success (a constant, a score or a sum of functions), so its mean says "
                 "nothing about difficulty: read what the reward functions return on one group.")
        fixes = f"{hotter}reward functions that separate better answers from worse ones, or dynamic_sampling=True"
    else:
        predicted = p ** g + (1 - p) ** g if isinstance(g, int) and g > 1 else None
        if predicted is not None and mean(frac) - predicted > 0.3:
            story = (f" At a success rate of {p:.2f} independent draws would leave p^G + (1-p)^G = {predicted:.0%} of "
                     f"groups of {g} alike, not {mean(frac):.0%}: the completions of a group are near copies of each "
                     "other (low diversity); the difficulty of the task does not explain it, and more generations would "
                     "not help.")
            fixes = (f"{hotter or 'check the entropy (a collapsed policy samples one answer), '}"
                     "or prompts split into always-solved and never-solved ones: data matched to the model")
        else:
            side = "too hard" if p < 0.5 else "too easy"
            needed = _generations_for(p) if 0.0 < p < 1.0 else None
            if p <= 0.0 or p >= 1.0:
                story = (f" The reward is {p:.0f} on every completion: the task is {side} for this model (or, with "
                         "a reward that is always 0, its parser never matches: read a few completions).")
            else:
                if needed and isinstance(g, int) and needed > g and predicted is not None:
                    story = (f" With a 0/1 reward at success rate {p:.2f}, a group of G independent completions is "
                             f"all-equal with probability p^G + (1-p)^G = {predicted:.0%} at num_generations={g}: for "
                             f"groups this small the task is {side} (25% at num_generations={needed}).")
                else:
                    story = (f" With a 0/1 reward at success rate {p:.2f} the task looks {side} for this model: a group "
                             "of G rewards is all-equal with probability p^G + (1-p)^G"
                             + (f" = {predicted:.0%} at G={g}" if predicted is not None else "")
                             + (f", which falls to 25% at num_generations={needed}" if needed and g is None else "")
                             + ".")
            fixes = (f"more generations (num_generations={needed}, now {g})" if needed and isinstance(g, int)
                     and needed > g else
                     f"data matched to the model ({'easier' if p < 0.5 else 'harder'} problems), more generations "
                     f"(now {_field(config, 'num_generations')})")
            fixes += (f", {hotter}or dynamic sampling (dynamic_sampling=True: drop the equal groups and sample more, "
                      "DAPO; its cap, max_num_gen_batches, bounds the extra generation)")
    if isinstance(lr, (int, float)) and lr <= 1e-6:  # the data may not be the only cause
        story += (f" Also, learning_rate={lr:g} is TRL's default for billion-parameter models: a small model "
                  "barely moves at it, so the share of equal groups stays where it started (the tiny model "
                  "learns at 3e-5; course_lib.presets holds each model's measured settings).")
    return Diagnosis(f"{mean(frac):.0%} of the groups have rewards that are all equal, so their advantages are 0."
                     f"{story} Fixes: {fixes}.",
                     {"frac_reward_zero_std": mean(frac), "success_rate": p})


@rule("completions_truncated", "warning", ("completions/clipped_ratio", "completions/mean_length"),
      {"ratio": (0.2, "a truncated answer is scored as if finished; when a fifth of the batch is cut "
                      "mid-answer their rewards are mostly noise")}, stage="budget")
def completions_truncated(rows, config):
    """Many completions hit max_completion_length before their end-of-sequence token."""
    clipped = _recent(rows, "completions/clipped_ratio")
    if len(clipped) < 3 or mean(clipped) <= 0.2:
        return None
    length = config.get("max_completion_length")
    if mean(clipped) > 0.95:
        cause = ("almost no completion ends: the model may never emit its end-of-sequence token (check the chat "
                 "template and the tokenizer's eos_token, or fine-tune on finished answers first), or the budget "
                 "is far too short.")
    else:
        cause = "the completion budget is too short for the answers this task needs."
    fix = f"max_completion_length={2 * length}" if isinstance(length, int) else "a larger max_completion_length"
    return Diagnosis(
        f"{mean(clipped):.0%} of completions are truncated: {cause} Fixes: {fix}; or "
        "mask_truncated_completions=True (truncated answers carry no signal, DAPO) or a soft overlong "
        "punishment (DAPO) so the model learns to finish (lesson 06).",
        {"clipped_ratio": mean(clipped), "mean_length": mean(_recent(rows, "completions/mean_length"))})


def _reward_names(rows) -> list[str]:
    names = []
    for r in rows:
        for key in r:
            if key.startswith("rewards/") and key.endswith("/std") and key[8:-4] not in names:
                names.append(key[8:-4])
    return names


@rule("dead_reward_function", "info", ("rewards/<name>/std",),
      {"rows": (5, "a live reward on a batch of 8 or more completions is constant over five batches "
                   "only by a rare accident; one that varied earlier in the run and is constant now is "
                   "saturated (learned), not dead, and is not reported. Info, not a warning: a constant "
                   "added to every completion changes no advantage and costs nothing; when it is the "
                   "only signal, no_learning_signal (an error) fires as well")})
def dead_reward_function(rows, config):
    """A reward function returns the same value for every completion."""
    dead = []
    for name in _reward_names(rows):
        std = values(rows[-5:], f"rewards/{name}/std")
        if len(std) == 5 and max(std) < 1e-9:
            # A function that told completions apart earlier and is constant now is *saturated*
            # (the model learned what it pays: a format reward at 1 on every completion), not dead.
            if max(values(rows, f"rewards/{name}/std")) > 1e-9:
                continue
            dead.append((name, values(rows[-5:], f"rewards/{name}/mean")))
    if not dead:
        return None
    # The mean of batch means is no value the function returned: name the one value, or the
    # range of batch means (constant within each batch, different between batches).
    listing = ", ".join(f"{n} (always {mean(v):g})" if not v or max(v) - min(v) < 1e-9 else
                        f"{n} (the same for every completion of a batch; batch means {min(v):g} to {max(v):g}: it "
                        "varies between prompts, never between the completions of one)" for n, v in dead)
    return Diagnosis(
        f"constant reward: {listing}. A function that gives every completion the same score adds nothing to "
        "any advantage (harmless to the update, but it teaches nothing). If it should vary: call it on a few "
        "real completions and check what it parses (a format the model never writes, a column name that does "
        "not match, an exception caught into a default). If every completion simply satisfies it (a guard the "
        "model already meets), leave it or remove it (lesson 09). A correctness reward that is 0 on everything "
        "is a task too hard for the model, or a parser that never matches.", {name: mean(value) for name, value in dead})


@rule("dominant_reward_function", "warning", ("rewards/<name>/std", "reward_weights"),
      {"share": (0.9, "when one function carries 90% of the weighted spread, the others change "
                      "advantages by less than a tenth: they are decoration. Not reported when the dominant "
                      "function is a 0/1 success (a verifier) and the others shape around it: lesson 04's and "
                      "lesson 11's correctness beside a proximity bonus carry 85-92% by design, while the "
                      "museum's raw-units distance reward carries 93% over a 0/1 correctness")}, stage="rewards")
def dominant_reward_function(rows, config):
    """One reward function carries nearly all of the weighted sum's spread."""
    names = _reward_names(rows)
    if len(names) < 2:
        return None
    weights = config.get("reward_weights") or [1.0] * len(names)
    if len(weights) != len(names):
        return None
    spreads = [abs(w) * mean(_recent(rows, f"rewards/{n}/std")) for n, w in zip(names, weights)]
    if any(math.isnan(s) for s in spreads) or sum(spreads) <= 0:
        return None
    top = max(range(len(names)), key=lambda i: spreads[i])
    share = spreads[top] / sum(spreads)
    live_others = [n for i, n in enumerate(names) if i != top and spreads[i] > 0]
    if share <= 0.9 or not live_others:
        return None
    # A 0/1 success dominating a shaping bonus is the usual design (correctness first, partial
    # credit as a tie-breaker: lessons 04 and 11); a score in its own units dominating is not.
    if looks_binary(_recent(rows, f"rewards/{names[top]}/mean"), _recent(rows, f"rewards/{names[top]}/std")):
        return None
    return Diagnosis(
        f"{names[top]} carries {share:.0%} of the weighted reward spread; "
        f"{', '.join(live_others)} {'barely moves' if len(live_others) == 1 else 'barely move'} the advantages. Fix: rebalance reward_weights (now {weights}) so each function's weight x std is "
        "comparable, or multi_objective_aggregation='normalize_then_sum' (GDPO: each reward normalised in its "
        "group before the sum).", {"share": share, "dominant": names[top]})
