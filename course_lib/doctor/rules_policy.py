"""The doctor's rules on how the policy moves: clipping, the KL penalty, a policy that does not move,
the sampler, time, NaN, the reward's sign.

Continues ``course_lib/doctor/rules_step_size.py`` (same conventions: recent = the last ``WINDOW``
logged steps, start = the first ``WINDOW``).
"""

from __future__ import annotations

from .core import Diagnosis, first_key, is_finite, mean, median, rule, stderr, steps_of, steps_per_row, values
from .rules import APPROX_KL_KEYS, CLIP_KEYS, WINDOW, _field, _recent, _reward_names, looks_binary, rows_are_averages


from .rules_step_size import _learning_rate


@rule("policy_moves_too_fast", "error", ("clip_ratio/region_mean", "policy/clipfrac_avg", "policy/approxkl_avg",
                                         "kl"),
      {"clip_fraction": (0.2, "PPO implementations treat 0.1-0.2 of clipped tokens as the upper end of "
                              "healthy; above it most of the update is thrown away by the clip"),
       "approx_kl": (0.05, "per-token KL between the sampling and the updated policy; PPO's usual "
                           "early-stopping targets are 0.01-0.05"),
       "kl_rise": (0.5, "nats per token of KL to the reference (the logged kl, beta>0) gained within "
                        "kl_steps optimizer steps. A jump, not cumulative drift: a healthy long run may "
                        "drift to 0.5 over thousands of steps. Measured on the tiny model with beta=0.04: "
                        "the GRPO preset stays at 0.003-0.09 per step over 60 steps (PPO on it: up to 0.29), "
                        "learning_rate=3e-3 jumps to 1-7 within two steps"),
       "kl_steps": (20, "optimizer steps over which the KL rise is measured"),
       "small_epsilon": (0.05, "a clip range below this clips almost every token whose ratio moved at all "
                               "once num_iterations > 1: the clip, not the step, is what is wrong")},
      stage="optimizer")
def policy_moves_too_fast(rows, config):
    """Clip fraction, the per-step KL or a fast rise of the KL to the reference: the policy moves too far."""
    clip_key, kl_key = first_key(rows, CLIP_KEYS), first_key(rows, APPROX_KL_KEYS)
    clip = mean(_recent(rows, clip_key)) if clip_key else float("nan")
    kl = mean(_recent(rows, kl_key)) if kl_key else float("nan")
    # KL to the reference: only a run with a penalty (beta>0; unknown for a TRL log, which logs
    # kl only when beta != 0) is meant to stay near it; only a fast rise is a step-size problem.
    beta = config.get("beta")
    ref = [(int(r["step"]), float(r["kl"])) for r in rows if is_finite(r.get("kl"))]
    kl_jump, kl_from, kl_to = 0.0, float("nan"), float("nan")
    if len(ref) >= 3 and (beta is None or beta > 0):
        for i, (s1, k1) in enumerate(ref):
            for s0, k0 in ref[max(0, i - 20):i]:
                if s1 - s0 <= 20 and k1 - k0 > kl_jump:
                    kl_jump, kl_from, kl_to = k1 - k0, k0, k1
        # the start of a run counts from 0 (the policy is the reference before the first update)
        if ref[0][0] <= 20 and ref[0][1] > kl_jump:
            kl_jump, kl_from, kl_to = ref[0][1], 0.0, ref[0][1]
    if not (clip > 0.2 or kl > 0.05 or kl_jump > 0.5):
        return None
    shown = ", ".join(f"{k}={v:.3f}" for k, v in ((clip_key, clip), (kl_key, kl)) if k and v == v)
    if kl_jump > 0.5:
        shown = ", ".join(filter(None, [shown, f"KL to the reference {kl_from:.3f} -> {kl_to:.3f} nats per token "
                                               f"within 20 steps with {_field(config, 'beta', 'beta>0')}"]))
        penalty = "or a 10x larger beta (a stronger pull towards the reference)"
    else:
        penalty = "or beta>0"
    epsilon = config.get("epsilon")
    if clip > 0.2 and is_finite(epsilon) and epsilon < 0.05:
        return Diagnosis(
            f"the clip range is too tight ({shown} with epsilon={epsilon!r}): once num_iterations > 1 "
            f"({_field(config, 'num_iterations')}), every token whose probability moved at all is outside "
            "[1 - epsilon, 1 + epsilon] and its gradient is dropped, so the later passes learn nothing. Fix: "
            "epsilon=0.2 (TRL's default; DAPO's epsilon_high=0.28), or num_iterations=1.",
            {"clip_fraction": clip, "epsilon": epsilon})
    tight = ("" if is_finite(epsilon) else
             " If epsilon is below its default 0.2 (0 clips every token that moved), widen it first.")
    passes = ("" if config.get("num_iterations") == 1 else
              f"fewer passes over each batch ({_field(config, 'num_iterations')} -> 1), ")
    return Diagnosis(
        f"each update moves the policy too far ({shown}). Fixes: learning rate 10x lower "
        f"({_learning_rate(rows, config)}), {passes}fewer micro-steps per generation (steps_per_generation), "
        f"{penalty} (lesson 03).{tight}",
        {"clip_fraction": clip, "approx_kl": kl, "kl_jump": kl_jump})


