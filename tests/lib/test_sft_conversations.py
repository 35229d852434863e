"""SFT on whole conversations (``messages`` rows), with TRL 1.16's ``assistant_only_loss``.

The assistant mask comes from rendering prefixes of the conversation
(:mod:`course_lib.post_training.conversations`). It is checked on a hand-worked case, and
against TRL's own: ``SFTTrainer`` builds its dataset (tokens and labels) from the same
conversations through a chat template with ``{% generation %}`` markers around what the
assistant writes (TRL's Llama-3 training convention), for the tiny model's ChatML template and
for SmolLM2's (its default system turn included); then ``SFTTrainer.compute_loss`` on TRL's
rows and the course's loss on its own layout agree in loss and gradients to 1e-6.
"""

from __future__ import annotations

import copy
import math
import tempfile
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from accelerate.state import AcceleratorState
from datasets import Dataset
from trl_stand_ins import SingleProcessAccelerator

from course_lib.algos import make_config
from course_lib.algos.sft import sft_loss
from course_lib.models import cache_dir, load_policy
from course_lib.policy import completion_forward
from course_lib.post_training.conversations import conversation_batch, tokenize_conversation
from course_lib.trainer import Trainer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl = pytest.importorskip("trl")
    trl_sft = pytest.importorskip("trl.trainer.sft_trainer")
    from trl.trainer.utils import add_fused_lm_head

TOL = dict(rtol=1e-6, atol=1e-6)

CHATS = [
    [{"role": "user", "content": "1+2?"}, {"role": "assistant", "content": "3"},
     {"role": "user", "content": "4+5?"}, {"role": "assistant", "content": "9"}],
    [{"role": "system", "content": "add"}, {"role": "user", "content": "7+7?"},
     {"role": "assistant", "content": "14"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"},
     {"role": "user", "content": "10+1?"}, {"role": "assistant", "content": "11"}],
]

# The tiny model's ChatML template with TRL's markers around what the assistant writes after the
# opened turn: its content and end of turn.
_TURN = ("{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% generation %}"
         "{{ message['content'] + '<|im_end|>\\n' }}{% endgeneration %}{% else %}"
         "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}")
_OPEN = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
MARKED_CHATML = "{% for message in messages %}" + _TURN + "{% endfor %}" + _OPEN
MARKED_SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                  "Face<|im_end|>\\n' }}{% endif %}" + _TURN + "{% endfor %}" + _OPEN)


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", dtype="float32")


def _smollm2_tokenizer():
    folder = cache_dir() / "smollm2-135m-instruct-fp32"
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("SmolLM2's converted folder is not in the cache (it is made by load_policy('smollm2-135m'))")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_hand_worked_assistant_mask(tiny):
    """The tiny tokenizer spells every character as a token and each special token as one:
    ``<|im_start|>user\\n1+2?<|im_end|>\\n`` is tokens 0-11, ``<|im_start|>assistant\\n`` 12-22,
    the answer ``3``, ``<|im_end|>``, ``\\n`` 23-25; the second user turn 26-37, the second
    header 38-48, and ``9<|im_end|>\\n`` 49-51."""
    ids, mask = tokenize_conversation(tiny[1], CHATS[0])
    assert len(ids) == 52
    assert [i for i, m in enumerate(mask) if m] == [23, 24, 25, 49, 50, 51]
    assert tiny[1].decode([ids[i] for i in (23, 24, 25)]) == "3<|im_end|>\n"
    ids_all, every = tokenize_conversation(tiny[1], CHATS[0], assistant_only=False)
    assert ids_all == ids and every == [1] * 52


