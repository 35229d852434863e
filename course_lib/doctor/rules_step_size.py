"""The doctor's rules on the size of the policy's step: the learning rate and the entropy it blows up.

Registered after ``rules_hacking.py`` and before ``rules_policy.py`` (``course_lib/doctor/__init__.py``
imports them in that order, which is the report's tie order); same conventions as
``course_lib/doctor/rules.py`` (recent = the last ``WINDOW`` logged steps, start = the first
``WINDOW``). ``rules_policy.py`` reads the learning rate the way these rules state it (``_learning_rate``).
"""

from __future__ import annotations

from .core import Diagnosis, is_finite, mean, median, rule, stderr, steps_per_row, values
from .rules import WINDOW, _field


def _tenth(config: dict, name: str) -> str:
    """The current value and a tenth of it, e.g. ``learning_rate=0.003 now, try 0.0003``."""
    value = config.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return f"{_field(config, name)} now, try {value / 10:g}"
    return _field(config, name)




# ---------------------------------------------------------------------- 8, 9: step size
def _learning_rate(rows, config) -> str:
    """The learning rate as the config or, for a TRL log, the logged ``learning_rate`` says it."""
    if is_finite(config.get("learning_rate")):
        return _tenth(config, "learning_rate")
    rates = values(rows, "learning_rate")
    if rates:
        return f"learning_rate={max(rates):g} (logged peak) now, try {max(rates) / 10:g}"
    return _field(config, "learning_rate")


def _few_completions_kept(row: dict, config: dict) -> bool:
    """Whether the row's token entropy is the mean over fewer than 4 completions: with
    mask_truncated_completions=True only the finished ones are trained on and measured, and a
    row with nearly all truncated (max_completion_length=3: 97% of 32) reads one completion."""
    batch, clipped = config.get("per_device_train_batch_size"), row.get("completions/clipped_ratio")
    return bool(config.get("mask_truncated_completions")) and isinstance(batch, int) and is_finite(clipped) \
        and (1.0 - clipped) * batch < 4


def _entropy_jumps(rows, config: dict | None = None) -> list[tuple[int, float, float]]:
    """Logged steps where token entropy jumped between neighbouring logged rows (at most 10 optimizer
    steps apart) by at least 0.5 nats, half of the smaller value, and 4 times the run's own median
    row-to-row change (its batch noise): ``(step, before, after)``. Rows whose entropy is read on
    fewer than 4 completions (:func:`_few_completions_kept`) are noise and left out."""
    pairs = [(int(r["step"]), float(r["entropy"])) for r in rows if is_finite(r.get("entropy"))
             and not _few_completions_kept(r, config or {})]
    noise = median([abs(e1 - e0) for (_, e0), (_, e1) in zip(pairs, pairs[1:])])
    out = []
    for (s0, e0), (s1, e1) in zip(pairs, pairs[1:]):
        if s1 - s0 <= 10 and abs(e1 - e0) >= max(0.5, 0.5 * min(e0, e1), 4.0 * noise):
            out.append((s1, e0, e1))
    return out


def _no_gradient(row: dict, steps: int, penalty: bool) -> bool | None:
    """Whether no optimizer step a row stands for had a gradient (True), some had (False), or the
    row cannot tell (None). A row of one step: its grad_norm is 0. A row standing for several steps
    (TRL logs the last step's grad_norm and the mean of the rest): every group of every one of
    them had equal rewards (frac_reward_zero_std 1), so every advantage was 0, and no KL penalty
    (none logged: TRL logs kl only with beta != 0) pulls on the policy."""
    g, frac = row.get("grad_norm"), row.get("frac_reward_zero_std")
    if steps == 1:
        return (abs(g) < 1e-8) if is_finite(g) else None
    if is_finite(g) and abs(g) > 1e-8:
        return False
    if is_finite(frac) and not penalty:
        return frac >= 0.999
    return None


def _moves_without_gradient(rows) -> tuple[int, str] | None:
    """A stretch of logged rows with no gradient (:func:`_no_gradient`) after one with a gradient,
    at least 5 rows or 20 optimizer steps long, during which the policy kept changing: entropy
    moved by 0.5 nats (its 3-row average; on rows that each average k >= 5 steps the rows
    themselves, by 0.5 / sqrt(k) nats, at least 0.15: the mean of k batches has sqrt(k) times
    less noise), or the mean length (its 3-row average) by half. Only Adam's momentum, scaled by
    the learning rate, moves weights with no gradient."""
    penalty = any(is_finite(r.get("kl")) and r["kl"] > 0 for r in rows)
    counts = steps_per_row(rows)
    stretch, seen_grad = [], False
    for r, k in list(zip(rows, counts)) + [({"grad_norm": 1.0}, 1)]:
        still = _no_gradient(r, k, penalty)
        if still and seen_grad:
            stretch.append((r, k))
            continue
        span = sum(k for _, k in stretch)
        if len(stretch) >= 5 or (stretch and span >= 20):
            width = min(k for _, k in stretch)
            averaged = width >= 5  # rows that each average 5+ steps: read as they are, with their lower noise
            entropy_move = max(0.15, 0.5 / width ** 0.5) if averaged else 0.5
            for key, enough in (("entropy", lambda a, b: abs(b - a) >= entropy_move),
                                ("completions/mean_length", lambda a, b: max(a, b) >= 1.5 * max(min(a, b), 1e-9))):
                xs = values([row for row, _ in stretch], key)
                smooth = (xs if averaged and key == "entropy" else
                          [mean(xs[i:i + 3]) for i in range(max(len(xs) - 2, 0))])
                if smooth and enough(min(smooth), max(smooth)):
                    return int(stretch[0][0]["step"]), key
        stretch = []
        seen_grad = seen_grad or still is False
    return None


