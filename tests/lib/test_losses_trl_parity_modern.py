"""Parity with TRL 1.16 for the modern GRPO family: CISPO, SAPO, LUSPO, VESPO, the four
sampler-correction modes, off-policy sequence masking and entropy control.

Same oracle as `test_losses_trl_parity.py`: TRL's own `GRPOTrainer._compute_loss` runs
unbound on a stand-in `self` holding only what it reads, on the same leaf tensors of
log-probs and entropies as ours; loss, both gradients and every logged metric must agree
to 1e-6. The correction weights are checked against the lines of TRL's
`_generate_and_score_completions` that form them, executed as they are written there.
"""

from __future__ import annotations

import inspect
import itertools
import math
import textwrap
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl_stand_ins import SingleProcessAccelerator

from course_lib.algos.grpo import CLIP_FIELDS, GRPO, LOSSES, policy_loss
from course_lib.algos.grpo_config import GRPOConfig
from course_lib.algos.base import MicroBatch, PolicyOutputs
from course_lib.ops.entropy import AdaptiveEntropyCoef
from course_lib.ops.importance import IS_MODES, importance_sampling_ratio

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

Trainer = trl_grpo.GRPOTrainer
TOL = dict(rtol=1e-6, atol=1e-6)
BATCH, LENGTH, MAX_COMPLETION_LENGTH = 6, 7, 9
SHAPE = dict(sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0,
             vespo_k_neg=3.0, vespo_lambda_neg=2.0)


def _batch(seed: int, mask_kind: str) -> dict:
    gen = torch.Generator().manual_seed(seed)
    logps = -3.0 * torch.rand(BATCH, LENGTH, generator=gen)
    old = logps + 0.3 * torch.randn(BATCH, LENGTH, generator=gen)
    sampling = old + 0.3 * torch.randn(BATCH, LENGTH, generator=gen)
    lengths = torch.randint(1, LENGTH + 1, (BATCH,), generator=gen)
    if mask_kind == "empty_rows":
        lengths[1] = lengths[4] = 0
    if mask_kind == "tool_spans":
        lengths[:] = LENGTH
        lengths[5] = 2
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    advantages = torch.randn(BATCH, generator=gen)
    advantages[0] = 0.0
    tool_mask = _tool_spans() if mask_kind == "tool_spans" else torch.ones(BATCH, LENGTH)
    return dict(logps=logps, old=old, ref=logps + 0.3 * torch.randn(BATCH, LENGTH, generator=gen),
                sampling=sampling, mask=mask, advantages=advantages, tool_mask=tool_mask,
                loss_mask=mask * tool_mask, entropies=2.0 * torch.rand(BATCH, LENGTH, generator=gen))


def _tool_spans() -> torch.Tensor:
    """``(BATCH, LENGTH)`` TRL ``tool_mask``: 0 on tool-result tokens (one span, two spans, none,
    all but the first token, a span at the end)."""
    tool = torch.ones(BATCH, LENGTH)
    tool[0, 2:4] = 0
    tool[1, 1:3] = 0
    tool[1, 4:6] = 0
    tool[3, 1:] = 0
    tool[4, 5:] = 0
    return tool


def _trl_weight(old, sampling, mask, mode, clip_min, clip_max):
    """TRL's correction weight, by running the lines of its source that compute it."""
    source = inspect.getsource(Trainer._generate_and_score_completions)
    start = source.rindex("\n", 0, source.index("per_token_logps_diff = (old_per_token_logps")) + 1
    stop = source.index("raise ValueError(", start)
    block = textwrap.dedent(source[start:stop])
    block = block[:block.rindex("else:")]  # the unknown-mode branch is ours to test separately
    fake = SimpleNamespace(vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=clip_min,
                           vllm_importance_sampling_clip_max=clip_max)
    namespace = dict(self=fake, old_per_token_logps=old, sampling_per_token_logps=sampling, mask=mask,
                     torch=torch, math=math)
    exec(compile(block, "trl_is_block", "exec"), namespace)
    return namespace["vllm_importance_sampling_ratio"]


@pytest.mark.parametrize("mode,clip_min,clip_max,mask_kind",
                         list(itertools.product(IS_MODES, [None, 0.5], [3.0, 1.2], ["empty_rows", "tool_spans"])))
