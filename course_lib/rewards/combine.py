"""Combining reward functions: rubrics of small checks, and scoring a batch as TRL does.

``compute_rewards`` is the reward step of a GRPO / RLOO iteration. It follows TRL 1.16
(``GRPOTrainer._calculate_rewards`` and the weighted sum in
``_generate_and_score_completions``):

- every function is called once on the whole batch with keyword arguments
  ``prompts=..., completions=..., completion_ids=..., **columns``; ``async def`` functions
  are awaited concurrently (a learned reward model is a function like any other:
  :class:`course_lib.rewards.reward_model.RewardModel`);
- a returned ``None`` means "not applicable" and becomes NaN;
- the total is ``nansum_f(weight_f * reward_f)``, so NaN entries are skipped;
- a sample for which every function returned None is "unscorable": TRL warns, and
  since 1.16 its total is NaN rather than 0 (a 0 would bias the group baseline); the
  advantage step must then give it advantage 0, as TRL does with ``nan_to_num``.

Where we are stricter than TRL, on purpose:
- each call has a time limit (``timeout_s``, ``RLConfig.reward_timeout_s``): a function that
  never returns is a ``RewardFunctionError`` naming it, not a hung run; each function gets
  its own copy of the prompts, completions and columns, so one that edits them cannot
  change what the next one sees (``course_lib.rewards.calling``);
- an exception inside a reward function is re-raised as ``RewardFunctionError`` naming
  the function and the first sample that fails on its own (found by calling the
  function one sample at a time), with prompt and completion, chained to the original;
- ``inf`` / ``-inf``, and numbers beyond float32's range (``10**400``, ``1e39``: they would
  become inf in the reward tensor), are treated as NaN with a warning (TRL passes them on,
  and one infinite reward turns every advantage of its group into NaN); a weighted total
  that overflows float32 (``reward_weights=[1e308, ...]``) is NaN with a warning too;
- a value that is not a number (a string, a list) is an error naming function and sample.

What a reward function may return, exactly (anything else is a ``RewardFunctionError``
that names the function, what it returned and what is expected; nothing is coerced):

- the container: a ``list``, ``tuple`` or other iterable (a generator) of B values, or a
  1-D NumPy array or torch tensor of shape ``(B,)``. Refused: a dict or set (their
  iteration order says nothing about samples), a string, a scalar, an array or tensor
  of any other shape (``(B, 1)`` included: squeeze it yourself if that is what you meant);
- each value: ``None`` (not applicable), a Python ``int`` / ``float`` / ``bool`` (True is
  1.0), a NumPy scalar or a 0-d array / tensor. NaN means not applicable, like None;
  ``inf`` is treated as NaN with a warning (see above). Refused: strings, lists, arrays
  or tensors with a dimension (even of size 1), complex numbers.

Rubrics: Unsloth's RL guide recommends a set of small verifiable rewards over one
all-encompassing score (the e-mail example: +1 keywords, +1 recipient's name, -1 too
long, ...). ``rubric`` sums weighted checks into one reward function, and
``predicate_reward`` turns a yes/no test on the text into a check.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from .calling import (DEFAULT_REWARD_TIMEOUT_S, RewardTimeout, await_all, call_with_timeout, check_timeout,
                      private_copies)
from .extract import completion_text

__all__ = [
    "RewardFunctionError",
    "UnscorableSampleWarning",
    "RewardOverflowWarning",
    "reward_function_name",
    "predicate_reward",
    "rubric",
    "compute_rewards",
]

RewardFunction = Callable[..., Sequence[Any]]


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned something unusable; the message says where."""


class UnscorableSampleWarning(UserWarning):
    """Every reward function returned None (or NaN) for a sample."""


class RewardOverflowWarning(RuntimeWarning):
    """A reward, or a weighted total of rewards, is infinite or beyond float32's range; it counts as NaN."""


#: Largest float32: a reward or weighted total beyond it would be inf in the reward tensor.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def reward_function_name(function: Callable) -> str:
    """The name used in metrics (``rewards/<name>/mean``): ``__name__``, unwrapping
    ``functools.partial``, else the class name of a callable object (TRL's rule)."""
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(function, "__name__", type(function).__name__)