@rule("kl_penalty_dominates", "warning", ("kl", "loss", "reward"),
      {"beta": (1.0, "a KL coefficient of 1 or more: a z-scored advantage is O(1) per token, so a penalty "
                     "weighted 1+ outweighs the reward once the policy has moved a few hundredths of a nat "
                     "(usual values: 0 to 0.1; TRL's default 0, DeepSeekMath 0.04)"),
       "flat": (2.0, "a reward change within two standard errors of its batch noise is flat")},
      stage="optimizer")
def kl_penalty_dominates(rows, config):
    """beta is so large that the KL penalty, not the reward, decides the update: the reward stays put.

    The coefficient comes from the config, or for a TRL log from loss / kl: on the first pass
    over a batch the policy term's mean is about 0 (group advantages sum to 0), so the logged
    loss is about beta x kl (rows with kl above 0.01, where round-off of the policy term is
    small next to it; each must give at least 1, and at least two rows)."""
    reward, kl = values(rows, "reward"), values(rows, "kl")
    if len(kl) < 2:
        return None
    beta = config.get("beta")
    source = f"beta={beta!r}"
    if not is_finite(beta):
        ratios = [float(r["loss"]) / float(r["kl"]) for r in rows
                  if is_finite(r.get("loss")) and is_finite(r.get("kl")) and r["kl"] > 1e-2]
        if len(ratios) < 2 or min(ratios) < 1.0:
            return None
        beta, source = median(ratios), f"beta about {median(ratios):.2g} (the logged loss / kl)"
    if beta < 1.0:
        return None
    if len(reward) >= 2 * WINDOW:
        third = len(reward) // 3
        first, last = reward[:third], reward[-third:]
        if mean(last) - mean(first) > 2.0 * (stderr(first) ** 2 + stderr(last) ** 2) ** 0.5:
            return None  # the reward still rises: the penalty slows it, it does not stop it
        trend = f"the reward is flat ({mean(first):.3f} -> {mean(last):.3f})"
    else:
        trend = f"{len(reward)} logged rows are too few to read the reward's trend (it reads {reward[-1]:.3f} now)"
    return Diagnosis(
        f"the KL penalty outweighs the reward: {source}; {trend}, and the KL to the reference is "
        f"{mean(kl[-WINDOW:]):.3g} nats per token: any move away from the reference costs more than a better answer "
        "earns. Fix: beta=0.04 or less (0 is TRL's default; DeepSeekMath used 0.04).",
        {"beta": beta, "kl": mean(kl[-WINDOW:])})


