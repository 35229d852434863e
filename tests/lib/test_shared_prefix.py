"""Greedy evaluation runs the prompts' common beginning once (course_lib.rollout.shared_prefix).

The answers must be those of plain ``generate`` on left-padded rows, token for token, on both
embedded models, and the decoder must have read the common prefix once instead of once a row.
"""

import pytest
import torch

from course_lib.data import get_task
from course_lib.evaluation import greedy_completions
from course_lib.models import ModelNotAvailableError, load_policy
from course_lib.rollout.base import left_pad, tokenize_prompts
from course_lib.rollout.shared_prefix import (MIN_SHARED_TOKENS, common_prefix_length, middle_pad,
                                              prefix_shared_inputs)

# Each model on the task it knows: the tiny model's prompts share their chat template's opening,
# SmolLM2's a system prompt and a worked example as well.
TASKS = {"tiny": "arithmetic", "smollm2-135m": "arithmetic-tagged"}


def test_common_prefix_length_by_hand():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix_length([[1, 2], [1, 2]]) == 2
    assert common_prefix_length([[7, 1], [1, 7]]) == 0
    assert common_prefix_length([[4, 5, 6]]) == 3
    assert common_prefix_length([]) == 0


def test_middle_pad_keeps_the_prefix_in_the_first_columns():
    ids, mask = middle_pad([[1, 2, 3, 4], [1, 2, 5], [1, 2]], prefix_length=2, pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4], [1, 2, 0, 5], [1, 2, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 0, 0]]


def _model(name):
    try:
        return load_policy(name)
    except ModelNotAvailableError as error:
        pytest.skip(str(error))


def _plain_answers(model, tokenizer, rows, max_new_tokens):
    """The reference: left padding, every row's prompt through the decoder."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, mask = left_pad(rows, pad_id)
    with torch.no_grad():
        output = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(output[:, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_shared_prefix_answers_equal_plain_generate_and_read_the_prefix_once(name):
    model, tokenizer = _model(name)
    model.eval()
    prompts = list(get_task(TASKS[name], split="test", n=4, seed=3)["prompt"])
    rows = tokenize_prompts(tokenizer, prompts)
    shared = common_prefix_length(rows)
    assert shared >= MIN_SHARED_TOKENS

    body = model.get_decoder()
    read = []  # (rows, tokens) of each decoder call
    hook = body.register_forward_pre_hook(lambda _, args, kwargs: read.append(tuple(kwargs["input_ids"].shape)),
                                          with_kwargs=True)
    try:
        answers = greedy_completions(model, tokenizer, prompts, max_new_tokens=8)
    finally:
        hook.remove()
    assert answers == _plain_answers(model, tokenizer, rows, 8)
    # the common prefix once, then each row's own tokens (padded to the longest), then one token a row a step
    width = max(len(row) for row in rows)
    assert read[0] == (1, shared)
    assert read[1] == (len(rows), width - shared)
    assert all(shape == (len(rows), 1) for shape in read[2:])


def test_rows_without_a_common_prefix_are_left_padded():
    model, tokenizer = _model("tiny")
    ids, mask, extra = prefix_shared_inputs(model, [[5, 6, 7], [8, 9]], pad_id=0, device="cpu")
    assert extra == {} and ids.tolist() == [[5, 6, 7], [0, 8, 9]] and mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    one_row = [list(range(3, 3 + 2 * MIN_SHARED_TOKENS))]
    assert prefix_shared_inputs(model, one_row, pad_id=0, device="cpu")[2] == {}  # nothing to share with


def test_the_engine_samples_what_it_samples_without_sharing(monkeypatch):
    """Distinct prompts through ``HFEngine.generate`` (n=1) and a turn through ``generate_from_ids``,
    sampled with per-row seeds: the same tokens and log-probs as with sharing turned off."""
    from course_lib.rollout import SamplingConfig, shared_prefix
    from course_lib.rollout.hf import HFEngine

    model, tokenizer = _model("tiny")
    prompts = list(get_task("arithmetic", split="test", n=6, seed=4)["prompt"])
    rows = tokenize_prompts(tokenizer, prompts)
    sampling = SamplingConfig(max_tokens=6, temperature=1.0, seed=11)

    def sample():
        engine = HFEngine(model, tokenizer)
        batch = engine.generate(prompts, n=1, sampling=sampling)
        turns, logps = engine.generate_from_ids(rows, sampling, seeds=list(range(len(rows))))
        return batch, turns, logps

    shared_batch, shared_turns, shared_logps = sample()
    monkeypatch.setattr(shared_prefix, "MIN_SHARED_TOKENS", 10**9)  # every call left-padded, nothing shared
    plain_batch, plain_turns, plain_logps = sample()
    assert torch.equal(shared_batch.completion_ids, plain_batch.completion_ids)
    assert torch.allclose(shared_batch.sampling_logps, plain_batch.sampling_logps, atol=1e-5)
    assert shared_turns == plain_turns
    assert all(torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5) for a, b in zip(shared_logps, plain_logps))


def test_the_benchmark_compares_both_arms_on_the_same_problems(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "shared_prefix.py"
    spec = importlib.util.spec_from_file_location("shared_prefix_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    result = benchmark.main(["--model", "tiny", "--task", "arithmetic", "--n", "8"])
    assert result["same_answers"] and result["common_prefix_tokens"] > 0
    assert set(result["cpu_s"]) == {"plain (left padding)", "shared prefix"}
    out = capsys.readouterr().out
    assert "the same 8 answers: True" in out and "x plain" in out


def test_a_cache_that_generate_builds_itself_turns_sharing_off():
    """A static cache asked for (the model's generation config or the call's) or a chunked
    prefill: generate must build that cache itself, so the rows are left-padded, nothing passed."""
    from transformers import GenerationConfig

    model, _ = _model("tiny")
    rows = [list(range(3, 20)) + [30], list(range(3, 20)) + [31, 32]]
    assert "past_key_values" in prefix_shared_inputs(model, rows, pad_id=0, device="cpu")[2]
    for asked in (GenerationConfig(cache_implementation="static"), GenerationConfig(prefill_chunk_size=4)):
        ids, mask, extra = prefix_shared_inputs(model, rows, pad_id=0, device="cpu", generation_config=asked)
        assert extra == {} and mask[1].tolist() == [1] * 19 and mask[0].tolist() == [0] + [1] * 18
    model.generation_config.cache_implementation = "static"
    try:
        assert prefix_shared_inputs(model, rows, pad_id=0, device="cpu")[2] == {}
    finally:
        model.generation_config.cache_implementation = None