def predicate_reward(
    predicate: Callable[[str], bool], *, name: str, true_value: float = 1.0, false_value: float = 0.0
) -> RewardFunction:
    """Build a reward that scores ``true_value`` when ``predicate(text)`` holds, else ``false_value``.

    Example: ``predicate_reward(lambda t: len(t) > 500, name="too_long")``, weighted -1 in
    a rubric, is the e-mail example's "-1 if the reply is too long".
    """

    def reward(prompts=None, completions=(), **kwargs) -> list[float]:
        return [float(true_value) if predicate(completion_text(c)) else float(false_value) for c in completions]

    reward.__name__ = reward.__qualname__ = name
    return reward


def rubric(*checks: RewardFunction | tuple[float, RewardFunction], name: str = "rubric") -> RewardFunction:
    """Sum several small reward functions into one: ``sum_k weight_k * check_k``.

    Args:
        checks: reward functions (weight 1) or ``(weight, reward_function)`` pairs. Each
            check gets the same arguments as the rubric (prompts, completions, columns).
        name: the ``__name__`` shown in metrics.

    Returns:
        A reward function. Per sample, checks returning None / NaN are skipped; if all
        of them are skipped the rubric returns None for that sample.

    Unlike passing the checks to the trainer separately (which logs each one and lets
    ``reward_weights`` weigh them), a rubric is one column in the metrics.
    """
    if not checks:
        raise ValueError("rubric needs at least one check, e.g. rubric((1.0, number_reward))")
    weighted: list[tuple[float, RewardFunction]] = []
    for index, check in enumerate(checks):
        if isinstance(check, tuple) and len(check) == 2 and callable(check[1]):
            weighted.append((float(check[0]), check[1]))
        elif callable(check):
            weighted.append((1.0, check))
        else:
            raise TypeError(f"rubric check {index} must be a reward function or (weight, function), got {check!r}")

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        totals: list[float | None] = [None] * len(completions)
        for weight, check in weighted:
            values = list(check(prompts=prompts, completions=completions, **kwargs))
            if len(values) != len(completions):
                raise ValueError(
                    f"rubric {name!r}: check {reward_function_name(check)!r} returned {len(values)} values "
                    f"for {len(completions)} completions"
                )
            for i, value in enumerate(values):
                if value is None or math.isnan(float(value)):
                    continue
                totals[i] = (totals[i] or 0.0) + weight * float(value)
        return totals

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = "Rubric: " + " + ".join(f"{w:g} * {reward_function_name(f)}" for w, f in weighted)
    return reward


def _short(value: Any, limit: int = 200) -> str:
    """A prompt, completion or cell for an error message: the last message's text, cut."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        text = completion_text([value[-1]])
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


# Passed as they are, not copied: the trainer's state, the rollouts' live environments
# (whose get_reward reads the state the tools left; they may hold what cannot be copied), and
# TRL's `log_metric` callback (a copy would log into nothing).
_LIVE_EXTRAS = ("trainer_state", "environments", "log_metric")


def _call(function: RewardFunction, prompts, completions, columns, extra,
          timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S) -> Sequence[Any]:
    """One call on private copies of the inputs, within ``timeout_s`` seconds (``RewardTimeout``)."""
    label = f"reward function {reward_function_name(function)!r}"
    prompts, completions, columns, copied_extra = private_copies(
        prompts, completions, columns, {k: v for k, v in extra.items() if k not in _LIVE_EXTRAS})
    extra = {**extra, **copied_extra}

    def call():
        output = function(prompts=prompts, completions=completions, **columns, **extra)
        if inspect.isawaitable(output):
            output = await_all([output], None, label)[0]
            if isinstance(output, BaseException):
                raise output
        return output

    return call_with_timeout(call, timeout_s, label)


def _extras_for(function: Callable, extra: dict) -> dict:
    """``extra`` without ``log_metric`` for a function that cannot take it (no ``**kwargs``, no such
    parameter): TRL passes it to every function, the course only where it fits, so a reward written
    with named columns only keeps working."""
    if "log_metric" not in extra:
        return extra
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return extra
    if any(p.kind is inspect.Parameter.VAR_KEYWORD or p.name == "log_metric" for p in parameters):
        return extra
    return {k: v for k, v in extra.items() if k != "log_metric"}


def is_async_reward(function: Callable) -> bool:
    """True for an ``async def`` reward function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))