@rule("nothing_moves", "warning", ("reward", "entropy", "learning_rate", "clip_ratio/region_mean", "kl"),
      {"steps": (30, "optimizer steps (read from the logged step, not counted in rows: TRL logs every "
                     "logging_steps=10 by default), fewer cannot tell a slow run from a still one"),
       "rows": (9, "logged rows: three per third of the run, to compare the first third with the last"),
       "total_lr": (1e-4, "the summed learning rate over the optimizer steps. Adam moves each weight by at "
                          "most about the learning rate per step (Kingma & Ba, 2015, sec. 2.1), but the "
                          "policy is not bounded by that: 30 steps at 1e-6 (sum 3e-5) on SmolLM2-135M moved "
                          "target log-probs by 6-8 nats. So the sum is only the premise for the advice, and "
                          "the rule fires on what the run shows: reward, entropy, clip and KL all flat. The "
                          "tiny model's preset (3e-5) passes the sum in 4 steps; 1e-9 never does (museum "
                          "run frozen)"),
       "noise": (2.0, "reward and entropy changes within two standard errors of the batch noise are flat")},
      stage="optimizer")
def nothing_moves(rows, config):
    """A small learning rate, and reward, entropy, clip and KL all flat: the policy is not changing."""
    reward, entropy = values(rows, "reward"), values(rows, "entropy")
    steps = int(rows[-1]["step"]) if rows else 0
    if len(reward) < 9 or steps < 30:
        return None
    rates = [(float(r["learning_rate"]), n) for r, n in zip(rows, steps_per_row(rows))
             if is_finite(r.get("learning_rate"))]
    if len(rates) == len(rows):
        total_lr = sum(rate * n for rate, n in rates)  # each row stands for its step difference
    else:
        total_lr = config.get("learning_rate", float("inf")) * steps
    if not total_lr < 1e-4:
        return None
    third = len(reward) // 3

    def flat(xs):
        first, last = xs[:third], xs[-third:]
        return abs(mean(last) - mean(first)) <= 2.0 * (stderr(first) ** 2 + stderr(last) ** 2) ** 0.5

    clip_key = first_key(rows, CLIP_KEYS)
    still = (flat(reward) and (len(entropy) < 9 or flat(entropy)) and max(values(rows, "kl") or [0.0]) < 1e-4
             and (clip_key is None or max(values(rows, clip_key)) == 0.0))
    if not still:
        return None
    lr = median([r for r, _ in rates]) if rates else config.get("learning_rate", float("nan"))
    lora = " If use_lora=True, check that the adapters train (lora_target_modules, lora_r)." if config.get(
        "use_lora") else ""
    read = ", ".join(name for name, there in (("reward", True), ("entropy", len(entropy) >= 9),
                                              ("clip fraction", clip_key), ("KL", values(rows, "kl"))) if there)
    missing = [name for name, there in (("entropy", len(entropy) >= 9), ("clip fraction", clip_key),
                                        ("KL, as beta=0 logs none", values(rows, "kl"))) if not there]
    unread = f" (not logged, so not read: {'; '.join(missing)})" if missing else ""
    return Diagnosis(
        f"after {steps} optimizer steps ({len(reward)} logged rows) at learning rate {lr:.2g} (summed {total_lr:.1e}), "
        f"{read} are all flat (reward {mean(reward[:third]):.3f} -> {mean(reward[-third:]):.3f}){unread}: "
        "the policy is not changing measurably. Fix: raise learning_rate 3-10x and watch the reward's trend "
        "(TRL's 1e-6 suits billion-parameter models; the tiny model learns at 3e-5, SmolLM2-135M with LoRA at "
        f"1e-4); or give it more steps if the reward is expected to move slowly.{lora}",
        {"total_learning_rate": total_lr, "learning_rate": lr, "optimizer_steps": steps})


