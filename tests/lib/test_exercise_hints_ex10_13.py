"""The graders of lessons 10, 11 and 13 name each typical mistake (each wrong answer differs from
the reference by one mistake, written out as a learner would write it), never accept one, and
never crash on one: a learner's crash the grader can foresee becomes a hint too."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.checks import ex10, ex11, ex13
from course_lib.feedback import Hint
from course_lib.grading import load_exercise

REF10 = load_exercise("ex10_inference_memory", impl="solutions")
REF11 = load_exercise("ex11_capstone", impl="solutions")
REF13 = load_exercise("ex13_debugging", impl="solutions")


def _hint_of(check, wrong) -> str:
    with pytest.raises(Hint) as caught:
        check(wrong)
    return str(caught.value)


# ---------------------------------------------------------------- lesson 10
def logits_memory_20000_tokens(batch, seq_len, vocab, bytes_per_value=2, copies=2):
    """Reads "20K" as 20,000 tokens."""
    return copies * bytes_per_value * batch * (seq_len // 1024 * 1000) * vocab


def kv_cache_query_heads(layers, kv_dim, context, batch=1, bytes_per_value=2):
    """Takes the width as 32 query heads x 128, ignoring grouped-query attention."""
    return 2 * bytes_per_value * layers * context * (32 * 128 if kv_dim == 1024 else kv_dim) * batch


def kv_cache_20000_tokens(layers, kv_dim, context, batch=1, bytes_per_value=2):
    return 2 * bytes_per_value * layers * (context // 1024 * 1000) * kv_dim * batch


def truncated_is_weight_abs(old_logps, sampling_logps, mask, cap=2.0):
    """abs() of the log-ratio: every weight >= 1."""
    return torch.clamp(torch.exp((old_logps - sampling_logps).abs().detach() * mask), max=cap)


def correction_weight_abs(old_logps, sampling_logps, mask, mode="sequence_mask", clip_min=None, clip_max=3.0):
    """The reference with abs() of the log-ratio."""
    return REF10.correction_weight(old_logps, old_logps - (old_logps - sampling_logps).abs(), mask, mode,
                                   clip_min, clip_max)


def correction_weight_mask_fills_one(old_logps, sampling_logps, mask, mode="sequence_mask", clip_min=None,
                                     clip_max=3.0):
    """A *_mask mode that writes 1 (not 0) outside the range."""
    log_ratio = ((old_logps - sampling_logps) * mask).detach()
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=-1, keepdim=True)
    weight = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        return torch.clamp(weight, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return weight.masked_fill((weight < low) | (weight > high), 1.0)


def sampling_version_unclamped(taken_step, max_staleness, weight_sync_steps=1):
    """Forgets max(0, ...): version -1 at step 0."""
    oldest = taken_step - max_staleness
    return -(-oldest // weight_sync_steps) * weight_sync_steps


def sampling_version_off_by_one(taken_step, max_staleness, weight_sync_steps=1):
    """Treats the bound as exclusive: s - S - 1."""
    oldest = max(0, taken_step - max_staleness - 1)
    return -(-oldest // weight_sync_steps) * weight_sync_steps


# ---------------------------------------------------------------- lesson 11
def _partial(predicted, expected, same=None, denominator=None):
    if predicted == expected:
        return 1.0
    if not predicted:
        return 0.0
    same_numbers = float(sorted(predicted) == sorted(expected)) if same is None else float(same(predicted, expected))
    matches = sum(p == e for p, e in zip(predicted, expected))
    return 0.3 * same_numbers + 0.3 * matches / (denominator or (lambda p, e: max(len(p), len(e))))(predicted,
                                                                                                    expected)


def _numbers(text):
    return [int(n) for n in REF11._INTEGER.findall(text)]


def sorting_reward_reads_str(prompts=None, completions=(), answer=(), **kwargs):
    """Reads the text with str(completion): fine for strings and one-message completions."""
    return [_partial(REF11.read_numbers(c if isinstance(c, str) else str(c)), _numbers(a))
            for c, a in zip(completions, answer)]


def sorting_reward_without_kwargs(prompts=None, completions=(), answer=()):
    return REF11.sorting_reward(prompts, completions, answer)


def sorting_reward_divides_by_answer_length(prompts=None, completions=(), answer=(), **kwargs):
    return [_partial(REF11.read_numbers(REF11.completion_text(c)), _numbers(a), denominator=lambda p, e: len(p))
            for c, a in zip(completions, answer)]


def sorting_reward_compares_sets(prompts=None, completions=(), answer=(), **kwargs):
    return [_partial(REF11.read_numbers(REF11.completion_text(c)), _numbers(a), same=lambda p, e: set(p) == set(e))
            for c, a in zip(completions, answer)]


def config_warnings_with_the_old_kl_rule(config, num_train_rows, model_billions):
    """Still warns about a KL that cannot become NaN (neither TRL 1.16 nor course_lib has that failure)."""
    warnings = REF11.config_warnings(config, num_train_rows, model_billions)
    if config.mask_truncated_completions and config.beta > 0:
        warnings.add("truncation_mask_with_kl")
    return warnings


# ---------------------------------------------------------------- lesson 13
_KEY = "completions/clipped_ratio"


def _message(seen, config):
    if len(seen) < 3 or sum(seen) / len(seen) <= 0.2:
        return None
    budget = config.get("max_completion_length")
    fix = f"max_completion_length={2 * budget}" if isinstance(budget, int) else "a larger max_completion_length"
    return f"{sum(seen) / len(seen):.0%} of completions are truncated. Fix: {fix}."


def truncation_rule_last_ten_rows(rows, config):
    """Takes the last 10 rows, then keeps those that carry the value."""
    return _message([r[_KEY] for r in rows[-10:] if isinstance(r.get(_KEY), (int, float))], config)


def truncation_rule_none_as_zero(rows, config):
    return _message([r[_KEY] or 0.0 for r in rows if _KEY in r][-10:], config)


def truncation_rule_missing_as_zero(rows, config):
    return _message([r.get(_KEY) or 0.0 for r in rows][-10:], config)


def truncation_rule_indexes_every_row(rows, config):
    """r[key] on every row: a KeyError on a row without it."""
    return _message([r[_KEY] for r in rows if r[_KEY] is not None][-10:], config)


def truncation_rule_sums_none(rows, config):
    """Keeps None: sum() fails with a TypeError."""
    seen = [r[_KEY] for r in rows if _KEY in r][-10:]
    if len(seen) < 3:
        return None
    return _message(seen, config)


def names_d_as_entropy_collapse_twin():
    return {"A": "policy_moves_too_fast", "B": "completions_truncated", "C": "sampler_mismatch",
            "D": "nothing_moves"}


CASES = [
    (ex10.check_logits_memory_bytes, logits_memory_20000_tokens, "20 x 1024 = 20,480"),
    (ex10.check_kv_cache_bytes, kv_cache_query_heads, "8 KV heads"),
    (ex10.check_kv_cache_bytes, kv_cache_20000_tokens, "20 x 1024 = 20,480"),
    (ex10.check_truncated_is_weight, truncated_is_weight_abs, "without abs()"),
    (ex10.check_correction_weight, correction_weight_abs, "without abs()"),
    (ex10.check_correction_weight, correction_weight_mask_fills_one, "to 0, not 1"),
    (ex10.check_sampling_version, sampling_version_unclamped, "Clamp at 0"),
    (ex10.check_sampling_version, sampling_version_off_by_one, "The bound is inclusive"),
    (ex11.check_sorting_reward, sorting_reward_reads_str, "completion_text(completion)"),
    (ex11.check_sorting_reward, sorting_reward_without_kwargs, "**kwargs"),
    (ex11.check_sorting_reward, sorting_reward_divides_by_answer_length, "divided the matches by the answer's length"),
    (ex11.check_sorting_reward, sorting_reward_compares_sets, "Compare sorted lists"),
    (ex11.check_config_warnings, config_warnings_with_the_old_kl_rule, "Unknown codes ['truncation_mask_with_kl']"),
    (ex13.check_truncation_rule, truncation_rule_last_ten_rows, "not the last 10 rows"),
    (ex13.check_truncation_rule, truncation_rule_none_as_zero, "read as 0"),
    (ex13.check_truncation_rule, truncation_rule_missing_as_zero, "read as 0"),
    (ex13.check_truncation_rule, truncation_rule_indexes_every_row, "row.get("),
    (ex13.check_truncation_rule, truncation_rule_sums_none, "hold None"),
]


@pytest.mark.parametrize("check, wrong, words", CASES, ids=[case[1].__name__ for case in CASES])
def test_typical_mistake_gets_its_diagnosis(check, wrong, words):
    hint = _hint_of(check, wrong)
    assert words in hint, f"{wrong.__name__}: the hint does not name the mistake:\n{hint}"


def test_dashboard_d_hint_names_curves_the_dashboard_draws():
    hint = _hint_of(lambda fn: ex13.check_name_the_failures(fn, REF13.FAILURES), names_d_as_entropy_collapse_twin)
    assert "frac_reward_zero_std" in hint and "reward_std" not in hint.replace("frac_reward_zero_std", "")


@pytest.mark.parametrize("check, right", [
    (ex10.check_logits_memory_bytes, REF10.logits_memory_bytes),
    (ex10.check_kv_cache_bytes, REF10.kv_cache_bytes),
    (ex10.check_truncated_is_weight, REF10.truncated_is_weight),
    (ex10.check_correction_weight, REF10.correction_weight),
    (ex10.check_sampling_version, REF10.sampling_version),
    (ex11.check_sorting_reward, REF11.sorting_reward),
    (ex11.check_config_warnings, REF11.config_warnings),
    (ex13.check_truncation_rule, REF13.truncation_rule),
], ids=lambda v: getattr(v, "__name__", None))
def test_the_references_pass(check, right):
    check(right)
