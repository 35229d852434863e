"""The doctor's rules on how the policy moves: hacking, entropy, step size, sampler, time, NaN.

Continues ``course_lib/doctor/rules.py`` (same conventions: recent = the last ``WINDOW``
logged steps, start = the first ``WINDOW``).
"""

from __future__ import annotations

from .core import Diagnosis, first_key, is_finite, mean, median, pearson, rule, stderr, steps_of, values
from .rules import APPROX_KL_KEYS, CLIP_KEYS, HELD_OUT_KEYS, WINDOW, _field, _recent, _start


def _tenth(config: dict, name: str) -> str:
    """The current value and a tenth of it, e.g. ``learning_rate=0.003 now, try 0.0003``."""
    value = config.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return f"{_field(config, name)} now, try {value / 10:g}"
    return _field(config, name)


# ---------------------------------------------------------------------- 6: reward hacking
@rule("reward_hacking", "warning", ("reward", "eval/greedy_accuracy", "eval/reward", "completions/mean_length"),
      {"train_rise": (0.1, "a rise of 0.1 in mean reward is well beyond batch noise (a 0/1 reward on "
                           "32 completions has a standard error near 0.08 per batch; averaged over 10 "
                           "steps, 0.03)"),
       "held_out_rise": (0.02, "below two points held-out accuracy is 'flat': within the noise of a "
                               "200-problem evaluation"),
       "length_correlation": (0.8, "reward and length moving together this closely over a run is a "
                                   "length-paying reward, not a coincidence"),
       "length_growth": (1.5, "completions 50% longer than at the start")})
def reward_hacking(rows, config):
    """Training reward rises while held-out quality is flat or falls, or reward tracks length."""
    reward = values(rows, "reward")
    if len(reward) < 2 * WINDOW:
        return None
    rise = mean(reward[-WINDOW:]) - mean(reward[:WINDOW])
    held_key = first_key(rows, HELD_OUT_KEYS)
    held = values(rows, held_key) if held_key else []
    if held_key and len(held) >= 2 and rise > 0.1 and held[-1] - held[0] < 0.02:
        return Diagnosis(
            f"training reward rose by {rise:+.2f} while held-out {held_key} went {held[0]:.3f} -> {held[-1]:.3f}: "
            "the policy is learning what the reward pays for, not the task. Read samples of the completions "
            "(log_completions=True); tighten the reward so only correct answers score (a verifier, not a "
            "proxy); lesson 11's sorting study shows a model paid for copying its input.",
            {"reward_rise": rise, "held_out_first": held[0], "held_out_last": held[-1]})
    length = values(rows, "completions/mean_length")
    if len(length) == len(reward) and mean(length[:WINDOW]) > 0:
        growth = mean(length[-WINDOW:]) / mean(length[:WINDOW])
        corr = pearson(reward, length)
        if rise > 0.1 and growth > 1.5 and corr > 0.8:
            return Diagnosis(
                f"reward rose by {rise:+.2f} together with completion length (x{growth:.1f}, correlation "
                f"{corr:.2f}): the reward may be paying for length. Check each reward function on a long wrong "
                "answer; prefer a loss_type without length bias (dr_grpo or dapo) and cap length in the reward; "
                "lesson 11's sorting study shows a hacked reward, lesson 06 the length bias.",
                {"reward_rise": rise, "length_growth": growth, "correlation": corr})
    return None


# ---------------------------------------------------------------------- 7: entropy
@rule("entropy_collapse", "warning", ("entropy",),
      {"ratio": (0.25, "a policy that kept a quarter of its starting entropy samples nearly the same "
                       "completion in every group (groups then stop differing: zero_spread_groups)"),
       "floor": (0.1, "nats per token from the start: the tiny model samples at 0.6-0.8 at temperature "
                      "1.0 and at 0.04-0.11 at temperature 0.05 (measured, museum runs healthy_grpo and "
                      "near_greedy)")})
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
    if now < 0.25 * start:
        return Diagnosis(
            f"token entropy collapsed from {start:.3f} to {now:.3f} nats: the policy stopped exploring. Fixes: a "
            f"lower learning rate ({_field(config, 'learning_rate')}, try a third of it), DAPO's clip-higher "
            "epsilon_high=0.28, an entropy bonus (entropy_coef=0.001) or beta>0 to stay near the reference "
            "(lesson 06).", {"entropy_start": start, "entropy_now": now})
    return None


@rule("entropy_explosion", "error", ("entropy",),
      {"ratio": (2.0, "entropy doubling during RL fine-tuning means the policy is spreading mass over "
                      "tokens it never used: gibberish, not exploration"),
       "rise": (0.5, "nats per token; guards a tiny starting entropy from doubling by noise")})
