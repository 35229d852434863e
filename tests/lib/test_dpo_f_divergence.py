"""DPO's ``f_divergence_type`` (f-DPO), against a hand-worked pair and TRL 1.16's ``DPOTrainer``.

The TRL oracle is ``DPOTrainer._compute_loss`` run unbound on the per-token log-probs the
course's forward gives for the tiny model (policy and reference) on the pairs of
``test_losses_trl_parity_post_training.py``, which checks the forward itself against TRL's;
for each f-divergence and each loss type the loss, its gradient and ``rewards/*`` agree.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from course_lib.algos import make_config
from course_lib.algos.base import MicroBatch, PolicyOutputs
from course_lib.algos.dpo import DPO, DPOConfig, dpo_loss, f_divergence_scores
from course_lib.policy import completion_forward
from test_losses_trl_parity_post_training import COMPLETIONS, PAD, PROMPTS, REJECTED, _course_layout, _models, trl_dpo

DIVERGENCES = ["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"]


def test_scores_hand_worked():
    """Log-ratios u = +log 2 (chosen) and -log 2 (rejected), i.e. t = 2 and 1/2."""
    u = torch.tensor([math.log(2), -math.log(2)], dtype=torch.float64)
    expected = {"reverse_kl": [math.log(2), -math.log(2)],
                "forward_kl": [1 - 1 / 2, 1 - 2],                           # 1 - 1/t
                "js_divergence": [math.log(4 / 3), math.log(2 / 3)],        # log(2t / (1 + t))
                "alpha_divergence": [(2 ** -0.5 - 1) / -0.5, (2 ** 0.5 - 1) / -0.5]}  # (t^(a-1) - 1)/(a-1)
    for name, values in expected.items():
        torch.testing.assert_close(f_divergence_scores(u, name, 0.5), torch.tensor(values, dtype=torch.float64))
    torch.testing.assert_close(f_divergence_scores(u, "alpha_divergence", 1.0), u)  # alpha -> 1: the reverse KL
    # DPO's sigmoid loss on the pair with beta 0.5, forward KL: -log sigmoid(0.5 * (0.5 - (-1)))
    out = dpo_loss(u[:1], u[1:], torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), beta=0.5,
                   f_divergence_type="forward_kl")
    assert out.loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-0.75))), abs=1e-12)
    assert out.metrics["rewards/margins"] == pytest.approx(0.5 * 2 * math.log(2))  # rewards stay beta * log-ratio


def _reference_of(model, scale=0.01):
    """A reference near the policy: log-ratios of order 1, where exp(-u) (forward KL) and the alpha
    power stay of order 1 too (far apart, both sides' float32 rounding is amplified by exp(|u|))."""
    reference = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in reference.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return reference.eval()


class _GivenLogps:
    """A stand-in policy for ``DPOTrainer._compute_loss``: its forward returns the given per-token
    log-probs in TRL's layout, so TRL's loss arithmetic runs on exactly the course's inputs."""

    training = True

    def __init__(self, log_probs):
        self.log_probs = log_probs

    def __call__(self, **kwargs):
        zeros = torch.zeros_like(self.log_probs).detach()
        return SimpleNamespace(log_probs=self.log_probs, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool(),
                               log_sum_sq_probs=zeros, aux_loss=None)


def _trl_dpo(token_logps, ref_sums, loss_type, beta, divergence, alpha):
    """TRL's loss from the course's (8, T) per-token log-probs (rows c0, r0, c1, r1, ...) and the reference sums."""
    collator = trl_dpo.DataCollatorForPreference(pad_token_id=PAD)
    inputs = collator([{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}
                       for p, c, r in zip(PROMPTS, COMPLETIONS, REJECTED)])
    pairs = len(PROMPTS)
    ours_row = [2 * k for k in range(pairs)] + [2 * k + 1 for k in range(pairs)]  # TRL: chosen half, rejected half
    rows, cols, values = [], [], []
    for i, row in enumerate(ours_row):
        positions = inputs["completion_mask"][i].nonzero().flatten()
        rows += [i] * len(positions)
        cols += (positions - 1).tolist()  # position t scores token t + 1
        values.append(token_logps[row, :len(positions)])
    shape = (inputs["input_ids"].shape[0], inputs["input_ids"].shape[1] - 1)
    log_probs = token_logps.new_zeros(shape).index_put((torch.tensor(rows), torch.tensor(cols)), torch.cat(values))
    inputs["ref_chosen_logps"], inputs["ref_rejected_logps"] = ref_sums[0::2], ref_sums[1::2]
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    policy = _GivenLogps(log_probs)
    fake_self = SimpleNamespace(model=policy, ref_model=None, aux_loss_enabled=False,
                                accelerator=SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t,
                                                            gather_for_metrics=lambda t: t),
                                ld_alpha=None, precompute_ref_logps=True, f_divergence_type=divergence,
                                f_alpha_divergence_coef=alpha, loss_types=[loss_type], loss_weights=[1.0], beta=beta,
                                use_weighting=False, args=SimpleNamespace(gradient_checkpointing_kwargs=None),
                                _metrics=metrics, _total_train_tokens=0, _tp_size=1)
    loss = trl_dpo.DPOTrainer._compute_loss(fake_self, policy, inputs, return_outputs=False)
    loss.backward()
    return loss.detach(), {k: v[-1] for mode in ("train", "eval") for k, v in metrics[mode].items()}


