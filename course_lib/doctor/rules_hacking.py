"""The doctor's rules on what a reward teaches: reward hacking and the entropy's collapse.

Registered before ``rules_policy.py`` (``course_lib/doctor/__init__.py`` imports them in that
order: the registry's order breaks ties in the report). Same conventions as
``course_lib/doctor/rules.py``: recent = the last ``WINDOW`` logged steps, start = the first.
"""

from __future__ import annotations

from .core import Diagnosis, first_key, is_finite, mean, pearson, rule, values
from .rules import HELD_OUT_KEYS, WINDOW, _field, _reward_names, looks_binary


# ---------------------------------------------------------------------- 6: reward hacking
@rule("reward_hacking", "warning", ("reward", "eval/greedy_accuracy", "eval/reward", "completions/mean_length"),
      {"train_rise": (0.1, "a rise of 0.1 in mean reward is well beyond batch noise (a 0/1 reward on "
                           "32 completions has a standard error near 0.08 per batch; averaged over 10 "
                           "steps, 0.03)"),
       "held_out_rise": (0.02, "below two points held-out accuracy is 'flat': within the noise of a "
                               "200-problem evaluation. Read as the mean of the last third of at least 3 "
                               "evaluations against the first third's, never one evaluation against another "
                               "(a 50-problem evaluation swings 0.42 to 0.58 between evaluations of one run)"),
       "evaluations": (3, "held-out evaluations before their trend is read"),
       "length_correlation": (0.8, "reward and length moving together this closely over a run is a "
                                   "length-paying reward, not a coincidence"),
       "length_growth": (1.5, "completions 50% longer than at the start"),
       "sharpening": (0.0, "a training reward that is a 0/1 success rate, sampled, rising while it stays at or "
                           "below the held-out greedy accuracy, is the policy concentrating on its greedy answer "
                           "(sampled accuracy climbs toward greedy accuracy, which need not move): no hacking. "
                           "Lesson 09's honest run: sampled reward 0.15 -> 0.25 under greedy accuracy 0.42-0.58"),
       "pays_length": (0.9, "a reward function (or, with none logged apart, the total reward) whose batch means "
                            "track the mean completion length this closely, and that is no 0/1 success rate, pays "
                            "for length. Reward and length rising together is also what a healthy reasoning run "
                            "looks like (R1-Zero: longer answers, more of them right), so a 0/1 correctness "
                            "reward rising with length is not reported")}, stage="rewards")
def reward_hacking(rows, config):
    """Training reward rises while held-out quality is flat or falls, or reward tracks length."""
    reward = values(rows, "reward")
    if len(reward) < 2 * WINDOW:
        return None
    rise = mean(reward[-WINDOW:]) - mean(reward[:WINDOW])
    held_key = first_key(rows, HELD_OUT_KEYS)
    held = values(rows, held_key) if held_key else []
    third = len(held) // 3
    held_first, held_last = (mean(held[:third]), mean(held[-third:])) if third else (float("nan"),) * 2
    # A sampled 0/1 success rate still at or below the greedy held-out accuracy rises by sharpening.
    sharpening = (held_key == "eval/greedy_accuracy" and all(0.0 <= x <= 1.0 for x in reward)
                  and mean(reward[-WINDOW:]) <= held_last)
    if len(held) >= 3 and rise > 0.1 and held_last - held_first < 0.02 and not sharpening:
        return Diagnosis(
            f"training reward rose by {rise:+.2f} while held-out {held_key} went {held_first:.3f} -> "
            f"{held_last:.3f} (the first and last third of {len(held)} evaluations): "
            "the policy is learning what the reward pays for, not the task. Read samples of the completions "
            "(log_completions=True); tighten the reward so only correct answers score (a verifier, not a "
            "proxy); lesson 11's sorting study shows a model paid for copying its input.",
            {"reward_rise": rise, "held_out_first": held_first, "held_out_last": held_last})
    length = values(rows, "completions/mean_length")
    if len(length) == len(reward) and mean(length[:WINDOW]) > 0:
        growth = mean(length[-WINDOW:]) / mean(length[:WINDOW])
        corr = pearson(reward, length)
        payer = _length_payer(rows)
        if rise > 0.1 and growth > 1.5 and corr > 0.8 and payer:
            name, payer_corr = payer
            return Diagnosis(
                f"reward rose by {rise:+.2f} together with completion length (x{growth:.1f}, correlation "
                f"{corr:.2f}), and {name} tracks length itself (correlation {payer_corr:.2f}) without being a 0/1 "
                "success: the reward pays for length. Check that function on a long wrong answer; cap length in "
                "the reward or remove it; prefer a loss_type without length bias (dr_grpo or dapo); lesson 11's "
                "sorting study shows a hacked reward, lesson 06 the length bias. (A 0/1 correctness reward "
                "rising with length is what a healthy reasoning run looks like, and is not reported.)",
                {"reward_rise": rise, "length_growth": growth, "correlation": corr, "length_payer": name})
    return None