def entropy_explosion(rows, config):
    """Token entropy grew far beyond its start: the model drifts into gibberish."""
    entropy = values(rows, "entropy")
    if len(entropy) < WINDOW + 3:
        return None
    # The start is the first 3 steps: a large learning rate blows entropy up within a few steps
    # (museum run learning_rate_300x: 0.83, 0.78, 1.47, 2.78, 3.26, ... 4.4 nats).
    start, now = mean(entropy[:3]), mean(entropy[-WINDOW:])
    if now > 2.0 * start and now - start > 0.5:
        clip = config.get("max_grad_norm")
        clip = ("" if isinstance(clip, (int, float)) and 0 < clip <= 1.0 else
                f"max_grad_norm=1.0 (now {_field(config, 'max_grad_norm')}), ")
        return Diagnosis(
            f"token entropy exploded from {start:.3f} to {now:.3f} nats: updates are too large and the policy is "
            f"turning into noise. Fixes: a learning rate 10x lower ({_tenth(config, 'learning_rate')}), "
            f"{clip}fewer num_iterations; resume from a checkpoint before the rise.",
            {"entropy_start": start, "entropy_now": now})
    return None


# ---------------------------------------------------------------------- 8, 9: step size
@rule("policy_moves_too_fast", "error", ("clip_ratio/region_mean", "policy/clipfrac_avg", "policy/approxkl_avg",
                                         "kl"),
      {"clip_fraction": (0.2, "PPO implementations treat 0.1-0.2 of clipped tokens as the upper end of "
                              "healthy; above it most of the update is thrown away by the clip"),
       "approx_kl": (0.05, "per-token KL between the sampling and the updated policy; PPO's usual "
                           "early-stopping targets are 0.01-0.05"),
       "kl_rise": (0.5, "nats per token of KL to the reference (the logged kl, beta>0) above its first "
                        "logged value (0 before the first update): at 0.5 the sampled tokens are on "
                        "average e^0.5 = 1.6x likelier than under the reference, and the penalty meant to "
                        "hold the policy near it has lost. Measured on the tiny model with beta=0.04: the "
                        "GRPO preset stays at 0.003-0.09 per step over 60 steps (PPO on it: up to 0.29), "
                        "learning_rate=3e-3 jumps to 1-7 within two steps")})
def policy_moves_too_fast(rows, config):
    """Clip fraction, the per-step KL or the KL to the reference is high: the policy moves too far."""
    clip_key, kl_key = first_key(rows, CLIP_KEYS), first_key(rows, APPROX_KL_KEYS)
    clip = mean(_recent(rows, clip_key)) if clip_key else float("nan")
    kl = mean(_recent(rows, kl_key)) if kl_key else float("nan")
    # KL to the reference: only a run with a penalty (beta>0; unknown for a TRL log, which logs
    # kl only when beta != 0) is meant to stay near it.
    ref_kl, beta = values(rows, "kl"), config.get("beta")
    kl_start = ref_kl[0] if ref_kl else float("nan")
    kl_now = mean(ref_kl[-WINDOW:]) if len(ref_kl) >= 3 and (beta is None or beta > 0) else float("nan")
    if not (clip > 0.2 or kl > 0.05 or kl_now - kl_start > 0.5):
        return None
    shown = ", ".join(f"{k}={v:.3f}" for k, v in ((clip_key, clip), (kl_key, kl)) if k and v == v)
    if kl_now - kl_start > 0.5:
        shown = ", ".join(filter(None, [shown, f"KL to the reference {kl_start:.3f} -> {kl_now:.3f} nats per token "
                                               f"with {_field(config, 'beta', 'beta>0')}"]))
        penalty = "or a 10x larger beta (a stronger pull towards the reference)"
    else:
        penalty = "or beta>0"
    passes = ("" if config.get("num_iterations") == 1 else
              f"fewer passes over each batch ({_field(config, 'num_iterations')} -> 1), ")
    return Diagnosis(
        f"each update moves the policy too far ({shown}). Fixes: learning rate 10x lower "
        f"({_tenth(config, 'learning_rate')}), {passes}fewer micro-steps per generation (steps_per_generation), "
        f"{penalty} (lesson 03).",
        {"clip_fraction": clip, "approx_kl": kl, "kl_start": kl_start, "kl_now": kl_now})


@rule("nothing_moves", "warning", ("reward", "entropy", "learning_rate", "clip_ratio/region_mean", "kl"),
      {"steps": (30, "fewer logged steps cannot tell a slow run from a still one"),
       "total_lr": (1e-4, "Adam moves each weight by at most about the learning rate per step (Kingma & "
                          "Ba, 2015, sec. 2.1), so the sum of the learning rates bounds how far any weight "
                          "went; 1e-4 is under 1% of a typical weight (~1e-2). The tiny model's preset "
                          "(3e-5) passes it in 4 steps; 1e-9 never does (museum run frozen)"),
       "noise": (2.0, "reward and entropy changes within two standard errors of the batch noise are flat")})