def _trl_rows(model, tokenizer, template):
    """TRL's own tokens and labels for CHATS: ``SFTTrainer`` preparing its dataset."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = template
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as folder:
        warnings.simplefilter("ignore")
        args = trl.SFTConfig(output_dir=folder, assistant_only_loss=True, report_to=[], max_steps=1,
                             per_device_train_batch_size=len(CHATS), use_cpu=True, bf16=False)
        trainer = trl.SFTTrainer(model=copy.deepcopy(model), args=args, processing_class=tokenizer,
                                 train_dataset=Dataset.from_list([{"messages": c} for c in CHATS]))
    # accelerate keeps one process-wide state: a later course Trainer must not inherit TRL's settings
    AcceleratorState._reset_state(reset_partial_state=True)
    return [(row["input_ids"], row["labels"]) for row in trainer.train_dataset]


def _ours_labels(tokenizer):
    out = []
    for chat in CHATS:
        ids, mask = tokenize_conversation(tokenizer, chat)
        out.append((ids, [t if m and i > 0 else -100 for i, (t, m) in enumerate(zip(ids, mask))]))
    return out


def test_assistant_mask_equals_trls_generation_markers(tiny):
    assert _ours_labels(tiny[1]) == _trl_rows(tiny[0], tiny[1], MARKED_CHATML)


def test_assistant_mask_equals_trls_on_smollm2s_template(tiny):
    tokenizer = _smollm2_tokenizer()
    ours = _ours_labels(tokenizer)
    assert ours == _trl_rows(tiny[0], tokenizer, MARKED_SMOLLM2)
    assert sum(t != -100 for _, labels in ours for t in labels) > 0


def _trl_loss(model, rows):
    """``SFTTrainer.compute_loss`` (unbound, one process) on TRL's collated rows."""
    collator = trl_sft.DataCollatorForLanguageModeling(pad_token_id=0)
    inputs = collator([{"input_ids": ids, "labels": labels} for ids, labels in rows])
    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    accelerator = SingleProcessAccelerator()
    accelerator.parallelism_config = None
    fake_self = SimpleNamespace(model=model, aux_loss_enabled=False, accelerator=accelerator,
                                compute_loss_func=None, label_smoother=None,
                                args=SimpleNamespace(loss_type="nll", average_tokens_across_devices=True),
                                get_tp_size=lambda: 1, _metrics=metrics, _total_train_tokens=0, _tp_size=1)
    loss = trl_sft.SFTTrainer.compute_loss(fake_self, model, inputs)
    loss.backward()
    return loss.detach(), {k: v[-1] for mode in ("train", "eval") for k, v in metrics[mode].items()}


def _double(model):
    model = copy.deepcopy(model).double().eval()
    model.config.dtype = torch.float64
    return model


def test_multi_turn_loss_and_gradients_equal_sft_trainers(tiny):
    ours_model, trl_model = _double(tiny[0]), _double(tiny[0])
    add_fused_lm_head(trl_model, outputs=("log_probs", "entropy", "is_top1"))
    trl_loss, _ = _trl_loss(trl_model, _trl_rows(tiny[0], tiny[1], MARKED_CHATML))

    config = make_config("sft", assistant_only_loss=True)
    tensors, metrics = conversation_batch(tiny[1], config, "cpu", CHATS, list(range(len(CHATS))), None)
    logps, _, _ = completion_forward(ours_model, tensors["prompt_ids"], tensors["prompt_mask"],
                                     tensors["completion_ids"], tensors["attention_mask"])
    loss = sft_loss(logps, tensors["completion_mask"])
    loss.backward()
    assert metrics["num_completion_tokens"] == 6 + 4 + 10  # each answer, <|im_end|> and a newline
    torch.testing.assert_close(loss.detach(), trl_loss.double(), **TOL)
    theirs = dict(trl_model.named_parameters())
    for name, p in ours_model.named_parameters():
        scale = max(1.0, theirs[name].grad.abs().max().item())
        torch.testing.assert_close(p.grad, theirs[name].grad.double(), rtol=1e-6, atol=1e-6 * scale)


def test_trainer_learns_the_assistant_turns_of_messages_only_rows(tmp_path, tiny):
    rows = Dataset.from_list([{"messages": CHATS[i % 3]} for i in range(8)])
    config = make_config("sft", model_name_or_path="tiny", max_steps=3, learning_rate=1e-3,
                         per_device_train_batch_size=4, logging_steps=1, save_steps=0, seed=3,
                         assistant_only_loss=True, output_dir=str(tmp_path / "chat"))
    trainer = Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False)
    history = trainer.train()
    assert len(history) == 3 and all(math.isfinite(r["loss"]) for r in history)
    batch = trainer.batch  # the user's turns are read (attention) but not trained on (loss mask)
    assert bool((batch.completion_mask <= batch.attention_mask).all())
    assert int(batch.attention_mask.sum()) > int(batch.completion_mask.sum())


def test_assistant_only_loss_needs_conversations(tmp_path, tiny):
    rows = Dataset.from_list([{"prompt": "1+2=", "completion": "3"}] * 4)
    config = make_config("sft", model_name_or_path="tiny", max_steps=1, per_device_train_batch_size=4,
                         assistant_only_loss=True, output_dir=str(tmp_path / "text"), save_steps=0)
    with pytest.raises(ValueError, match="assistant_only_loss=True needs conversations"):
        Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False)


def test_a_conversation_without_an_assistant_message_is_refused(tmp_path, tiny):
    rows = Dataset.from_list([{"messages": CHATS[0]}] * 3 + [{"messages": CHATS[0][:1]}])
    config = make_config("sft", model_name_or_path="tiny", max_steps=1, per_device_train_batch_size=4,
                         output_dir=str(tmp_path / "none"), save_steps=0)
    with pytest.raises(ValueError, match="row 3: the conversation has no non-empty assistant message"):
        Trainer(config, None, rows, copy.deepcopy(tiny[0]), tiny[1], progress=False)
