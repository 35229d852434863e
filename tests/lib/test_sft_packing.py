"""SFT's ``packing=True`` in the trainer's loop (:mod:`course_lib.post_training.packing`).

A packed micro-batch (its examples end to end in one row, positions restarting at each
example, a block-diagonal causal mask) must give the unpacked micro-batch's loss and
gradients, since every example is scored as if alone; and no token may attend across
examples: changing one example's tokens leaves every other example's log-probs unchanged.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from datasets import Dataset

from course_lib.algos import make_config
from course_lib.algos.sft import sft_loss
from course_lib.models import load_policy
from course_lib.policy import completion_forward, position_ids_from_segments
from course_lib.post_training.conversations import conversation_batch
from course_lib.post_training.packing import pack_micro_batches
from course_lib.run.dataset_batches import supervised_batch
from course_lib.trainer import Trainer
from post_training_rows import sft_rows
from test_sft_conversations import CHATS

PROMPTS = ["What is 2 + 3? ", "7 - 4 = ", "Add 10 and 15 please: ", "1+1="]
COMPLETIONS = ["5", "3", "25", "2"]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", dtype="float32")


def _forward_loss(model, tensors, num_items):
    logps, _, _ = completion_forward(model, tensors["prompt_ids"], tensors["prompt_mask"], tensors["completion_ids"],
                                     tensors.get("attention_mask", tensors["completion_mask"]),
                                     segment_ids=tensors.get("segment_ids"))
    loss = sft_loss(logps, tensors["completion_mask"], num_items)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, logps


def _batches(tokenizer):
    config = make_config("sft", assistant_only_loss=True)
    text, _ = supervised_batch(tokenizer, config, "cpu", PROMPTS, COMPLETIONS, list(range(4)), None)
    chats, _ = conversation_batch(tokenizer, config, "cpu", CHATS, list(range(3)), None)
    return {"prompt/completion rows": text, "conversations": chats}


@pytest.mark.parametrize("kind", ["prompt/completion rows", "conversations"])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_a_packed_step_has_the_unpacked_steps_loss_and_gradients(tiny, kind, size):
    tensors = _batches(tiny[1])[kind]
    rows = tensors["prompt_ids"].shape[0]
    num_items = int(tensors["completion_mask"].sum())  # the window: every micro-batch's trained tokens
    packed = pack_micro_batches(tensors, size)
    assert packed["prompt_ids"].shape[0] == math.ceil(rows / size)
    assert int(packed["completion_mask"].sum()) == num_items
    plain_model, packed_model = copy.deepcopy(tiny[0]).double(), copy.deepcopy(tiny[0]).double()
    plain_loss, plain_grads, _ = _forward_loss(plain_model, tensors, num_items)
    packed_loss = 0.0
    for m in range(packed["prompt_ids"].shape[0]):  # micro-batches: one packed row each, grads accumulate
        loss, packed_grads, _ = _forward_loss(packed_model, {k: v[m:m + 1] for k, v in packed.items()}, num_items)
        packed_loss += loss
    torch.testing.assert_close(packed_loss, plain_loss, rtol=1e-6, atol=1e-6)
    assert packed_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-6, atol=1e-6, msg=lambda m: f"{name}: {m}")


def test_no_attention_crosses_examples(tiny):
    """Example 1's tokens replaced by others: examples 2-4 of the packed row score exactly as before."""
    tensors = _batches(tiny[1])["prompt/completion rows"]
    packed = pack_micro_batches(tensors, 4)
    segments = packed["segment_ids"][0]
    changed = {k: v.clone() for k, v in packed.items()}
    first = (segments == 1).nonzero().flatten()
    changed["prompt_ids"][0, 0] = 50
    changed["completion_ids"][0, first[1:] - 1] = 60  # every other token of example 1
    model = copy.deepcopy(tiny[0]).double()
    with torch.no_grad():
        logps = completion_forward(model, packed["prompt_ids"], packed["prompt_mask"], packed["completion_ids"],
                                   packed["attention_mask"], segment_ids=packed["segment_ids"])[0][0]
        again = completion_forward(model, changed["prompt_ids"], changed["prompt_mask"], changed["completion_ids"],
                                   changed["attention_mask"], segment_ids=changed["segment_ids"])[0][0]
    # completion position t scores token t + 1 from token t: within examples 2-4 only (an example's first
    # token is scored from the previous example's last, which no loss mask ever trains)
    others = (segments[1:] > 1) & (segments[1:] == segments[:-1])
    assert bool((packed["completion_mask"][0][segments[1:] != segments[:-1]] == 0).all())
    assert bool((logps[others] == again[others]).all())
    assert not torch.allclose(logps[segments[1:] == 1], again[segments[1:] == 1])  # example 1 itself did change
    # and the positions restart at each example
    positions = position_ids_from_segments(packed["segment_ids"])[0]
    starts = [0] + [int(i) for i in (segments[1:] != segments[:-1]).nonzero().flatten() + 1]
    assert all(int(positions[s]) == 0 for s in starts)


def test_the_trainer_packs_and_trains_as_without_packing(tmp_path, tiny):
    def run(packing):
        config = make_config("sft", model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, seed=3,
                             per_device_train_batch_size=4, gradient_accumulation_steps=2, logging_steps=1,
                             save_steps=0, packing=packing, output_dir=str(tmp_path / f"packing-{packing}"))
        trainer = Trainer(config, None, sft_rows(16), copy.deepcopy(tiny[0]), tiny[1], progress=False)
        return trainer, trainer.train()

    packed_trainer, packed = run(True)
    _, plain = run(False)
    assert packed_trainer.batch.segment_ids is not None and packed_trainer.batch.prompt_ids.shape[0] == 2
    for a, b in zip(packed, plain):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
        assert a["num_tokens"] == b["num_tokens"]


def test_packing_reads_messages_rows_too(tmp_path, tiny):
    rows = Dataset.from_list([{"messages": CHATS[i % 3]} for i in range(8)])
    config = make_config("sft", model_name_or_path="tiny", max_steps=1, per_device_train_batch_size=4, seed=3,
                         assistant_only_loss=True, packing=True, save_steps=0, output_dir=str(tmp_path / "chat"))
    trainer = Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False)
    assert math.isfinite(trainer.train()[0]["loss"])


def test_a_packed_run_resumes_exactly(tmp_path, tiny):
    from course_lib.run.history import WALL_CLOCK_KEYS

    rows = Dataset.from_list([{"messages": CHATS[i % 3]} for i in range(8)])

    def trainer(folder):
        config = make_config("sft", model_name_or_path="tiny", max_steps=4, save_steps=2, learning_rate=1e-3, seed=3,
                             per_device_train_batch_size=2, gradient_accumulation_steps=2, logging_steps=1,
                             assistant_only_loss=True, packing=True, output_dir=str(tmp_path / folder))
        return Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False)

    full = trainer("full")
    full_history = full.train()
    resumed = trainer("resumed")
    resumed_history = resumed.train(resume_from=tmp_path / "full" / "checkpoint-2")

    def comparable(row):
        return {k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS and k not in ("tokens/s", "eps")}

    assert [comparable(r) for r in resumed_history[2:]] == [comparable(r) for r in full_history[2:]]
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