def nothing_moves(rows, config):
    """The learning rate is too small to move the weights, and reward and entropy stay put."""
    reward, entropy = values(rows, "reward"), values(rows, "entropy")
    if len(reward) < 30:
        return None
    rates = values(rows, "learning_rate")
    total_lr = sum(rates) if len(rates) == len(rows) else config.get("learning_rate", float("inf")) * len(rows)
    if not total_lr < 1e-4:
        return None
    third = len(reward) // 3

    def flat(xs):
        first, last = xs[:third], xs[-third:]
        return abs(mean(last) - mean(first)) <= 2.0 * (stderr(first) ** 2 + stderr(last) ** 2) ** 0.5

    clip_key = first_key(rows, CLIP_KEYS)
    still = (flat(reward) and (len(entropy) < 30 or flat(entropy)) and max(values(rows, "kl") or [0.0]) < 1e-4
             and (clip_key is None or max(values(rows, clip_key)) == 0.0))
    if not still:
        return None
    lr = median(rates) if rates else config.get("learning_rate", float("nan"))
    lora = " If use_lora=True, check that the adapters train (lora_target_modules, lora_r)." if config.get(
        "use_lora") else ""
    return Diagnosis(
        f"after {len(reward)} steps at learning rate {lr:.2g} the weights can have moved by at most about "
        f"{total_lr:.1e} each, and reward ({mean(reward[:third]):.3f} -> {mean(reward[-third:]):.3f}) and entropy "
        "are flat: the policy is not changing. Fix: raise learning_rate 10-100x (TRL's 1e-6 suits "
        f"billion-parameter models; the tiny model learns at 3e-5).{lora}",
        {"total_learning_rate": total_lr, "learning_rate": lr})


# ---------------------------------------------------------------------- 10: sampler vs trainer
@rule("sampler_mismatch", "warning", ("sampling/sampling_logp_difference/mean",
                                      "sampling/importance_sampling_ratio/min",
                                      "sampling/importance_sampling_ratio/max"),
      {"logp_difference": (0.1, "mean |log p_trainer - log p_sampler| per token; bf16 against fp32 stays "
                                "a few hundredths, 0.1 means one token in ten differs by 10% in probability"),
       "jump": (10.0, "a tenfold jump over the run's median after an update means the sampler kept stale "
                      "weights"),
       "ratio_low": (0.5, "importance ratio (trainer / sampler probability) of half: the band [0.5, 2] is "
                          "TIS's usual cap of 2 and its mirror"),
       "ratio_high": (2.0, "a token or completion twice as likely under the trainer as under the sampler"),
       "ratio_share": (0.8, "of the last 10 logged steps (at least 5) with the ratio's min or max outside "
                            "[0.5, 2] while the first logged step's were inside: at the first step both hold "
                            "the same weights, so a range that leaves the band later and stays out is a "
                            "sampler that stopped following the updates, or a correction masking part of "
                            "every batch. A range outside from the first step is a dtype or kernel gap "
                            "(measured: the tiny model scoring its own samples in bf16 against fp32, before "
                            "any update, gives token ratios from 0.2 to 195 in batches of 32 64-token "
                            "completions), read by logp_difference instead")})
def sampler_mismatch(rows, config):
    """The sampler's log-probs disagree with the trainer's: wrong weights, dtype or settings."""
    key = "sampling/sampling_logp_difference/mean"
    diff = values(rows, key)
    ratio_share, ranges = _ratio_outside_share(rows)
    if len(diff) < 3 and ratio_share is None:
        return None
    now, typical = (mean(diff[-3:]), median(diff)) if len(diff) >= 3 else (float("nan"), float("nan"))
    jumped = [s for s, d in zip(steps_of(rows, key), diff) if d > 10.0 * max(typical, 1e-4) and d > 0.05]
    ratio_out = ratio_share is not None and ratio_share >= 0.8
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
        f"sampler and trainer disagree: {gap}. Causes: the engine did not "
        "receive the new weights, a lower-precision sampler "
        f"({_field(config, 'vllm_dtype')} vs {_field(config, 'dtype')}), or different sampling settings "
        "(temperature, top_p) in engine and trainer. Fixes: the same dtype on both sides, "
        "vllm_importance_sampling_correction=True (truncated importance sampling), lesson 10.",
        {"logp_difference": now, "median": typical, "jump_steps": jumped[:5], "ratio_outside_share": ratio_share})


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
                       "shared-prefill engine)")})
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
      {})
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