def _clips_at_one(config: dict) -> bool:
    """Whether the run clips its gradient norm at 1 or below (``max_grad_norm``). A log without a
    config (TRL's ``trainer_state.json``) was clipped at transformers' default, 1.0, unless its
    user changed it: the rules read it so, and their fixes do not advise it again."""
    clip = config.get("max_grad_norm", 1.0 if not config else None)
    return isinstance(clip, (int, float)) and 0 < clip <= 1.0


def _falls_silent(rows) -> int | None:
    """The step from which the run had no gradient to the end (:func:`_no_gradient`, at least 5 rows
    or 20 optimizer steps) after a row with one, or None."""
    penalty = any(is_finite(r.get("kl")) and r["kl"] > 0 for r in rows)
    counts = steps_per_row(rows)
    tail = 0
    while tail < len(rows) and _no_gradient(rows[-1 - tail], counts[-1 - tail], penalty):
        tail += 1
    if tail == len(rows) or tail == 0 or not (tail >= 5 or sum(counts[len(rows) - tail:]) >= 20):
        return None
    if not any(_no_gradient(r, k, penalty) is False for r, k in zip(rows[:-tail], counts[:-tail])):
        return None
    return int(rows[len(rows) - tail]["step"])


def _peak_learning_rate(rows, config: dict) -> float | None:
    rate = config.get("learning_rate")
    if is_finite(rate):
        return float(rate)
    rates = values(rows, "learning_rate")
    return max(rates) if rates else None


def _clip_advice(config: dict) -> str:
    """``max_grad_norm=1.0 (now ...), `` for a fix list, or nothing when the run already clips at 1."""
    return "" if _clips_at_one(config) else f"max_grad_norm=1.0 (now {_field(config, 'max_grad_norm')}), "


def _grad_spikes(rows) -> list[tuple[int, float]]:
    """Logged steps whose grad_norm is over 10 times the run's median non-zero grad_norm (and over
    1, as max_grad_norm=1.0 clips there): ``(step, grad_norm)``."""
    grads = [(int(r["step"]), float(r["grad_norm"])) for r in rows if is_finite(r.get("grad_norm"))]
    typical = median([g for _, g in grads if g > 1e-8])
    if not grads or typical != typical:
        return []
    return [(s, g) for s, g in grads if g > 10 * typical and g > 1.0]


@rule("learning_rate_too_high", "error", ("entropy", "grad_norm", "completions/mean_length", "reward", "learning_rate"),
      {"entropy_jump": (0.5, "nats per token between neighbouring logged rows, at least half the smaller "
                             "value and 4x the run's median row-to-row change: batch noise of token entropy is "
                             "a few hundredths on the tiny model's 32 completions of 4-6 tokens, but 2-token "
                             "completions swing 0.3-0.9 from batch to batch at a healthy rate (museum run "
                             "short_budget), hence the run's own noise; learning_rate=1e-2 moved it 0.8 -> 1.5 "
                             "-> 2.8 in two steps and 4.4 -> 0.3 in one (museum runs learning_rate_300x, "
                             "course_lr1e-2_beta0)"),
       "jump_noise": (4.0, "times the run's median row-to-row entropy change"),
       "still_rows": (5, "logged rows with grad_norm 0 after a non-zero one while entropy or length keep "
                         "moving: with no gradient only Adam's momentum moves the weights, by about the "
                         "learning rate a step, so a visible move means the rate is large (museum run "
                         "course_lr3e-3_spike: length 4.2 -> 6, entropy 0.7 -> 1.6 over 16 zero-gradient "
                         "steps). On a log whose rows each average several steps, a row has no gradient when "
                         "every group of its steps had equal rewards and no KL is logged, and 20 optimizer "
                         "steps suffice (logging_steps=10: entropy 1.51 -> 1.13 over steps 20-60 of "
                         "learning_rate=1e-2 with every group alike)"),
       "grad_spike": (10.0, "times the run's median non-zero grad_norm, and above 1; evidence alone only without "
                            "clipping at max_grad_norm <= 1 (a healthy RLOO preset run, clipped, spiked to 73.6 "
                            "once and learned; a TRL log, with no config, is read as clipped at transformers' "
                            "default 1.0: a healthy TRL RLOO run spiked to 151 once)"),
       "silent_rate": (1e-3, "a learning rate this high (a full fine-tune learns at 1e-5 to 1e-4) is named without a "
                             "visible jump only when the run then fell silent (no gradient for 5 rows or 20 steps, "
                             "to the end) and its reward fell by half: TRL at 3e-3 logged every 5 steps truncated "
                             "every completion from its second row on")}, stage="optimizer")