def test_correction_weight_matches_trl(mode, clip_min, clip_max, mask_kind):
    """TRL forms the weight on ``completion_mask * tool_mask``; ours on the folded loss mask."""
    batch = _batch(3, mask_kind)
    old, sampling = batch["old"], batch["sampling"].clone()
    sampling[2, 0] = float("nan")  # a token the sampler could not score
    ours = importance_sampling_ratio(old, sampling, batch["loss_mask"], mode=mode, clip_min=clip_min,
                                     clip_max=clip_max)
    theirs = _trl_weight(old, sampling, batch["mask"] * batch["tool_mask"], mode, clip_min, clip_max)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert (ours == 0).any() or mode.endswith("truncate") or clip_max == 3.0  # masking really drops


def _weight_for(batch, kind):
    if kind == "none":
        return None
    mode = {"tt": "token_truncate", "tm": "token_mask", "sm": "sequence_mask", "st": "sequence_truncate"}[kind]
    return importance_sampling_ratio(batch["old"], batch["sampling"], batch["loss_mask"], mode=mode, clip_max=1.3,
                                     clip_min=0.7 if kind == "tm" else None)


def _run_trl(batch, s):
    logps = batch["logps"].clone().requires_grad_(True)
    entropies = batch["entropies"].clone().requires_grad_(True)
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    weight = _weight_for(batch, s["is_kind"])
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, entropies, None),
        aux_loss_enabled=False, top_entropy_quantile=s["quantile"], off_policy_mask_threshold=s["threshold"],
        importance_sampling_level=s["level"], beta=s["beta"], loss_type=s["loss_type"], epsilon_low=s.get("epsilon", 0.2),
        epsilon_high=s["epsilon_high"], use_vllm=weight is not None,
        vllm_importance_sampling_correction=weight is not None, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=s["accum"], max_completion_length=MAX_COMPLETION_LENGTH,
        accelerator=SingleProcessAccelerator(), entropy_coef=s["coef"], use_adaptive_entropy=False,
        _entropy_bonus_enabled=s["coef"] != 0.0, _last_world_entropy=math.inf, _entropy_window_stats=None,
        get_off_policy_mask=Trainer.get_off_policy_mask, get_gamma_weights=Trainer.get_gamma_weights,
        args=SimpleNamespace(delta=s.get("delta"), use_bias_correction_kl=True, steps_per_generation=s["accum"],
                             **SHAPE),
        _metrics=metrics)
    fake.get_high_entropy_mask = lambda *a: Trainer.get_high_entropy_mask(fake, *a)
    inputs = {"prompt_ids": torch.zeros(BATCH, 1, dtype=torch.long), "prompt_mask": torch.ones(BATCH, 1),
              "completion_ids": torch.zeros(BATCH, LENGTH, dtype=torch.long), "completion_mask": batch["mask"],
              "advantages": batch["advantages"], "num_items_in_batch": batch["loss_mask"].sum() * s["accum"],
              "old_per_token_logps": batch["old"], "sampling_per_token_logps": batch["sampling"]}
    if not bool((batch["tool_mask"] == 1).all()):
        inputs["tool_mask"] = batch["tool_mask"]
    if s["beta"]:
        inputs["ref_per_token_logps"] = batch["ref"]
    if weight is not None:
        inputs["importance_sampling_ratio"] = weight
    loss = Trainer._compute_loss(fake, None, inputs)
    loss.backward()
    logged = {k: v[-1] for k, v in metrics["train"].items() if k != "entropy_coef"}
    return loss.detach(), logps.grad, entropies.grad, logged


def _run_ours(batch, s):
    logps = batch["logps"].clone().requires_grad_(True)
    entropies = batch["entropies"].clone().requires_grad_(True)
    out = policy_loss(
        logps, batch["old"], batch["advantages"], batch["loss_mask"], loss_type=s["loss_type"], epsilon=0.2,
        epsilon_high=s["epsilon_high"], importance_sampling_level=s["level"], beta=s["beta"],
        ref_logps=batch["ref"] if s["beta"] else None, sampling_ratio=_weight_for(batch, s["is_kind"]),
        sampling_logps=batch["sampling"], off_policy_mask_threshold=s["threshold"],
        max_completion_length=MAX_COMPLETION_LENGTH, num_items_in_batch=batch["loss_mask"].sum() * s["accum"],
        gradient_accumulation_steps=s["accum"], steps_per_generation=s["accum"], entropies=entropies,
        top_entropy_quantile=s["quantile"], entropy_coef=s["coef"], **SHAPE)
    out.loss.backward()
    grad_entropies = entropies.grad if entropies.grad is not None else torch.zeros_like(entropies)
    return out.loss.detach(), logps.grad, grad_entropies, out.metrics