def _length_payer(rows) -> tuple[str, float] | None:
    """The reward function (or, with none logged apart, the total reward) whose batch means track
    completion length (correlation above 0.9) and are no 0/1 success rate: ``(name, correlation)``."""
    names = _reward_names(rows)
    candidates = [(n, f"rewards/{n}/mean", f"rewards/{n}/std") for n in names] or [("the total reward", "reward",
                                                                                  "reward_std")]
    for name, key, std_key in candidates:
        paired = [(float(r[key]), float(r["completions/mean_length"]), r.get(std_key)) for r in rows
                  if is_finite(r.get(key)) and is_finite(r.get("completions/mean_length"))]
        if len(paired) < 2 * WINDOW:
            continue
        xs, ys, sds = zip(*paired)
        corr = pearson(list(xs), list(ys))
        rate = all(is_finite(sd) for sd in sds) and looks_binary(list(xs), [float(sd) for sd in sds])
        total_in_unit = not names and all(0.0 <= x <= 1.0 for x in xs)  # no per-function log: assume a rate
        if corr > 0.9 and not rate and not total_in_unit:
            return name, corr
    return None


# ---------------------------------------------------------------------- 7: entropy
@rule("entropy_collapse", "warning", ("entropy",),
      {"ratio": (0.25, "a policy that kept a quarter of its starting entropy samples nearly the same "
                       "completion in every group (groups then stop differing: zero_spread_groups)"),
       "floor": (0.1, "nats per token from the start: the tiny model samples at 0.6-0.8 at temperature "
                      "1.0 and at 0.04-0.11 at temperature 0.05 (measured, museum runs healthy_grpo and "
                      "near_greedy)"),
       "reward_rise": (0.1, "entropy falling after the reward rose by this much is a policy that learned "
                            "the task and samples its answer with confidence, not a collapse (the demo: "
                            "0.55 -> 0.12 nats once the format and the sums were learned)")}, stage="sampling")
def entropy_collapse(rows, config):
    """Token entropy fell to a fraction of its start, or sampling is near-deterministic from the start."""
    entropy = values(rows, "entropy")
    if len(entropy) < 2 * WINDOW:
        return None
    start, now = mean(entropy[:WINDOW]), mean(entropy[-WINDOW:])
    if now < 0.1 and start < 0.1:
        temperature = config.get("temperature")
        if temperature is None:
            cause = "the sampling temperature is low, or the model is near-deterministic on this data. Fix: " \
                    "temperature=1.0, or harder data."
        elif temperature < 0.7:
            cause = f"the sampling temperature is low (temperature={temperature!r}). Fix: temperature=1.0."
        else:
            cause = "the model is already near-deterministic on this data. Fix: a higher temperature or harder data."
        return Diagnosis(
            f"token entropy is {now:.3f} nats from the start: sampling is almost greedy, so the completions of a "
            f"group are alike and carry no signal; {cause}", {"entropy_start": start, "entropy_now": now})
    reward = values(rows, "reward")
    learned = len(reward) >= 2 * WINDOW and mean(reward[-WINDOW:]) - mean(reward[:WINDOW]) > 0.1
    if now < 0.25 * start and not learned:
        return Diagnosis(
            f"token entropy collapsed from {start:.3f} to {now:.3f} nats: the policy stopped exploring. Fixes: a "
            f"lower learning rate ({_field(config, 'learning_rate')}, try a third of it), DAPO's clip-higher "
            "epsilon_high=0.28, an entropy bonus (entropy_coef=0.001) or beta>0 to stay near the reference "
            "(lesson 06).", {"entropy_start": start, "entropy_now": now})
    return None