def _failing_sample(function, prompts, completions, columns, extra, timeout_s) -> int | None:
    """Call ``function`` one sample at a time; the index of the first that fails alone."""
    for i in range(len(completions)):
        row = {k: [v[i]] for k, v in columns.items()}
        row_extra = {k: ([v[i]] if k in ("completion_ids", "environments") else v) for k, v in extra.items()}
        try:
            _call(function, [prompts[i]], [completions[i]], row, row_extra, timeout_s)
        except RewardTimeout:
            return None  # a second wait would not say more
        except Exception:  # noqa: BLE001 - only locating the failure; the batch error is reported
            return i
    return None


def _sample_context(i: int, prompts, completions, columns) -> str:
    # Numbers stay numbers (an int answer shown as '2' would look like a type bug); the rest is cut text.
    row = {k: v[i] if isinstance(v[i], (bool, int, float, type(None))) else _short(v[i], 80)
           for k, v in columns.items()}
    return (
        f"sample index {i}\n  prompt: {_short(prompts[i])}\n  completion: {_short(completions[i])}"
        + (f"\n  columns: {row}" if row else "")
    )


def combine_rewards(
    rewards_per_func: torch.Tensor | Sequence[Sequence[float | None]],
    reward_weights: Sequence[float] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Weighted sum of the reward functions' outputs, skipping NaN / None.

    Args:
        rewards_per_func: `(B, F)` one column per reward function; NaN or None means
            "this function does not apply to this completion".
        reward_weights: `F` weights; None = all 1.0.

    Returns:
        `(B,)` `nansum_f(w_f * r_f)`. A row where *every* function returned NaN is NaN
        (as in TRL 1.16: such a completion is unscorable and later gets advantage 0),
        not 0 as a plain nansum would give. The sum is taken in float64; a total beyond
        float32's range (huge weights or rewards) is NaN too, with a ``RewardOverflowWarning``.
    """
    if not isinstance(rewards_per_func, torch.Tensor):
        rewards_per_func = torch.tensor(
            [[float("nan") if r is None else float(r) for r in row] for row in rewards_per_func],
            dtype=torch.float32)
    if rewards_per_func.dim() != 2:
        raise ValueError(f"rewards_per_func has shape {tuple(rewards_per_func.shape)}; expected (B, F). "
                         "Fix: stack one column per reward function.")
    num_funcs, dtype = rewards_per_func.shape[1], rewards_per_func.dtype
    if reward_weights is None:
        weights = torch.ones(num_funcs, dtype=torch.float64, device=rewards_per_func.device)
    else:
        weights = torch.as_tensor(reward_weights, dtype=torch.float64, device=rewards_per_func.device)
        if weights.shape != (num_funcs,):
            raise ValueError(f"reward_weights={list(weights.tolist())} has {weights.numel()} entries for "
                             f"{num_funcs} reward functions. Fix: one weight per function, or None.")
    combined = (rewards_per_func.double() * weights.unsqueeze(0)).nansum(dim=1)  # (B,) float64
    overflow = ~(combined.abs() <= _FLOAT32_MAX) & ~combined.isnan()
    if overflow.any():
        warnings.warn(f"the weighted total of the rewards overflows float32 for {int(overflow.sum())} of "
                      f"{len(combined)} samples (reward_weights={weights.tolist()}); those totals count as NaN "
                      "(advantage 0). Fix: scale the weights or the rewards down.", RewardOverflowWarning,
                      stacklevel=2)
    unscorable = torch.isnan(rewards_per_func).all(dim=1) | overflow
    return combined.masked_fill(unscorable, float("nan")).to(dtype)


def compute_rewards(
    reward_funcs: Sequence[RewardFunction],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: Mapping[str, Sequence[Any]] | None = None,
    weights: Sequence[float] | None = None,
    *,
    completion_ids: Sequence[Sequence[int]] | None = None,
    extra_kwargs: Mapping[str, Any] | None = None,
    timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Score a batch with several reward functions and combine them with weights.

    Args:
        reward_funcs: F functions with TRL's signature ``f(prompts, completions, **columns)``.
        prompts, completions: B items each, strings or chat-message lists (prompt-major:
            the G completions of one prompt are contiguous, prompts repeated to match).
        columns: dataset columns passed by name, each a list of B values (e.g. ``answer``).
        weights: F weights (TRL's ``reward_weights``); None means all 1.
        completion_ids: B token-id lists, passed as ``completion_ids`` when given.
        extra_kwargs: passed unchanged to every function (e.g. ``trainer_state``).
        timeout_s: seconds each function may take on the batch (None: no limit).

    Returns:
        ``rewards_per_func``: (B, F) float32, NaN where a function returned None / NaN / inf.
        ``total``: (B,) float32, ``nansum_f(weights[f] * rewards_per_func[:, f])``; NaN for
        unscorable samples (all F entries NaN), as in TRL 1.16.

    Raises:
        RewardFunctionError: a function raised, did not return within ``timeout_s``,
            returned the wrong number of values, or returned a value that is not a number.
    """
    timeout_s = check_timeout(timeout_s, "timeout_s")
    columns = dict(columns or {})
    extra = dict(extra_kwargs or {})
    batch, n_funcs = len(completions), len(reward_funcs)
    if len(prompts) != batch:
        raise ValueError(f"got {len(prompts)} prompts for {batch} completions; repeat each prompt once per completion")
    for key, values in columns.items():
        if key in ("prompts", "completions"):
            raise ValueError(f"column {key!r} clashes with a reward-function argument; rename the column")
        if len(values) != batch:
            raise ValueError(f"column {key!r} has {len(values)} values for {batch} completions")
    if completion_ids is not None:
        if len(completion_ids) != batch:
            raise ValueError(f"completion_ids has {len(completion_ids)} rows for {batch} completions")
        extra["completion_ids"] = completion_ids
    if n_funcs == 0:
        raise ValueError("reward_funcs is empty; pass at least one reward function")
    if weights is None:
        weights = [1.0] * n_funcs
    weights = _checked_weights(weights)
    if len(weights) != n_funcs:
        raise ValueError(f"got {len(weights)} weights for {n_funcs} reward functions; give one weight per function")

    rewards_per_func = torch.full((batch, n_funcs), math.nan, dtype=torch.float32)
    # async reward functions (remote judges, sandboxes) run concurrently, as in TRL
    waiting = [f for f, function in enumerate(reward_funcs) if is_async_reward(function)]
    awaited = {}
    if waiting:
        names = ", ".join(repr(reward_function_name(reward_funcs[f])) for f in waiting)
        calls = []
        for f in waiting:
            own = _extras_for(reward_funcs[f], extra)
            p, c, cols, copied = private_copies(prompts, completions, columns,
                                                {k: v for k, v in own.items() if k not in _LIVE_EXTRAS})
            calls.append(reward_funcs[f](prompts=p, completions=c, **cols, **{**own, **copied}))
        try:
            awaited = dict(zip(waiting, await_all(calls, timeout_s, f"the async reward function(s) {names}")))
        except RewardTimeout as error:
            raise RewardFunctionError(str(error)) from None
    for f, function in enumerate(reward_funcs):
        name = reward_function_name(function)
        try:
            output = (awaited[f] if f in awaited
                      else _call(function, prompts, completions, columns, _extras_for(function, extra), timeout_s))
            if isinstance(output, BaseException):
                raise output
        except RewardTimeout as error:
            raise RewardFunctionError(str(error)) from None
        except Exception as error:
            index = _failing_sample(function, prompts, completions, columns, extra, timeout_s)
            where = (f"at {_sample_context(index, prompts, completions, columns)}" if index is not None
                     else "no single sample fails on its own: the error depends on the whole batch")
            raise RewardFunctionError(
                f"reward function {name!r} raised {type(error).__name__}: {error}\n  {where}"
            ) from error
        values = _as_values(output, name, batch)
        if len(values) != batch:
            raise RewardFunctionError(
                f"reward function {name!r} returned {len(values)} rewards for {batch} completions; "
                "it must return exactly one reward (or None) per completion"
            )
        for i, value in enumerate(values):
            rewards_per_func[i, f] = _as_reward(value, name, i, prompts, completions, columns)

    total = combine_rewards(rewards_per_func, weights)  # (B,)
    unscorable = torch.isnan(total)  # (B,)
    if unscorable.any():
        first = int(unscorable.nonzero()[0, 0])
        warnings.warn(
            f"all reward functions returned None for {int(unscorable.sum())} of {batch} samples; "
            f"their total is NaN and they should get advantage 0. First one: "
            f"{_sample_context(first, prompts, completions, columns)}",
            UnscorableSampleWarning,
            stacklevel=2,
        )
    return rewards_per_func, total


def _checked_weights(weights: Any) -> list[float]:
    """``weights`` as a list of finite floats; a scalar, a string, a NaN or an infinite weight is refused
    (a NaN weight would silently zero its function's rewards, an infinite one make totals NaN)."""
    if isinstance(weights, (torch.Tensor, np.ndarray)):
        weights = weights.tolist()
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Iterable):
        raise ValueError(f"weights={_short(repr(weights), 60)} is not a list. Fix: give one number per reward "
                         "function, e.g. weights=[1.0, 0.5].")
    weights = list(weights)
    for index, weight in enumerate(weights):
        if isinstance(weight, np.generic):
            weight = weight.item()
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"weights[{index}]={_short(repr(weight), 60)} is not a number. Fix: give one number "
                             "per reward function, e.g. weights=[1.0, 0.5].")
        if not math.isfinite(weight):
            raise ValueError(f"weights[{index}]={weight!r} is not finite (NaN would silently drop that function's "
                             "rewards, infinity make the totals NaN). Fix: give a finite weight, e.g. 1.0, or 0.0 "
                             "to switch the function off.")
    return [float(w) for w in weights]


