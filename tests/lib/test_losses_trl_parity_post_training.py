"""Parity with TRL 1.16 for SFT, DPO and on-policy distillation, on identical inputs.

The oracle is TRL's own code, called on the same model weights or the same tensors:

- SFT: ``SFTTrainer.compute_loss`` runs unbound on a stand-in ``self`` with a copy of the
  tiny model patched by TRL's ``add_fused_lm_head``, on the batch TRL's own collator builds
  (prompt + completion right-padded, labels -100 on the prompt); ours runs
  ``completion_forward`` on the course's layout (left-padded prompt, right-padded
  completion) and :func:`sft_loss`. Loss, every parameter's gradient and the logged
  ``entropy`` / ``mean_token_accuracy`` agree to 1e-6, with a ``num_items_in_batch`` that
  spans two micro-batches (gradient accumulation) too.
- DPO: ``DPOTrainer._compute_loss`` the same way, with a reference model that differs from
  the policy, for ``sigmoid``, ``hinge`` and ``ipo``; ours is the :class:`DPO` algorithm's
  loss on interleaved (chosen, rejected) rows; the loss, the gradients and every
  ``rewards/*`` and ``logps/*`` metric agree.
- Distillation: TRL's ``_chunked_divergence_loss`` on hidden states and LM-head weights;
  ours is :func:`generalized_jsd` on the logits they make, for beta 0, 0.5 and 1 and a
  temperature; loss, the gradients of the hidden states and head, and the entropy agree.
"""

from __future__ import annotations

import copy
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl_stand_ins import SingleProcessAccelerator

from course_lib.algos.base import MicroBatch, PolicyOutputs
from course_lib.algos.distill import generalized_jsd
from course_lib.algos.dpo import DPO, DPOConfig
from course_lib.algos.sft import sft_loss, token_accuracy
from course_lib.models import load_policy
from course_lib.ops.logprobs import entropy_from_logits
from course_lib.policy import completion_forward
from course_lib.rollout.base import left_pad

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl_sft = pytest.importorskip("trl.trainer.sft_trainer")
    trl_dpo = pytest.importorskip("trl.trainer.dpo_trainer")
    trl_distill = pytest.importorskip("trl.trainer.distillation_trainer")
    from trl.trainer.utils import add_fused_lm_head

TOL = dict(rtol=1e-6, atol=1e-6)
PAD = 0


class _Accelerator(SingleProcessAccelerator):
    parallelism_config = None


# Prompts and completions of different lengths, as token ids of the tiny character model.
PROMPTS = [[2, 10, 11, 12, 13], [2, 14, 15], [2, 16, 17, 18, 19, 20, 21], [2, 22]]
COMPLETIONS = [[30, 31, 3], [32, 3], [33, 34, 35, 36, 3], [37, 38, 3]]
REJECTED = [[40, 3], [41, 42, 43, 3], [44, 3], [45, 46, 47, 48, 49, 3]]


def _models():
    model, _ = load_policy("tiny", dtype="float32")
    model = model.double().eval()  # float64: a whole network's gradients, summed in two orders, still agree to 1e-6
    model.config.dtype = torch.float64
    return model, copy.deepcopy(model)