# ---------------------------------------------------------------------- 10: sampler vs trainer
@rule("sampler_mismatch", "warning", ("sampling/token_ratio_outside_band", "sampling/sampling_logp_difference/mean",
                                      "sampling/importance_sampling_ratio/min",
                                      "sampling/importance_sampling_ratio/max"),
      {"outside_share": (0.05, "share of completion tokens whose trainer/sampler probability ratio leaves "
                               "[0.5, 2] (sampling/token_ratio_outside_band, logged by this trainer; TRL 1.16 "
                               "logs no such share), over the last 3 logged steps; where it is logged it "
                               "decides. Measured on the tiny model: its own samples scored in bfloat16 against "
                               "float32 put 0-0.4% of tokens outside (32 completions of 8 or 64 tokens, 3 batches "
                               "each), a sampler that never receives the updated weights 15-47% (museum run "
                               "stale_sampler, every step after the first)"),
       "logp_difference": (0.1, "mean |log p_trainer - log p_sampler| per token, read where the share outside "
                                "the band is not logged (a TRL log); bf16 against fp32 stays "
                                "a few hundredths, 0.1 means one token in ten differs by 10% in probability"),
       "jump": (10.0, "a tenfold jump over the run's median after an update means the sampler kept stale "
                      "weights"),
       "ratio_low": (0.5, "importance ratio (trainer / sampler probability) of half: the band [0.5, 2] is "
                          "TIS's usual cap of 2 and its mirror"),
       "ratio_high": (2.0, "a token or completion twice as likely under the trainer as under the sampler"),
       "ratio_share": (0.8, "read only when the mean log-prob gap is not logged: "
                            "of the last 10 logged steps (at least 5) with the ratio's min or max outside "
                            "[0.5, 2] while the first logged step's were inside: at the first step both hold "
                            "the same weights, so a range that leaves the band later and stays out is a "
                            "sampler that stopped following the updates, or a correction masking part of "
                            "every batch. A range outside from the first step is a dtype or kernel gap "
                            "(measured: the tiny model scoring its own samples in bf16 against fp32, before "
                            "any update, gives token ratios from 0.2 to 195 in batches of 32 64-token "
                            "completions), read by logp_difference instead")}, stage="sampling")
def sampler_mismatch(rows, config):
    """The sampler's log-probs disagree with the trainer's: wrong weights, dtype or settings."""
    key = "sampling/sampling_logp_difference/mean"
    diff = values(rows, key)
    outside = values(rows, "sampling/token_ratio_outside_band")
    if len(outside) >= 3:  # the share of tokens outside the band decides where it is logged
        share = mean(outside[-3:])
        if share <= 0.05:
            return None
        gap = f"{share:.0%} of completion tokens have a trainer/sampler probability ratio outside [0.5, 2]"
        if len(diff) >= 3:
            gap += f" (mean per-token log-prob gap {mean(diff[-3:]):.3f})"
        return Diagnosis(_sampler_message(gap, config), {"outside_share": share, "logp_difference":
                                                          mean(diff[-3:]) if len(diff) >= 3 else None})
    ratio_share, ranges = _ratio_outside_share(rows)
    if len(diff) < 3 and ratio_share is None:
        return None
    now, typical = (mean(diff[-3:]), median(diff)) if len(diff) >= 3 else (float("nan"), float("nan"))
    jumped = [s for s, d in zip(steps_of(rows, key), diff) if d > 10.0 * max(typical, 1e-4) and d > 0.05]
    # The batch's extreme ratio is one token of thousands: a bfloat16 sampler puts some tokens
    # outside [0.5, 2] at every step while the mean gap stays at a few hundredths (the demo:
    # 0.015). Where the mean gap is logged it decides; the extremes speak only without it.
    ratio_out = ratio_share is not None and ratio_share >= 0.8 and len(diff) < 3
    if not (now > 0.1 or jumped or ratio_out):
        return None
    where = f" (a jump at step {jumped[0]})" if jumped else ""
    gap = f"mean per-token log-prob gap {now:.3f}{where}" if now == now else ""
    if ratio_out:
        low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
        gap = "; ".join(filter(None, [gap, f"importance ratio outside [0.5, 2] in {ratio_share:.0%} of the last "
                                           f"{len(ranges)} steps (min {low:.3g}, max {high:.3g}), inside at the "
                                           "first step"]))
    return Diagnosis(
        _sampler_message(gap, config),
        {"logp_difference": now, "median": typical, "jump_steps": jumped[:5], "ratio_outside_share": ratio_share})