def learning_rate_too_high(rows, config):
    """The policy jumps: entropy leaps between logged steps, keeps moving with no gradient, or the
    gradient spikes. Read without a KL (beta=0 logs none) and whatever the logging interval."""
    evidence, shown = {}, []
    jumps = _entropy_jumps(rows, config)
    if jumps:
        step, before, after = jumps[0]
        evidence["entropy_jump"] = jumps[0]
        shown.append(f"token entropy jumped {before:.2f} -> {after:.2f} nats at step {step}"
                     + (f" ({len(jumps)} such jumps)" if len(jumps) > 1 else ""))
    still = _moves_without_gradient(rows)
    if still:
        evidence["moves_without_gradient"] = still
        shown.append(f"from step {still[0]} grad_norm is 0 yet {still[1]} kept changing (only the optimizer's "
                     "momentum, times the learning rate, moves the weights there)")
    reward = values(rows, "reward")
    fell = len(reward) >= 6 and max(reward[:3]) > 0 and mean(reward[-3:]) < 0.5 * mean(reward[:3])
    clipped = _clips_at_one(config)
    spikes = _grad_spikes(rows)
    # Under clipping at 1 a spike's update is bounded: alone it is no evidence (a healthy RLOO preset run
    # spiked to 73.6 once and learned); beside a jump, a stall that still moves, or a falling reward it is.
    if spikes and (shown or fell or not clipped):
        evidence["grad_spikes"] = spikes[:5]
        shown.append(f"grad_norm spiked to {spikes[0][1]:.3g} at step {spikes[0][0]}")
    # A rate of 1e-3 or more (10-100x where a full fine-tune learns) and a run that then fell silent with
    # its reward: the blow-up can be over within the first logging interval (logging_steps=5 at 3e-3:
    # every completion truncated from the second row), so no row shows it happen.
    rate, silent = _peak_learning_rate(rows, config), _falls_silent(rows)
    if not shown and rate is not None and rate >= 1e-3 and silent is not None and fell:
        evidence["silent_from"] = silent
        shown.append(f"at learning_rate={rate:g} every group has had equal rewards and no gradient from step "
                     f"{silent} to the end")
    if not shown:
        return None
    if fell:
        shown.append(f"the reward fell from {mean(reward[:3]):.3f} to {mean(reward[-3:]):.3f}")
    return Diagnosis(
        f"the learning rate is too high: {'; '.join(shown)}. Each update moves the policy far enough to change "
        f"what it samples, and the other findings (dead rewards, equal groups, truncation) are most likely its "
        f"consequences. Fix: a learning rate 10x lower ({_learning_rate(rows, config)}), {_clip_advice(config)}warmup "
        "(warmup_steps), then resume from a checkpoint before the jump. A small model's full fine-tune learns at "
        "1e-5 to 1e-4 (the tiny model at 3e-5); LoRA takes about 10x more.", evidence)


@rule("entropy_explosion", "error", ("entropy",),
      {"ratio": (2.0, "entropy doubling during RL fine-tuning means the policy is spreading mass over "
                      "tokens it never used: gibberish, not exploration"),
       "rise": (0.5, "nats per token; guards a tiny starting entropy from doubling by noise"),
       "reward_rise": (2.0, "standard errors of the batch reward: when the reward rose this clearly while "
                            "entropy exploded, the policy spreads its mass because a reward pays for it (a "
                            "reward paid per character: any token earns), and the reward rules name that "
                            "cause; a step too large wrecks the reward instead (learning_rate=1e-2: the reward "
                            "falls to 0)")}, stage="optimizer")
def entropy_explosion(rows, config):
    """Token entropy grew far beyond its start while the reward did not rise: the model drifts into
    gibberish."""
    entropy = values(rows, "entropy")
    if len(entropy) < WINDOW + 3:
        return None
    # The start is the first 3 steps: a large learning rate blows entropy up within a few steps
    # (museum run learning_rate_300x: 0.83, 0.78, 1.47, 2.78, 3.26, ... 4.4 nats).
    start, now = mean(entropy[:3]), mean(entropy[-WINDOW:])
    reward = values(rows, "reward")
    first, last = reward[:WINDOW], reward[-WINDOW:]
    noise = (stderr(first) ** 2 + stderr(last) ** 2) ** 0.5
    paid = len(reward) >= 2 * WINDOW and mean(last) - mean(first) > max(2.0 * noise, 0.0)
    if now > 2.0 * start and now - start > 0.5 and not paid:
        return Diagnosis(
            f"token entropy exploded from {start:.3f} to {now:.3f} nats: updates are too large and the policy is "
            f"turning into noise. Fixes: a learning rate 10x lower ({_tenth(config, 'learning_rate')}), "
            f"{_clip_advice(config)}fewer num_iterations; resume from a checkpoint before the rise.",
            {"entropy_start": start, "entropy_now": now})
    return None