def _assert_same(theirs, ours):
    for a, b in zip(ours[:2], theirs[:2]):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **TOL)
    their_entropy_grad = theirs[2] if theirs[2] is not None else torch.zeros_like(ours[2])
    torch.testing.assert_close(ours[2], their_entropy_grad, **TOL)
    for key, value in theirs[3].items():
        assert key in ours[3], f"metric {key!r} that TRL logs is missing"
        expected = 0.0 if math.isnan(value) else value  # TRL's NaN min/max of empty batches: we log 0
        assert ours[3][key] == pytest.approx(expected, rel=1e-6, abs=1e-6), key


LOSS_GRID = list(itertools.product(
    ["cispo", "sapo", "luspo", "vespo"],   # loss_type
    ["token", "sequence"],                 # importance_sampling_level
    [0.0, 0.04],                           # beta
    ["none", "tt", "tm", "sm"],            # sampler correction: off, token truncate/mask, sequence mask
    ["ragged", "empty_rows", "tool_spans"],  # mask; tool_spans: multi-turn rows with tool results
    [1, 2],                                # gradient accumulation
))


@pytest.mark.parametrize("loss_type,level,beta,is_kind,mask_kind,accum", LOSS_GRID,
                         ids=["-".join(map(str, c)) for c in LOSS_GRID])
def test_new_loss_types_match_trl(loss_type, level, beta, is_kind, mask_kind, accum):
    batch = _batch(7 + len(loss_type) + accum, mask_kind)
    settings = dict(loss_type=loss_type, level=level, beta=beta, is_kind=is_kind, accum=accum,
                    epsilon_high=5.0 if loss_type == "cispo" else 0.28, threshold=None, quantile=1.0, coef=0.0)
    _assert_same(_run_trl(batch, settings), _run_ours(batch, settings))


def _trl_changes(loss_type: str, name: str) -> bool:
    """Whether TRL's loss, gradient or metrics move when one clip field leaves its default.

    The defaults are TRL's (epsilon 0.2, epsilon_high None, delta None); TRL's ``__init__`` turns
    ``epsilon_high=None`` into ``epsilon``, which the stand-in does the same way.
    """
    batch = _batch(11, "ragged")
    level = "sequence" if loss_type == "luspo" else "token"
    base = dict(loss_type=loss_type, level=level, beta=0.0, is_kind="none", accum=1, threshold=None, quantile=1.0,
                coef=0.0, epsilon=0.2, epsilon_high=None, delta=None)
    changed = {**base, name: {"epsilon": 0.05, "epsilon_high": 0.05, "delta": 1.05}[name]}
    runs = []
    for s in (base, changed):
        s = {**s, "epsilon_high": s["epsilon"] if s["epsilon_high"] is None else s["epsilon_high"]}
        runs.append(_run_trl(batch, s))
    (loss_a, grad_a, _, metrics_a), (loss_b, grad_b, _, metrics_b) = runs
    return not (torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b) and metrics_a == metrics_b)


@pytest.mark.parametrize("loss_type,name", [(lt, n) for lt in LOSSES for n in CLIP_FIELDS])
def test_each_loss_type_declares_the_clip_fields_trl_reads_for_it(loss_type, name):
    """``LossType.reads`` is what TRL 1.16 reads: a declared field moves TRL's loss, any other leaves
    it unchanged (and ``GRPOConfig`` refuses it, ``test_config_fields_change_the_run.py``)."""
    assert _trl_changes(loss_type, name) == (name in LOSSES[loss_type].reads)


CONTROL_GRID = list(itertools.product(
    ["dapo", "grpo", "cispo", "vespo"],    # loss_type
    [None, 0.05],                          # off_policy_mask_threshold
    [1.0, 0.5, 0.2],                       # top_entropy_quantile
    [0.0, 0.01],                           # entropy_coef
    ["ragged", "empty_rows", "tool_spans"],  # mask
))


@pytest.mark.parametrize("loss_type,threshold,quantile,coef,mask_kind", CONTROL_GRID,
                         ids=["-".join(map(str, c)) for c in CONTROL_GRID])
def test_masks_and_entropy_bonus_match_trl(loss_type, threshold, quantile, coef, mask_kind):
    batch = _batch(13, mask_kind)
    settings = dict(loss_type=loss_type, level="token", beta=0.04, is_kind="tt", accum=2, epsilon_high=0.28,
                    threshold=threshold, quantile=quantile, coef=coef)
    _assert_same(_run_trl(batch, settings), _run_ours(batch, settings))