def _course_layout(prompts, completions):
    prompt_ids, prompt_mask = left_pad(prompts, PAD)
    width = max(map(len, completions))
    completion_ids = torch.full((len(completions), width), PAD)
    completion_mask = torch.zeros((len(completions), width), dtype=torch.long)
    for i, c in enumerate(completions):
        completion_ids[i, :len(c)] = torch.tensor(c)
        completion_mask[i, :len(c)] = 1
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_same_grads(ours, theirs):
    """Every parameter's gradient, to 1e-6 relative to its largest entry: TRL's fused LM head sums in float32
    whatever the model's dtype, so a gradient of size 10 (IPO's) carries float32 rounding of ~1e-5."""
    assert ours.keys() == theirs.keys()
    for name in ours:
        scale = max(1.0, theirs[name].abs().max().item())
        torch.testing.assert_close(ours[name], theirs[name].to(ours[name].dtype), rtol=1e-6, atol=1e-6 * scale,
                                   msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------------------------------
# SFT
# ---------------------------------------------------------------------------------------
def _trl_sft(model, rows, num_items_in_batch):
    collator = trl_sft.DataCollatorForLanguageModeling(pad_token_id=PAD)
    inputs = collator([{"input_ids": p + c, "labels": [-100] * len(p) + c} for p, c in rows])
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    fake_self = SimpleNamespace(model=model, aux_loss_enabled=False, accelerator=_Accelerator(),
                                compute_loss_func=None, label_smoother=None,
                                args=SimpleNamespace(loss_type="nll", average_tokens_across_devices=True),
                                get_tp_size=lambda: 1, _metrics=metrics, _total_train_tokens=0, _tp_size=1)
    loss = trl_sft.SFTTrainer.compute_loss(fake_self, model, inputs, num_items_in_batch=num_items_in_batch)
    loss.backward()
    return loss.detach(), {k: v[-1] for mode in ("train", "eval") for k, v in metrics[mode].items()}


@pytest.mark.parametrize("window", ["one_micro_batch", "half_of_an_accumulation_window"])
def test_sft_loss_gradient_and_metrics_match_sft_trainer(window):
    ours_model, trl_model = _models()
    add_fused_lm_head(trl_model, outputs=("log_probs", "entropy", "is_top1"))
    rows = list(zip(PROMPTS, COMPLETIONS))
    tokens = sum(len(c) for c in COMPLETIONS)
    num_items = None if window == "one_micro_batch" else tokens + 7  # another micro-batch holds 7 more tokens
    trl_model.train(False)
    trl_loss, trl_metrics = _trl_sft(trl_model, rows, None if num_items is None else torch.tensor(num_items))

    prompt_ids, prompt_mask, completion_ids, completion_mask = _course_layout(PROMPTS, COMPLETIONS)
    logps, _, entropies = completion_forward(ours_model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                             with_entropy=True)
    loss = sft_loss(logps, completion_mask, num_items)
    loss.backward()
    torch.testing.assert_close(loss.detach().double(), trl_loss.double(), **TOL)
    _assert_same_grads(_grads(ours_model), _grads(trl_model))
    mask = completion_mask.float()
    entropy = ((entropies.detach() * mask).sum() / mask.sum()).item()
    assert entropy == pytest.approx(trl_metrics["entropy"], abs=1e-6)
    with torch.no_grad():  # mean_token_accuracy, from the same model's logits
        ids = torch.cat([prompt_ids, completion_ids], 1)
        attention = torch.cat([prompt_mask, completion_mask], 1)
        from course_lib.policy import position_ids_from_mask

        logits = ours_model(input_ids=ids, attention_mask=attention,
                            position_ids=position_ids_from_mask(attention)).logits
        start = prompt_ids.shape[1] - 1
        accuracy = token_accuracy(logits[:, start:start + completion_ids.shape[1]], completion_ids, completion_mask)
    assert accuracy == pytest.approx(trl_metrics["mean_token_accuracy"], abs=1e-6)


def test_sft_gradient_accumulation_normalisation_equals_one_big_batch():
    """Two micro-batches divided by the window's tokens sum to the gradient of the whole batch's token mean."""
    model, whole = _models()
    prompt_ids, prompt_mask, completion_ids, completion_mask = _course_layout(PROMPTS, COMPLETIONS)
    total = int(completion_mask.sum())
    for rows in (slice(0, 1), slice(1, 4)):  # uneven micro-batches: 3 tokens, then 13
        logps, _, _ = completion_forward(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows],
                                         completion_mask[rows])
        sft_loss(logps, completion_mask[rows], total).backward()
    logps, _, _ = completion_forward(whole, prompt_ids, prompt_mask, completion_ids, completion_mask)
    sft_loss(logps, completion_mask).backward()
    _assert_same_grads(_grads(model), _grads(whole))


# ---------------------------------------------------------------------------------------
# DPO
# ---------------------------------------------------------------------------------------
def _reference_of(model):
    reference = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return reference.eval()


