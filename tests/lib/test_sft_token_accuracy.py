"""SFT's ``mean_token_accuracy`` and ``num_tokens``, logged as TRL 1.16's ``SFTTrainer`` logs them.

The course's fused LM head returns no logits, so the argmax comes from a gradient-free second
pass of the head (:mod:`course_lib.ops.top1`). Checked against the argmax of the model's own
full logits, and end to end: the first logged step of a trainer run (its forward is before
any update) against ``SFTTrainer.compute_loss`` on TRL's own rows of the same conversations
(``num_tokens`` too: prompt and completion tokens, no padding, cumulative), packed or not.
"""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset

from course_lib.algos import make_config
from course_lib.algos.sft import token_accuracy
from course_lib.models import load_policy
from course_lib.ops.top1 import mean_token_accuracy
from course_lib.policy import completion_forward, position_ids_from_mask
from course_lib.post_training.conversations import conversation_batch
from course_lib.trainer import Trainer
from test_sft_conversations import CHATS, MARKED_CHATML, _trl_loss, _trl_rows

from trl.trainer.utils import add_fused_lm_head


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", dtype="float32")


@pytest.mark.parametrize("fused", [True, False])
def test_top1_is_the_argmax_of_the_full_logits(tiny, fused):
    model, tokenizer = tiny
    tensors, _ = conversation_batch(tokenizer, make_config("sft", assistant_only_loss=True), "cpu", CHATS,
                                    [0, 1, 2], None)
    attention = tensors["attention_mask"]
    with torch.no_grad():
        *_, top1 = completion_forward(model, tensors["prompt_ids"], tensors["prompt_mask"], tensors["completion_ids"],
                                      attention, fused=fused, chunk_size=7, with_top1=True)
        ids = torch.cat([tensors["prompt_ids"], tensors["completion_ids"]], 1)
        mask = torch.cat([tensors["prompt_mask"], attention], 1)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    start, width = tensors["prompt_ids"].shape[1] - 1, tensors["completion_ids"].shape[1]
    expected = (logits[:, start:start + width].argmax(-1) == tensors["completion_ids"]) & attention.bool()
    assert torch.equal(top1, expected)
    loss_mask = tensors["completion_mask"]
    accuracy = mean_token_accuracy(top1, loss_mask)
    assert accuracy == token_accuracy(logits[:, start:start + width], tensors["completion_ids"], loss_mask)
    assert 0.0 < accuracy < 1.0  # a case where the metric says something


@pytest.mark.parametrize("packing", [False, True])
def test_first_logged_step_matches_sft_trainers_metrics(tmp_path, tiny, packing):
    trl_model = copy.deepcopy(tiny[0]).train()  # TRL counts num_tokens in training mode only
    add_fused_lm_head(trl_model, outputs=("log_probs", "entropy", "is_top1"))
    trl_loss, trl_metrics = _trl_loss(trl_model, _trl_rows(tiny[0], tiny[1], MARKED_CHATML))

    config = make_config("sft", model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, seed=3,
                         per_device_train_batch_size=3, logging_steps=1, save_steps=0, assistant_only_loss=True,
                         packing=packing, output_dir=str(tmp_path / "run"))
    rows = Dataset.from_list([{"messages": chat} for chat in CHATS])
    history = Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False).train()
    first = history[0]
    assert first["mean_token_accuracy"] == pytest.approx(trl_metrics["mean_token_accuracy"], abs=1e-6)
    assert 0.0 < first["mean_token_accuracy"] < 1.0
    assert first["loss"] == pytest.approx(trl_loss.item(), rel=1e-5)
    assert first["entropy"] == pytest.approx(trl_metrics["entropy"], rel=1e-5)
    assert first["num_tokens"] == trl_metrics["num_tokens"]  # the 3 conversations' tokens
    assert history[1]["num_tokens"] == 2 * trl_metrics["num_tokens"]  # cumulative, as TRL's running total