def test_grids_exercise_every_branch():
    """384 + 144 loss settings; the data really drops sequences and really clips."""
    assert len(LOSS_GRID) == 384 and len(CONTROL_GRID) == 144
    batch = _batch(13, "ragged")
    adv = batch["advantages"][:, None]
    from course_lib.ops.importance import off_policy_sequence_mask
    kept = off_policy_sequence_mask(adv, batch["logps"], batch["sampling"], batch["mask"], 0.05)
    assert 0 < kept.sum() < BATCH
    ratio = torch.exp(batch["logps"] - batch["old"])[batch["mask"].bool()]
    assert (ratio < 0.8).any() and (ratio > 1.28).any()


def test_adaptive_entropy_controller_matches_trl_over_steps():
    """Four optimizer steps of two micro-batches: the applied coefficient, the loss and the
    coefficient's trajectory agree with TRL's controller (entropy below, then above target)."""
    args = SimpleNamespace(delta=None, use_bias_correction_kl=True, steps_per_generation=2, entropy_target=0.6,
                           entropy_coef_delta=0.01, entropy_coef_max=0.05, entropy_coef_min=0.0, **SHAPE)
    accelerator = SingleProcessAccelerator()
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    fake = SimpleNamespace(aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
                           importance_sampling_level="token", beta=0.0, loss_type="dapo", epsilon_low=0.2,
                           epsilon_high=0.2, use_vllm=False, vllm_importance_sampling_correction=False,
                           model=SimpleNamespace(training=True), current_gradient_accumulation_steps=2,
                           max_completion_length=MAX_COMPLETION_LENGTH, accelerator=accelerator, entropy_coef=0.02,
                           use_adaptive_entropy=True, _entropy_bonus_enabled=True, _last_world_entropy=math.inf,
                           _entropy_window_stats=None, args=args, _metrics=metrics)
    config = GRPOConfig(entropy_coef=0.02, use_adaptive_entropy=True, entropy_target=0.6, entropy_coef_delta=0.01,
                        entropy_coef_max=0.05, gradient_accumulation_steps=2, per_device_train_batch_size=4,
                        num_generations=4)
    algorithm, scale = GRPO(), [0.1, 0.2, 0.1, 0.3, 2.0, 2.0, 0.2, 0.1]  # entropy level per micro-batch
    for micro, level in enumerate(scale):
        batch = _batch(micro, "ragged")
        batch["entropies"] = level * batch["entropies"]
        accelerator.sync_gradients = micro % 2 == 1
        logps = batch["logps"].clone().requires_grad_(True)
        entropies = batch["entropies"].clone().requires_grad_(True)
        fake._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropies, None)
        inputs = {"prompt_ids": torch.zeros(BATCH, 1, dtype=torch.long), "prompt_mask": torch.ones(BATCH, 1),
                  "completion_ids": torch.zeros(BATCH, LENGTH, dtype=torch.long), "completion_mask": batch["mask"],
                  "advantages": batch["advantages"], "num_items_in_batch": batch["mask"].sum() * 2,
                  "old_per_token_logps": batch["old"]}
        trl_loss = Trainer._compute_loss(fake, None, inputs)
        micro_batch = MicroBatch(old_logps=batch["old"], advantages=batch["advantages"], completion_mask=batch["mask"])
        out = algorithm.loss(micro_batch, PolicyOutputs(logps=batch["logps"].clone(), entropies=batch["entropies"]),
                             config, num_items_in_batch=batch["mask"].sum() * 2)
        torch.testing.assert_close(out.loss, trl_loss.detach(), **TOL)
        assert algorithm.entropy_control.coef == pytest.approx(fake.entropy_coef, abs=1e-12)
        if accelerator.sync_gradients:
            assert out.metrics["entropy_coef"] == pytest.approx(metrics["train"]["entropy_coef"][-1])
    assert metrics["train"]["entropy_coef"] == pytest.approx([0.03, 0.04, 0.03, 0.04])


def test_controller_bounds_and_state():
    control = AdaptiveEntropyCoef(0.0, adaptive=True, coef_min=0.0, coef_max=0.015, delta=0.01, target=1.0)
    assert control.coef_to_apply() == 0.0  # nothing measured yet: no bonus
    low = torch.full((2, 3), 0.5)
    for _ in range(3):
        control.observe(low, torch.ones(2, 3), end_of_step=True)
    assert control.coef == pytest.approx(0.015) and control.coef_to_apply() == pytest.approx(0.015)
    control.observe(torch.full((2, 3), 3.0), torch.ones(2, 3), end_of_step=True)
    assert control.coef == pytest.approx(0.005) and control.coef_to_apply() == 0.0  # above target: off
    restored = AdaptiveEntropyCoef(0.0, adaptive=True)
    restored.load_state(control.state())
    assert restored.coef == control.coef and restored.last_entropy == 3.0