_EXPECTED = "a list of {batch} rewards (numbers or None), or a 1-D array / tensor of shape ({batch},)"


def _as_values(output: Any, name: str, batch: int) -> list:
    """The per-sample values of one function's output; see the module docstring for what is accepted."""
    expected = _EXPECTED.format(batch=batch)
    if isinstance(output, (torch.Tensor, np.ndarray)):
        if output.ndim != 1:
            raise RewardFunctionError(f"reward function {name!r} returned a {type(output).__name__} of shape "
                                      f"{tuple(output.shape)}; expected {expected}")
        return list(output)
    if isinstance(output, (str, bytes, Mapping, set, frozenset)) or not isinstance(output, Iterable):
        raise RewardFunctionError(f"reward function {name!r} returned {type(output).__name__} "
                                  f"{_short(output, 80)}; expected {expected}")
    return list(output)


def _as_reward(value: Any, name: str, i: int, prompts, completions, columns) -> float:
    if value is None:
        return math.nan
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
        value = value.item()
    elif isinstance(value, np.generic):  # NumPy scalars: np.float32(1.0), np.bool_(True)
        value = value.item()
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or isinstance(value, complex):
        shape = f" of shape {tuple(value.shape)}" if isinstance(value, (torch.Tensor, np.ndarray)) else ""
        raise RewardFunctionError(
            f"reward function {name!r} returned {_short(repr(value), 80)} ({type(value).__name__}{shape}) at "
            f"{_sample_context(i, prompts, completions, columns)}\n  each reward must be a number (int, float, "
            "bool, a NumPy scalar or a 0-d tensor) or None"
        )
    try:
        number = float(value)
    except OverflowError:  # an int beyond float64 (10**400)
        number = math.inf
    if math.isinf(number) or abs(number) > _FLOAT32_MAX:
        shown = _short(repr(value), 40)
        warnings.warn(
            f"reward function {name!r} returned {shown} at sample index {i}; treated as NaN (not applicable): "
            "it is infinite or beyond float32's range",
            RewardOverflowWarning,
            stacklevel=3,
        )
        return math.nan
    return number


def no_rewards(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`compute_rewards` returns for a run that learns without reward functions (on-policy
    distillation reads a teacher instead): ``(B, 0)`` per-function scores and ``(B,)`` NaN totals."""
    return torch.zeros((batch, 0), dtype=torch.float32), torch.full((batch,), math.nan, dtype=torch.float32)