def _trl_dpo(model, reference, loss_type, beta):
    collator = trl_dpo.DataCollatorForPreference(pad_token_id=PAD)
    inputs = collator([{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}
                       for p, c, r in zip(PROMPTS, COMPLETIONS, REJECTED)])
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    fake_self = SimpleNamespace(model=model, ref_model=reference, aux_loss_enabled=False,
                                accelerator=SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t,
                                                            gather_for_metrics=lambda t: t),
                                ld_alpha=None, precompute_ref_logps=False, f_divergence_type="reverse_kl",
                                loss_types=[loss_type], loss_weights=[1.0], beta=beta, use_weighting=False,
                                args=SimpleNamespace(gradient_checkpointing_kwargs=None), _metrics=metrics,
                                _total_train_tokens=0, _tp_size=1)
    loss = trl_dpo.DPOTrainer._compute_loss(fake_self, model, inputs, return_outputs=False)
    loss.backward()
    return loss.detach(), {k: v[-1] for mode in ("train", "eval") for k, v in metrics[mode].items()}


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_gradient_and_metrics_match_dpo_trainer(loss_type, beta):
    ours_model, trl_model = _models()
    reference = _reference_of(ours_model)
    trl_reference = copy.deepcopy(reference)
    add_fused_lm_head(trl_model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    add_fused_lm_head(trl_reference)
    trl_loss, trl_metrics = _trl_dpo(trl_model, trl_reference, loss_type, beta)

    # The course's layout: pairs as groups of two rows, chosen then rejected.
    prompts = [p for p in PROMPTS for _ in range(2)]
    completions = [c for pair in zip(COMPLETIONS, REJECTED) for c in pair]
    prompt_ids, prompt_mask, completion_ids, completion_mask = _course_layout(prompts, completions)
    with torch.no_grad():
        ref_logps, _, _ = completion_forward(reference, prompt_ids, prompt_mask, completion_ids, completion_mask)
    logps, _, entropies = completion_forward(ours_model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                             with_entropy=True)
    config = DPOConfig(beta=beta, loss_type=loss_type, per_device_train_batch_size=8)
    micro = MicroBatch(completion_mask=completion_mask, advantages=torch.zeros(8), ref_logps=ref_logps)
    out = DPO().loss(micro, PolicyOutputs(logps=logps, entropies=entropies), config,
                     num_items_in_batch=int(completion_mask.sum()))
    out.loss.backward()
    torch.testing.assert_close(out.loss.detach().double(), trl_loss.double(), **TOL)
    _assert_same_grads(_grads(ours_model), _grads(trl_model))
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
                 "logps/rejected", "entropy"):
        assert out.metrics[name] == pytest.approx(trl_metrics[name], rel=1e-6, abs=1e-6), name


# ---------------------------------------------------------------------------------------
# On-policy distillation
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 0.2])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("num_items", [None, 23])
def test_generalized_jsd_matches_distillation_trainer(beta, temperature, num_items):
    gen = torch.Generator().manual_seed(1)
    batch, length, hidden, vocab = 3, 5, 8, 11
    h_s = torch.randn(batch, length, hidden, generator=gen, dtype=torch.float64).float()
    h_t = torch.randn(batch, length, hidden, generator=gen).float()
    w_s, w_t = torch.randn(vocab, hidden, generator=gen), torch.randn(vocab, hidden, generator=gen)
    mask = torch.ones(batch, length)
    mask[1, 3:] = 0
    mask[2, :] = 0  # a row without completion tokens
    theirs_h, theirs_w = h_s.clone().requires_grad_(True), w_s.clone().requires_grad_(True)
    trl_loss, trl_entropy_sum, trl_count = trl_distill._chunked_divergence_loss(
        theirs_h, h_t, theirs_w, w_t, mask, beta, num_items_in_batch=num_items, temperature=temperature)
    trl_loss.backward()

    ours_h, ours_w = h_s.clone().requires_grad_(True), w_s.clone().requires_grad_(True)
    loss, per_token = generalized_jsd(ours_h @ ours_w.T, h_t @ w_t.T, mask, beta, temperature, num_items)
    loss.backward()
    torch.testing.assert_close(loss.detach(), trl_loss.detach(), **TOL)
    torch.testing.assert_close(ours_h.grad, theirs_h.grad, **TOL)
    torch.testing.assert_close(ours_w.grad, theirs_w.grad, **TOL)
    entropy = (entropy_from_logits((h_s @ w_s.T) / temperature) * mask).sum()
    torch.testing.assert_close(entropy, trl_entropy_sum.detach(), **TOL)
    assert int(trl_count) == int(mask.sum())
    assert bool((per_token[mask == 0] == 0).all())


def test_generalized_jsd_ends_are_the_two_kls_and_the_middle_is_the_jsd():
    """Hand-worked: two distributions over two tokens, p_s = (0.5, 0.5), p_t = (0.9, 0.1)."""
    import math

    student = torch.log(torch.tensor([[[0.5, 0.5]]]))
    teacher = torch.log(torch.tensor([[[0.9, 0.1]]]))
    mask = torch.ones(1, 1)
    reverse = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    forward = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    m = (0.7, 0.3)
    jsd = 0.5 * (0.9 * math.log(0.9 / m[0]) + 0.1 * math.log(0.1 / m[1])) + \
        0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1]))
    for beta, expected in ((1.0, reverse), (0.0, forward), (0.5, jsd)):
        assert generalized_jsd(student, teacher, mask, beta)[0].item() == pytest.approx(expected, abs=1e-6)
