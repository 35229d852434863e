"""DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): a length penalty near the budget.

A completion cut at ``max_completion_length`` is scored as if finished, which punishes a
reasoning chain for being long rather than wrong. DAPO adds a reward that is 0 up to
``L_max - L_cache`` tokens, falls linearly to -1 across the last ``L_cache`` tokens of the
budget, and is -1 beyond it:

    R(y) = 0                               if |y| <= L_max - L_cache
    R(y) = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
    R(y) = -1                              if |y| > L_max

``|y|`` is the completion's token count (``completion_ids``, which ``compute_rewards``
passes). Same values as TRL 1.16's ``trl.rewards.get_soft_overlong_punishment`` (tested).
"""

from __future__ import annotations

from typing import Callable


def soft_overlong_punishment(max_completion_len: int, soft_punish_cache: int) -> Callable:
    """The reward function ``f(prompts, completions, completion_ids, **columns) -> list[float]``.

    Args:
        max_completion_len: L_max, normally the run's ``max_completion_length``.
        soft_punish_cache: L_cache, the stretch before L_max over which the penalty grows;
            0 gives no soft zone (0 up to L_max, -1 beyond).
    """
    if max_completion_len < 1 or not 0 <= soft_punish_cache <= max_completion_len:
        raise ValueError(f"soft_overlong_punishment(max_completion_len={max_completion_len}, soft_punish_cache="
                         f"{soft_punish_cache}): need max_completion_len >= 1 and 0 <= soft_punish_cache <= "
                         "max_completion_len. Fix: e.g. soft_punish_cache = max_completion_len // 4.")
    free = max_completion_len - soft_punish_cache

    def soft_overlong_punishment_reward(prompts=None, completions=None, completion_ids=None, **columns) -> list[float]:
        if completion_ids is None:
            raise ValueError("soft_overlong_punishment_reward needs the completions' token ids (completion_ids), "
                             "which the trainer passes. Fix: call it through compute_rewards or pass completion_ids.")
        scores = []
        for ids in completion_ids:
            length = len(ids)
            if length <= free:
                scores.append(0.0)
            elif length <= max_completion_len:
                scores.append((free - length) / soft_punish_cache)
            else:
                scores.append(-1.0)
        return scores

    return soft_overlong_punishment_reward
