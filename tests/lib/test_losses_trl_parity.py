"""Parity of `course_lib.algos.grpo` with TRL 1.16's own loss code on identical tensors.

TRL's `GRPOTrainer._compute_loss` (and `RLOOTrainer._compute_loss`) is called as an
unbound function on a stand-in `self` that carries only the attributes the method reads;
its `_get_per_token_logps_and_entropies` returns a leaf tensor of log-probs, so both sides
differentiate with respect to the same values. Loss, gradient and logged metrics must
agree to 1e-6 in float32.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl_stand_ins import SingleProcessAccelerator

from course_lib.algos.grpo import policy_loss
from course_lib.algos.rloo import rloo_policy_loss

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    trl_rloo = pytest.importorskip("trl.trainer.rloo_trainer")

TOL = dict(rtol=1e-6, atol=1e-6)
BATCH, LENGTH, MAX_COMPLETION_LENGTH = 6, 7, 9


def _make_batch(seed: int, mask_kind: str) -> dict[str, torch.Tensor]:
    """Random log-probs that look like real ones (negative, with policy drift)."""
    gen = torch.Generator().manual_seed(seed)
    logps = -3.0 * torch.rand(BATCH, LENGTH, generator=gen)
    old = logps + 0.5 * torch.randn(BATCH, LENGTH, generator=gen)
    ref = logps + 0.3 * torch.randn(BATCH, LENGTH, generator=gen)
    sampling = old + 0.4 * torch.randn(BATCH, LENGTH, generator=gen)
    advantages = torch.randn(BATCH, generator=gen)
    advantages[0] = 0.0  # a zero-advantage completion (a group where all rewards tie)
    lengths = torch.randint(1, LENGTH + 1, (BATCH,), generator=gen)
    if mask_kind == "empty_rows":
        lengths[1] = 0
        lengths[4] = 0
    elif mask_kind == "all_empty":
        lengths[:] = 0
    elif mask_kind == "tool_spans":
        lengths[:] = LENGTH
        lengths[5] = 2
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    tool_mask = _tool_spans() if mask_kind == "tool_spans" else torch.ones(BATCH, LENGTH)
    loss_mask = mask * tool_mask
    is_ratio = torch.clamp(torch.exp((old - sampling) * loss_mask), max=2.0)  # TRL forms it on the loss mask
    return dict(logps=logps, old=old, ref=ref, advantages=advantages, mask=mask, is_ratio=is_ratio,
                tool_mask=tool_mask)


def _tool_spans() -> torch.Tensor:
    """``(BATCH, LENGTH)`` TRL ``tool_mask``: 0 on tool-result tokens between model turns.

    Row 0 has one result span, row 1 two, row 2 none, row 3 a trajectory that is all tool
    result after its first token, row 4 a result right at the end (cut by the budget)."""
    tool = torch.ones(BATCH, LENGTH)
    tool[0, 2:4] = 0
    tool[1, 1:3] = 0
    tool[1, 4:6] = 0
    tool[3, 1:] = 0
    tool[4, 5:] = 0
    return tool


def _trl_grpo(batch, *, loss_type, level, epsilon_high, delta, beta, use_is, on_policy,
              grad_accum=1, steps_per_generation=1, num_items=None, mask_dtype=torch.float32):
    logps = batch["logps"].clone().requires_grad_(True)
    mask = batch["mask"].to(mask_dtype)
    loss_mask = batch["mask"] * batch["tool_mask"]
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    fake_self = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=0.2 if epsilon_high is None else epsilon_high,
        use_vllm=use_is,
        vllm_importance_sampling_correction=use_is,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=grad_accum,
        max_completion_length=MAX_COMPLETION_LENGTH,
        accelerator=SingleProcessAccelerator(),
        args=SimpleNamespace(delta=delta, use_bias_correction_kl=True,
                             steps_per_generation=steps_per_generation),
        _entropy_bonus_enabled=False,
        _metrics=metrics,
    )
    inputs = {
        "prompt_ids": torch.zeros(BATCH, 1, dtype=torch.long),
        "prompt_mask": torch.ones(BATCH, 1, dtype=torch.long),
        "completion_ids": torch.zeros(BATCH, LENGTH, dtype=torch.long),
        "completion_mask": mask,
        "advantages": batch["advantages"],
        "num_items_in_batch": torch.tensor(float(loss_mask.sum()) if num_items is None else num_items),
    }
    if not bool((batch["tool_mask"] == 1).all()):
        inputs["tool_mask"] = batch["tool_mask"].to(mask_dtype)
    if not on_policy:
        inputs["old_per_token_logps"] = batch["old"]
    if beta:
        inputs["ref_per_token_logps"] = batch["ref"]
    if use_is:
        inputs["importance_sampling_ratio"] = batch["is_ratio"]
    loss = trl_grpo.GRPOTrainer._compute_loss(fake_self, None, inputs)
    loss.backward()
    logged = {key: values[-1] for key, values in metrics["train"].items()}
    return loss.detach(), logps.grad, logged


def _ours_grpo(batch, *, loss_type, level, epsilon_high, delta, beta, use_is, on_policy,
               grad_accum=1, steps_per_generation=1, num_items=None, mask_dtype=torch.float32):
    logps = batch["logps"].clone().requires_grad_(True)
    out = policy_loss(
        logps,
        None if on_policy else batch["old"],
        batch["advantages"],
        (batch["mask"] * batch["tool_mask"]).to(mask_dtype),  # the tool mask folded into the loss mask
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        delta=delta,
        importance_sampling_level=level,
        beta=beta,
        ref_logps=batch["ref"] if beta else None,
        sampling_ratio=batch["is_ratio"] if use_is else None,
        max_completion_length=MAX_COMPLETION_LENGTH,
        num_items_in_batch=num_items,
        gradient_accumulation_steps=grad_accum,
        steps_per_generation=steps_per_generation,
        entropies=torch.zeros_like(logps),
    )
    out.loss.backward()
    return out.loss.detach(), logps.grad, out.metrics


def _assert_same(trl_result, our_result):
    trl_loss, trl_grad, trl_metrics = trl_result
    loss, grad, metrics = our_result
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss, trl_loss, **TOL)
    torch.testing.assert_close(grad, trl_grad, **TOL)
    for key, trl_value in trl_metrics.items():
        assert key in metrics, f"metric {key!r} that TRL logs is missing"
        if math.isnan(trl_value):
            # TRL's per-sequence min/max are NaN when no sequence has a valid token;
            # ours report 0 so that all-truncated batches log finite numbers.
            assert metrics[key] == 0.0, key
        else:
            assert metrics[key] == pytest.approx(trl_value, rel=1e-6, abs=1e-6), key


GRID = list(itertools.product(
    ["grpo", "bnpo", "dr_grpo", "dapo"],  # loss_type
    ["token", "sequence"],                 # importance_sampling_level
    [None, 0.28],                          # epsilon_high
    [None, 1.5],                           # delta
    [0.0, 0.04],                           # beta
    [False, True],                         # vLLM IS correction
    ["ragged", "empty_rows", "tool_spans"],  # mask; tool_spans: multi-turn rows with tool results
))


@pytest.mark.parametrize(
    "loss_type,level,epsilon_high,delta,beta,use_is,mask_kind", GRID,
    ids=["-".join(map(str, case)) for case in GRID],
)
def test_policy_loss_matches_trl_grid(loss_type, level, epsilon_high, delta, beta, use_is, mask_kind):
    batch = _make_batch(seed=len(loss_type) * 7 + int(beta * 100) + int(use_is), mask_kind=mask_kind)
    settings = dict(loss_type=loss_type, level=level, epsilon_high=epsilon_high, delta=delta,
                    beta=beta, use_is=use_is, on_policy=False)
    _assert_same(_trl_grpo(batch, **settings), _ours_grpo(batch, **settings))


EXTRA = [
    # (loss_type, level, on_policy, grad_accum, steps_per_generation, num_items, mask_kind, mask_dtype)
    ("dapo", "token", False, 2, 4, 101.0, "ragged", torch.float32),
    ("dapo", "token", False, 4, 4, 57.0, "empty_rows", torch.float32),
    ("dapo", "sequence", False, 2, 2, 0.0, "all_empty", torch.float32),
    ("grpo", "token", False, 3, 3, None, "ragged", torch.float32),
    ("bnpo", "token", False, 2, 2, None, "empty_rows", torch.float32),
    ("dr_grpo", "sequence", False, 4, 8, None, "ragged", torch.float32),
    ("grpo", "token", True, 1, 1, None, "ragged", torch.float32),
    ("dapo", "sequence", True, 1, 1, None, "empty_rows", torch.float32),
    ("bnpo", "token", False, 1, 1, None, "ragged", torch.long),
    ("grpo", "sequence", False, 1, 1, None, "empty_rows", torch.long),
    ("dapo", "token", False, 2, 4, None, "tool_spans", torch.float32),
    ("bnpo", "sequence", False, 3, 3, None, "tool_spans", torch.long),
    ("dr_grpo", "token", True, 1, 1, None, "tool_spans", torch.float32),
] + [(lt, lvl, False, 1, 1, None, "all_empty", torch.float32)
     for lt in ("grpo", "bnpo", "dr_grpo", "dapo") for lvl in ("token", "sequence")]


@pytest.mark.parametrize(
    "loss_type,level,on_policy,grad_accum,spg,num_items,mask_kind,mask_dtype", EXTRA,
    ids=[f"{c[0]}-{c[1]}-onpolicy{c[2]}-ga{c[3]}-spg{c[4]}-n{c[5]}-{c[6]}-{str(c[7])[6:]}" for c in EXTRA],
)
def test_policy_loss_matches_trl_scaling(loss_type, level, on_policy, grad_accum, spg,
                                         num_items, mask_kind, mask_dtype):
    batch = _make_batch(seed=11, mask_kind=mask_kind)
    settings = dict(loss_type=loss_type, level=level, epsilon_high=0.28, delta=None, beta=0.04,
                    use_is=True, on_policy=on_policy, grad_accum=grad_accum,
                    steps_per_generation=spg, num_items=num_items, mask_dtype=mask_dtype)
    _assert_same(_trl_grpo(batch, **settings), _ours_grpo(batch, **settings))


def _trl_rloo(batch, epsilon_high, on_policy):
    logps = batch["logps"].clone().requires_grad_(True)
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    fake_self = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        aux_loss_enabled=False,
        epsilon_low=0.2,
        epsilon_high=0.2 if epsilon_high is None else epsilon_high,
        model=SimpleNamespace(training=True),
        accelerator=SingleProcessAccelerator(),
        _metrics=metrics,
    )
    seq_old = (batch["logps"] if on_policy else batch["old"]) * batch["mask"] * batch["tool_mask"]
    inputs = {
        "prompt_ids": torch.zeros(BATCH, 1, dtype=torch.long),
        "prompt_mask": torch.ones(BATCH, 1, dtype=torch.long),
        "completion_ids": torch.zeros(BATCH, LENGTH, dtype=torch.long),
        "completion_mask": batch["mask"] * batch["tool_mask"],  # TRL's RLOO has no tool_mask: fold it here
        "advantages": batch["advantages"],
        "old_logps": seq_old.sum(1),
    }
    loss = trl_rloo.RLOOTrainer._compute_loss(fake_self, None, inputs)
    loss.backward()
    return loss.detach(), logps.grad, {k: v[-1] for k, v in metrics["train"].items()}


RLOO_GRID = list(itertools.product([None, 0.28], [False, True], ["ragged", "empty_rows", "tool_spans"]))


@pytest.mark.parametrize("epsilon_high,on_policy,mask_kind", RLOO_GRID)
def test_rloo_loss_matches_trl(epsilon_high, on_policy, mask_kind):
    batch = _make_batch(seed=5, mask_kind=mask_kind)
    # Sequence ratios of whole completions drift a lot; shrink the drift so that some
    # completions fall inside the clip range and some outside.
    batch["old"] = batch["logps"] + 0.1 * (batch["old"] - batch["logps"])
    trl_loss, trl_grad, trl_metrics = _trl_rloo(batch, epsilon_high, on_policy)
    logps = batch["logps"].clone().requires_grad_(True)
    out = rloo_policy_loss(logps, None if on_policy else batch["old"], batch["advantages"],
                           batch["mask"] * batch["tool_mask"], cliprange=0.2, cliprange_high=epsilon_high)
    out.loss.backward()
    torch.testing.assert_close(out.loss.detach(), trl_loss, **TOL)
    torch.testing.assert_close(logps.grad, trl_grad, **TOL)
    for key in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert out.metrics[key] == pytest.approx(trl_metrics[key], abs=1e-6), key


def test_grid_size_and_clipping_is_exercised():
    """The grid covers 384 settings, and its data really triggers every clip branch."""
    assert len(GRID) == 384
    batch = _make_batch(seed=3, mask_kind="ragged")
    ratio = torch.exp(batch["logps"] - batch["old"])[batch["mask"].bool()]
    assert (ratio < 0.8).any() and (ratio > 1.28).any() and (ratio > 1.5).any()


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_tool_spans_change_the_loss(loss_type):
    """The tool-span cases are not vacuous: ignoring TRL's tool_mask gives another loss and gradient."""
    batch = _make_batch(seed=4, mask_kind="tool_spans")
    settings = dict(loss_type=loss_type, level="token", epsilon_high=None, delta=None, beta=0.04, use_is=True,
                    on_policy=False)
    trl_loss, trl_grad, _ = _trl_grpo(batch, **settings)
    unmasked = dict(batch, tool_mask=torch.ones_like(batch["tool_mask"]))
    loss, grad, _ = _ours_grpo(unmasked, **settings)
    assert not torch.allclose(loss, trl_loss, atol=1e-4)
    assert (trl_grad[batch["tool_mask"] == 0] == 0).all() and (grad[batch["tool_mask"] == 0] != 0).any()
