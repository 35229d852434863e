"""Dynamic sampling (DAPO, Yu et al. 2025, sec. 3.2): keep only groups whose rewards differ.

A group whose G rewards are all equal has advantage 0 everywhere (GRPO and RLOO alike): it
costs its generations and teaches nothing. With ``dynamic_sampling=True`` the trainer
samples a generation batch, drops those groups, and samples more prompts ("rounds") until
it holds ``unique_prompts_per_generation`` groups with a spread, or ``max_num_gen_batches``
rounds were sampled; a batch still short at the cap is completed with the dropped groups
(advantage 0), so the shapes and the schedule never change.

Names follow verl's DAPO recipe: its ``algorithm.filter_groups.enable`` is our
``dynamic_sampling`` (the paper's name) and ``max_num_gen_batches`` keeps verl's name; verl's
0 ("no limit") is not offered, since a reward that never varies would loop forever. verl
filters on a chosen metric (``acc`` or ``score``); we filter on the combined reward the
advantages read. TRL 1.16 has no dynamic sampling.

Invariants (tested): with no zero-spread group in the first round the batch is the first
round itself, unchanged; with ``dynamic_sampling=False`` the trainer never calls this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..rollout.base import RolloutBatch


@dataclass
class Sampled:
    """One round: dataset rows, prompts and columns (repeated G times), completions, rewards.

    The functions below read these fields and build their results with ``dataclasses.replace``,
    so any dataclass with them works (the trainer's ``Generated``)."""

    rows: list[int]                # (B,) dataset row of each completion, prompt-major
    prompts: list[Any]             # (B,)
    columns: dict[str, list]       # each (B,)
    rollout: RolloutBatch          # B rows
    per_func: torch.Tensor         # (B, K)
    total: torch.Tensor            # (B,)


def zero_spread_groups(total: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``(U,)`` True where a group's rewards are all equal (NaN rewards ignored; all NaN = equal)."""
    grouped = total.view(-1, num_generations)                            # (U, G)
    finite = ~torch.isnan(grouped)
    high = torch.where(finite, grouped, torch.full_like(grouped, -torch.inf)).amax(1)
    low = torch.where(finite, grouped, torch.full_like(grouped, torch.inf)).amin(1)
    return ~(high > low)


def _pad_to(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    missing = width - t.shape[1]
    if missing <= 0:
        return t
    pad = torch.full((t.shape[0], missing), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def _select(s: Sampled, groups: list[int], G: int) -> tuple[list[int], Sampled]:
    idx = [g * G + j for g in groups for j in range(G)]
    r, index = s.rollout, torch.tensor(idx, dtype=torch.long)
    rollout = RolloutBatch(prompt_ids=r.prompt_ids[index], prompt_mask=r.prompt_mask[index],
                           completion_ids=r.completion_ids[index], completion_mask=r.completion_mask[index],
                           is_eos=r.is_eos[index], texts=[r.texts[i] for i in idx],
                           sampling_logps=None if r.sampling_logps is None else r.sampling_logps[index])
    return idx, dataclasses.replace(s, rows=[s.rows[i] for i in idx], prompts=[s.prompts[i] for i in idx],
                                    columns={k: [v[i] for i in idx] for k, v in s.columns.items()}, rollout=rollout,
                                    per_func=s.per_func[index], total=s.total[index])


def concat_sampled(parts: list[Sampled], pad_id: int) -> Sampled:
    """Rows of several rounds in one batch: prompts left-padded, completions right-padded."""
    P = max(p.rollout.prompt_ids.shape[1] for p in parts)
    T = max(p.rollout.completion_ids.shape[1] for p in parts)
    rs = [p.rollout for p in parts]
    logps = None if any(r.sampling_logps is None for r in rs) else torch.cat(
        [_pad_to(r.sampling_logps, T, 0.0, left=False) for r in rs])
    rollout = RolloutBatch(prompt_ids=torch.cat([_pad_to(r.prompt_ids, P, pad_id, True) for r in rs]),
                           prompt_mask=torch.cat([_pad_to(r.prompt_mask, P, 0, True) for r in rs]),
                           completion_ids=torch.cat([_pad_to(r.completion_ids, T, pad_id, False) for r in rs]),
                           completion_mask=torch.cat([_pad_to(r.completion_mask, T, 0, False) for r in rs]),
                           is_eos=torch.cat([r.is_eos for r in rs]), texts=[t for r in rs for t in r.texts],
                           sampling_logps=logps)
    return dataclasses.replace(parts[0], rows=[x for p in parts for x in p.rows],
                               prompts=[x for p in parts for x in p.prompts],
                               columns={k: [x for p in parts for x in p.columns[k]] for k in parts[0].columns},
                               rollout=rollout, per_func=torch.cat([p.per_func for p in parts]),
                               total=torch.cat([p.total for p in parts]))


def fill_groups(sample: Callable[[int], Sampled], groups: int, num_generations: int, max_rounds: int,
                pad_id: int) -> tuple[Sampled, dict[str, float], int]:
    """Sample rounds (``sample(round_index)``) until ``groups`` groups with a reward spread are held.

    Returns ``(batch, metrics, tokens)``: the batch of ``groups x G`` rows (rounds' kept groups
    in order, then dropped groups if the cap was reached), the ``dynamic_sampling/*`` metrics,
    and the prompt + completion tokens of every round (what the generation cost).
    """
    G = num_generations
    kept: list[tuple[Sampled, list[int]]] = []
    dropped: list[tuple[Sampled, list[int]]] = []
    held = seen = zero = tokens = rounds = 0
    first = None
    while rounds < max_rounds and held < groups:
        s = sample(rounds)
        first = first or s
        rounds += 1
        tokens += int(s.rollout.completion_mask.sum() + s.rollout.prompt_mask.sum())
        flat = zero_spread_groups(s.total, G).tolist()
        good = [g for g, z in enumerate(flat) if not z][: groups - held]
        kept.append((s, good))
        dropped.append((s, [g for g, z in enumerate(flat) if z]))
        held, seen, zero = held + len(good), seen + len(flat), zero + sum(flat)
    filler = groups - held
    metrics = {"dynamic_sampling/num_gen_batches": float(rounds), "dynamic_sampling/groups_dropped": float(zero),
               "dynamic_sampling/frac_reward_zero_std_sampled": zero / seen,
               "dynamic_sampling/groups_refilled_with_zero_spread": float(filler)}
    if rounds == 1 and held == groups:
        return first, metrics, tokens  # nothing dropped: the first round as it is
    parts = [_select(s, g, G)[1] for s, g in kept if g]
    for s, g in dropped:  # at the cap: complete the batch with zero-spread groups (advantage 0)
        if filler <= 0:
            break
        parts.append(_select(s, g[:filler], G)[1])
        filler -= len(g[:filler])
    return concat_sampled(parts, pad_id), metrics, tokens


def draw_batch(sample: Callable[[int], Sampled], config, pad_id: int) -> tuple[Sampled, dict[str, float], int | None]:
    """One generation batch: ``sample(0)`` as it is when ``config.dynamic_sampling`` is off (no
    metrics, ``None`` tokens), else :func:`fill_groups`."""
    if not config.dynamic_sampling:
        return sample(0), {}, None
    return fill_groups(sample, config.unique_prompts_per_generation, config.num_generations,
                       config.max_num_gen_batches, pad_id)
