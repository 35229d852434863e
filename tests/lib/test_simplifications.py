"""The "Simplifications" sections of the library's docstrings, checked where a claim is mechanical.

Each module docstring that lists its simplifications (vs TRL or in general) is either in
``CHECKED``, with the sentence fragments whose claims a check below verifies, or in
``NOT_MECHANICAL`` with the reason no test can check it. A fragment that is edited away
fails here, so the check is revisited with the claim; a module that gains such a section
must be classified.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from decimal import Decimal

import pytest
import torch

import course_lib

# module -> (fragments of its Simplifications section, the test below that checks them)
CHECKED: dict[str, tuple[tuple[str, ...], str]] = {
    "course_lib.config.rl_config": (("no Hub, DeepSpeed or FSDP options", "in-loop evaluation limited to `eval_strategy` "
                           '"no" / "steps"', "`num_processes` is a field"), "config"),
    "course_lib.schedule": (("the table keeps them in order", "unless `shuffle_seed` is given"), "schedule"),
    "course_lib.trainer": (("the generation batch is consumed in order, not shuffled",), "trainer"),
    "course_lib.algos.grpo": (("no MoE auxiliary loss",), "grpo"),
    "course_lib.rollout.hf": (("the samples do not depend on ``batch_size`` or on which rows share a call",), "hf"),
    "course_lib.rollout.vllm_engine": (("vLLM's own LoRA serving is not used",), "vllm"),
    "course_lib.ops.masking": (("masks are treated as weights (any float works)",), "masking"),
    "course_lib.rewards.extract": (("fractions (``3/4``), words (\"seven\") and LaTeX (``\\\\frac{3}{4}``) are not "
                                    "recognised", "thousands commas", "is read exactly"), "extract"),
    "course_lib.reward_model": (("plain Adam on whole mini-batches (no accumulation, no scheduler)",), "reward_model"),
    "course_lib.tiny": (("characters instead of BPE merges",), "tiny"),
    "course_lib.widgets.normalization": (("one micro-batch, no gradient accumulation, one process",), "normalization"),
    "course_lib.algos.sft": (("packing packs the examples of a micro-batch, not the dataset into rows of "
                              "``max_length``", "no DFT loss"), "sft"),
    "course_lib.post_training.packing": (("a micro-batch packs the ``per_device_train_batch_size`` examples the "
                                          "sampler drew for it",), "sft"),
    "course_lib.algos.dpo": (("one loss type at a time (no ``loss_weights`` mixtures)",
                              "no ``ld_alpha``, ``use_weighting`` or precomputed reference log-probs"), "dpo"),
}

NOT_MECHANICAL: dict[str, str] = {
    "course_lib.ops.kl": "a statement about what the estimators estimate off-policy (maths, shown in lesson 03)",
    "course_lib.algos.ppo": "how logged statistics are averaged relative to the older trainers (a history claim)",
    "course_lib.rewards.execution": "sandbox start-up cost and isolation: measured by the sandbox's own tests",
    "course_lib.data": "what the templates test (a judgement about the task)",
    "course_lib.widgets.memory": "RSS precision (a measurement caveat)",
    "course_lib.algos.distill": "where the logits are materialised and how many processes run (an implementation "
                                "and memory statement, measured by the post-training tests' memory-free parity)",
}


def _sections() -> dict[str, str]:
    """Module name -> its docstring, for every module whose docstring has a Simplification(s) paragraph."""
    found = {}
    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        if ".sandbox." in info.name + "." or info.name.endswith("__main__"):
            continue
        path = importlib.util.find_spec(info.name).origin
        source = open(path, encoding="utf-8").read()
        doc = re.match(r'\s*(?:#.*\n\s*)*(?:r?"""(.*?)""")', source, re.S)
        if doc and re.search(r"\bSimplifications?\b", doc.group(1)):
            found[info.name] = " ".join(doc.group(1).split())
    return found


def test_every_simplifications_section_is_classified():
    sections = _sections()
    assert set(sections) == set(CHECKED) | set(NOT_MECHANICAL), (
        f"unclassified: {sorted(set(sections) - set(CHECKED) - set(NOT_MECHANICAL))}; "
        f"gone: {sorted((set(CHECKED) | set(NOT_MECHANICAL)) - set(sections))}")


@pytest.mark.parametrize("module", sorted(CHECKED))
def test_the_checked_sentences_are_still_in_the_docstring(module):
    text = _sections()[module]
    for fragment in CHECKED[module][0]:
        assert " ".join(fragment.split()) in text, f"{module}: {fragment!r} changed; revisit its check"


# ---------------------------------------------------------------------------------------
# The checks, one per module
# ---------------------------------------------------------------------------------------
def test_config_claims():
    from course_lib.algos import GRPOConfig, PPOConfig, RLOOConfig
    from course_lib.config import RLConfig

    for cls in (RLConfig, GRPOConfig, RLOOConfig, PPOConfig):
        names = [f.name for f in dataclasses.fields(cls)]
        assert not [n for n in names if re.search(r"hub|deepspeed|fsdp|ds3", n)], cls
        assert typing.get_args(typing.get_type_hints(cls)["eval_strategy"]) == ("no", "steps")
        assert "num_processes" in names


def test_schedule_claims():
    from course_lib.schedule import schedule_table

    rows = schedule_table(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=2, cycles=1)
    assert [p for row in rows for p in row.prompts] == [0, 0, 1, 1, 2, 2, 3, 3]  # in order
    shuffled = schedule_table(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=2,
                              cycles=1, shuffle_seed=0)
    order = [p for row in shuffled for p in row.prompts]
    assert sorted(order) == [0, 0, 1, 1, 2, 2, 3, 3] and order != sorted(order)


def test_trainer_claims():
    from course_lib.run.batches import GenerationBatch

    B, T = 8, 3
    batch = GenerationBatch(prompt_ids=torch.zeros(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
                            completion_ids=torch.arange(B).repeat_interleave(T).view(B, T),
                            completion_mask=torch.ones(B, T), advantages=torch.arange(B, dtype=torch.float32),
                            rows=list(range(100, 100 + B)), num_items_in_batch=B * T)
    for index in range(4):  # micro-batch i is rows [2i, 2i + 2): in order, no permutation
        micro = batch.micro_batch(index, 2)
        assert micro.rows == [100 + 2 * index, 101 + 2 * index]
        assert micro.advantages.tolist() == [2.0 * index, 2.0 * index + 1]
    source = inspect.getsource(importlib.import_module("course_lib.trainer"))
    assert "randperm" not in source and "shuffle_sequence_dict" not in source


def test_sft_claims():
    from course_lib.algos import SFTConfig

    from course_lib.post_training.packing import pack_micro_batches

    assert typing.get_args(typing.get_type_hints(SFTConfig)["loss_type"]) == ("nll",)  # no "dft"
    assert "packing_strategy" not in {f.name for f in dataclasses.fields(SFTConfig)}
    # five examples of 3 tokens in micro-batches of 2: three packed rows (2 + 2 + 1 examples), however short
    ones = torch.ones(5, 2, dtype=torch.long)
    packed = pack_micro_batches({"prompt_ids": ones[:, :1], "prompt_mask": ones[:, :1], "completion_ids": ones,
                                 "completion_mask": ones}, 2)
    assert packed["segment_ids"].tolist() == [[1, 1, 1, 2, 2, 2]] * 2 + [[1, 1, 1, 0, 0, 0]]


def test_dpo_claims():
    from course_lib.algos import DPOConfig

    names = {f.name for f in dataclasses.fields(DPOConfig)}
    assert not names & {"ld_alpha", "use_weighting", "precompute_ref_log_probs", "loss_weights"}
    assert isinstance(DPOConfig().loss_type, str)  # one loss type, not TRL's list


def test_grpo_claims():
    from course_lib.algos import GRPOConfig
    from course_lib.config.trl_fields import LEFT_OUT

    assert "router_aux_loss_coef" in LEFT_OUT
    assert "router_aux_loss_coef" not in {f.name for f in dataclasses.fields(GRPOConfig)}


def test_hf_claims():
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rollout import HFEngine, SamplingConfig

    model, tokenizer = load_policy("tiny")
    prompts = get_task("arithmetic", split="test", n=4)["prompt"]
    sampling = SamplingConfig(max_tokens=10, seed=5, temperature=1.0)
    whole = HFEngine(model, tokenizer).generate(prompts, 3, sampling).texts
    assert HFEngine(model, tokenizer, batch_size=2).generate(prompts, 3, sampling).texts == whole
    assert HFEngine(model, tokenizer, batch_size=5).generate(prompts, 3, sampling).texts == whole
    tail = HFEngine(model, tokenizer).generate(prompts[2:], 3, dataclasses.replace(sampling, first_row=6)).texts
    assert tail == whole[6:]  # a call holding only the last rows samples what the whole call did


def test_vllm_claims():
    source = open(importlib.util.find_spec("course_lib.rollout.vllm_engine").origin, encoding="utf-8").read()
    assert "LoRARequest" not in source and "enable_lora" not in source


def test_masking_claims():
    from course_lib.ops.masking import masked_mean, masked_sum

    x, weights = torch.tensor([[1.0, 2.0, 4.0]]), torch.tensor([[0.5, 1.0, 0.25]])
    assert masked_sum(x, weights).item() == pytest.approx(0.5 + 2.0 + 1.0)
    assert masked_mean(x, weights).item() == pytest.approx(3.5 / 1.75)


def test_extract_claims():
    from course_lib.rewards.extract import parse_number

    for text in ("3/4", "seven", "\\frac{3}{4}"):
        assert parse_number(text) is None, text
    assert parse_number("-1,234.5") == Decimal("-1234.5")
    assert parse_number("1e999999999") == Decimal("1e999999999")
    digits = "9" * 100_000
    assert parse_number(digits) == Decimal(digits)


def test_reward_model_claims():
    from course_lib.reward_model import train_reward_model

    parameters = set(inspect.signature(train_reward_model).parameters)
    assert not {p for p in parameters if "accum" in p or "schedul" in p or "process" in p}
    source = inspect.getsource(train_reward_model)
    assert "torch.optim.Adam(" in source and "lr_scheduler" not in source


def test_tiny_claims():
    from course_lib.tiny import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    for text in ("12+34=46", "The answer is 7."):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text) and [tokenizer.decode([i]) for i in ids] == list(text)


def test_normalization_claims():
    from course_lib.widgets.normalization import per_token_weights

    parameters = set(inspect.signature(per_token_weights).parameters)
    assert not {p for p in parameters if "accum" in p or "process" in p or "micro" in p}