def _sampler_message(gap: str, config: dict) -> str:
    """The sampler rule's message: what disagrees (``gap``), the causes and the fixes."""
    if config.get("vllm_importance_sampling_correction"):
        mode = config.get("vllm_importance_sampling_mode", "sequence_mask")
        correction = (f"the correction is already on (vllm_importance_sampling_correction=True, mode {mode!r}): it "
                      "reweights the disagreement, it cannot fix stale weights")
    else:
        correction = ("vllm_importance_sampling_correction=True (its default mode, 'sequence_mask', drops "
                      "completions whose ratio leaves the bounds)")
    return (f"sampler and trainer disagree: {gap}. Causes: the engine did not "
            "receive the new weights, a lower-precision sampler "
            f"({_field(config, 'vllm_dtype')} vs {_field(config, 'dtype')}), or different sampling settings "
            f"(temperature, top_p) in engine and trainer. Fixes: the same dtype on both sides; {correction}; "
            "lesson 10.")


def _ratio_outside_share(rows) -> tuple[float | None, list[tuple[float, float]]]:
    """The share of the last ``WINDOW`` steps whose importance ratio's (min, max) left [0.5, 2],
    and those ranges; ``None`` with fewer than 5 such steps or a first step already outside."""
    lo, hi = "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max"
    ranges = [(float(r[lo]), float(r[hi])) for r in rows if is_finite(r.get(lo)) and is_finite(r.get(hi))]
    if len(ranges) < 5 or not 0.5 <= ranges[0][0] <= ranges[0][1] <= 2.0:
        return None, []
    recent = ranges[-WINDOW:]
    return sum(1 for low, high in recent if low < 0.5 or high > 2.0) / len(recent), recent


# ---------------------------------------------------------------------- 11: time
@rule("generation_dominates", "info", ("timing/generation_s", "timing/step_s"),
      {"share": (0.5, "past half of a step, generation is the larger cost to cut and training tricks gain "
                       "less (the tiny model's 80-token museum run measured 0.54-0.59 of each step with the "
                       "shared-prefill engine)")}, stage="budget")
def generation_dominates(rows, config):
    """Generation takes most of each step's time."""
    gen, step = _recent(rows, "timing/generation_s"), _recent(rows, "timing/step_s")
    if len(gen) < 3 or len(step) < 3 or sum(step) <= 0:
        return None
    share = sum(gen) / sum(step)
    if share <= 0.5:
        return None
    if config.get("engine", "hf") == "hf":
        advice = ("engine='vllm' (on SmolLM2-135M, benchmarks/rollout.py measured vLLM's rollouts 1.5x faster "
                  "than HF generate in float32 and 3.8x with a bfloat16 sampler on a CPU with native bfloat16; "
                  "a whole step gains less, as the update does not speed up: README 'vLLM on a CPU', lesson 10)")
    else:
        advice = "a shorter max_completion_length or fewer num_generations"
    return Diagnosis(f"generation takes {share:.0%} of each step. Fix: {advice}.", {"generation_share": share})


# ---------------------------------------------------------------------- 12: non-finite values
@rule("non_finite_values", "error", ("loss", "grad_norm", "reward", "entropy", "kl"),
      {}, stage="optimizer")
def non_finite_values(rows, config):
    """A loss, gradient, reward, entropy or KL that is NaN or infinite (logged as null)."""
    for r in rows:
        bad = [k for k in ("loss", "grad_norm", "reward", "entropy", "kl") if k in r and not is_finite(r[k])]
        if bad == ["reward"]:  # the update itself is finite: no sample of the batch was scored
            return Diagnosis(
                f"reward not finite at step {r['step']} while the loss and gradient are: no completion of that "
                "batch was scored (every reward function returned None or NaN for each, so each got advantage "
                "0; an UnscorableSampleWarning shows the first). Fix: make at least one reward function return "
                "a number for each completion.", {"step": r["step"], "keys": bad})
        if bad:
            return Diagnosis(
                f"{', '.join(bad)} not finite at step {r['step']}. Fixes: a lower learning rate "
                f"({_field(config, 'learning_rate')}), max_grad_norm=1.0, rewards that never return inf or NaN, "
                "float32 instead of bf16/fp16; resume from the last checkpoint.", {"step": r["step"], "keys": bad})
    return None