@pytest.mark.parametrize("divergence", DIVERGENCES)
@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_loss_gradient_and_metrics_match_dpo_trainer(divergence, loss_type):
    """Identical per-token log-probs (the tiny model's, policy and a perturbed reference) into TRL's
    ``_compute_loss`` and the course's ``DPO.loss``: the loss, its gradient with respect to every
    token's log-prob (the rest of the backward is the shared forward) and ``rewards/*`` agree to 1e-6.
    float64, except ``alpha_divergence``: TRL's exponent clamp has entries for float16/bfloat16/float32 only,
    so that case runs in float32 (its gradient to 1e-5)."""
    model, _ = _models()
    reference = _reference_of(model)
    prompts = [p for p in PROMPTS for _ in range(2)]
    completions = [c for pair in zip(COMPLETIONS, REJECTED) for c in pair]
    prompt_ids, prompt_mask, completion_ids, completion_mask = _course_layout(prompts, completions)
    with torch.no_grad():
        logps = completion_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]
        ref_logps = completion_forward(reference, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]
    dtype = torch.float32 if divergence == "alpha_divergence" else torch.float64
    logps, ref_logps = logps.to(dtype) * completion_mask, ref_logps.to(dtype) * completion_mask
    beta, alpha = 0.5, 0.3
    theirs = logps.clone().requires_grad_(True)
    trl_loss, trl_metrics = _trl_dpo(theirs, ref_logps.sum(-1), loss_type, beta, divergence, alpha)

    ours = logps.clone().requires_grad_(True)
    config = DPOConfig(beta=beta, loss_type=loss_type, per_device_train_batch_size=8, f_divergence_type=divergence,
                       f_alpha_divergence_coef=alpha)
    micro = MicroBatch(completion_mask=completion_mask, advantages=torch.zeros(8), ref_logps=ref_logps)
    out = DPO().loss(micro, PolicyOutputs(logps=ours), config, num_items_in_batch=int(completion_mask.sum()))
    out.loss.backward()
    # float32 (alpha): the two sides sum the same float32 log-probs in different orders, ~1e-7 apart, which
    # IPO's square and the alpha power amplify to a few 1e-6 in the gradient; float64 holds 1e-6 exactly.
    tol = 1e-6 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(out.loss.detach(), trl_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.grad * completion_mask, theirs.grad * completion_mask, rtol=tol, atol=tol)
    assert ours.grad.abs().max() > 1e-3  # a gradient that says something
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert out.metrics[name] == pytest.approx(trl_metrics[name], rel=1e-6, abs=1e-6), name


def test_a_trainer_run_reads_the_divergence(tmp_path):
    from course_lib.trainer import Trainer
    from post_training_rows import pair_rows

    losses = {}
    for divergence in ("reverse_kl", "js_divergence"):
        config = make_config("dpo", model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, seed=3,
                             per_device_train_batch_size=4, logging_steps=1, save_steps=0,
                             f_divergence_type=divergence, output_dir=str(tmp_path / divergence))
        losses[divergence] = [row["loss"] for row in Trainer(config, None, pair_rows(), progress=False).train()]
    # policy == reference at step 1: every score is f'(1) - f'(1) = 0 and the sigmoid loss log 2 under both
    assert losses["reverse_kl"][0] == pytest.approx(math.log(2), abs=1e-6)
    assert losses["js_divergence"][0] == pytest.approx(math.log(2), abs=1e-6)
    assert losses["js_divergence"][1] != pytest.approx(losses["reverse_kl"][1], abs=1e-6)


def test_the_config_names_trls_fields_and_refuses_an_unknown_divergence():
    assert make_config("dpo").f_divergence_type == "reverse_kl" and make_config("dpo").f_alpha_divergence_coef == 0.5
    with pytest.raises(ValueError, match="f_divergence_type"):
        make_config("dpo", f_divergence_type="kl")
    trl_config = make_config("dpo", f_divergence_type="js_divergence", output_dir="/tmp/unused").to_trl_config()
    assert trl_config.f_divergence_type == "js_divergence"