# ---------------------------------------------------------------------- 13: the reward's sign
@rule("wrong_sign_reward", "warning", ("rewards/<name>/mean", "rewards/<name>/std"),
      {"rows": (2 * WINDOW, "logged rows before a trend is read"),
       "named_rows": (3, "logged rows enough for a function named for correctness whose values are only 0 and "
                         "-1: no trend is needed, its values alone say its sign is flipped (a TRL log at "
                         "logging_steps=10 has 3 rows after 30 steps)"),
       "rise": (0.1, "a rise toward 0 of a 0/-1 reward: the policy learns to avoid what it pays -1 for")})
def wrong_sign_reward(rows, config):
    """A 0/-1 reward the policy learns to avoid, or a correctness reward that is never above 0:
    the sign is flipped, and the run learns to be wrong."""
    averaged = rows_are_averages(rows)
    for name in _reward_names(rows):
        means, stds = values(rows, f"rewards/{name}/mean"), values(rows, f"rewards/{name}/std")
        correctness = any(word in name.lower() for word in ("correct", "accura", "answer", "solve"))
        if (len(means) < (3 if correctness else 2 * WINDOW) or len(stds) != len(means) or max(means) > 0
                or min(means) >= 0):
            continue
        negated = looks_binary([-m for m in means], stds, averaged)  # -reward looks 0/1: values 0 and -1
        head, tail = means[:WINDOW], means[-WINDOW:]
        rise = mean(tail) - mean(head) if len(means) >= 2 * WINDOW else 0.0
        if negated and (correctness or rise > 0.1):
            return Diagnosis(
                f"{name} returns only 0 and -1 (batch means {mean(head):.3f} -> {mean(tail):.3f}"
                f"{', rising toward 0' if rise > 0.1 else ''}): the policy is learning to avoid what it scores -1"
                + (", and for a correctness reward that is the right answers" if correctness else "") +
                ". If it is meant to pay for correct answers, its sign is flipped. Fix: return 1 for a right answer "
                "and 0 otherwise (or give it a positive reward_weight); a deliberate penalty is fine if the "
                "completions it hits are the bad ones.", {"reward": name, "rise": rise})
    return None


# ---------------------------------------------------------------------- 14: what a sparse log cannot show
#: Rules that read a trend, and the logged rows each needs before it reads one.
ROWS_NEEDED = {"reward_hacking": 2 * WINDOW, "entropy_collapse": 2 * WINDOW, "wrong_sign_reward": 2 * WINDOW,
               "kl_penalty_dominates": 2 * WINDOW, "entropy_explosion": WINDOW + 3, "nothing_moves": 9}


@rule("too_few_rows", "info", ("step",),
      {"rows": (2 * WINDOW, "the most rows a rule needs (ROWS_NEEDED: a trend compares the first 10 logged "
                            "steps with the last 10); said only when each row stands for several optimizer "
                            "steps (TRL's logging_steps, 10 by default), where a short run never gets there")},
      stage="normal", passing=True)
def too_few_rows(rows, config):
    """The log has too few rows for the rules that read a trend: they are silent, not satisfied."""
    if len(rows) >= 2 * WINDOW or not rows_are_averages(rows):
        return None
    waiting = {name: need for name, need in ROWS_NEEDED.items() if len(rows) < need}
    interval = int(median(steps_per_row(rows)))
    listing = ", ".join(f"{name} ({need} rows, step {need * interval} at this interval)"
                        for name, need in sorted(waiting.items(), key=lambda item: item[1]))
    return Diagnosis(
        f"{len(rows)} logged rows, one every {interval} optimizer steps: these rules read a trend and have too few "
        f"rows to read it, so their silence says nothing yet: {listing}. Fix: logging_steps=1 (TRL's default is "
        "10): the doctor then reads every step.", {"rows": len(rows), "interval": interval,
                                                   "waiting": sorted(waiting)})
