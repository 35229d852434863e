"""The vLLM rollout engine on the tiny model: weight sync, sampling log-probs, seeds.

One engine for the whole module (starting vLLM takes tens of seconds on CPU). Every test
that pushes other weights puts the checkpoint's back afterwards, so the order of the
tests does not matter. The reference for every log-prob is a forward pass of the Hugging
Face model on the unpadded prompt + completion.
"""

import copy

import pytest
import torch

from course_lib.data import get_task
from course_lib.models import load_policy, resolve_model_path
from course_lib.rollout import HFEngine, SamplingConfig, vllm_available
from test_rollout_hf import SAMPLING_CASES, check_batch_layout, reference_logps

# find_spec, not import: importing vLLM takes seconds even when these tests are deselected.
# xdist_group keeps the module on one worker under `--dist loadgroup` (one engine start).
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm_engine"),
              pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (optional engine)")]

# float32, two different kernel sets: measured gaps are ~6e-6 on the checkpoint's weights and up
# to ~3e-4 on the perturbed ones (median 0; the largest on tokens with log-prob below -9).
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def setup():
    from course_lib.rollout.vllm_engine import VLLMEngine

    model, tokenizer = load_policy("tiny")
    set_num_threads = torch.set_num_threads
    engine = VLLMEngine(resolve_model_path("tiny"), tokenizer, kv_cache_gib=0.25, seed=0)
    yield {"engine": engine, "model": model, "tokenizer": tokenizer, "set_num_threads": set_num_threads}
    engine.shutdown()


@pytest.fixture()
def engine(setup):
    yield setup["engine"]
    setup["engine"].sync_weights(setup["model"])  # back to the checkpoint's weights


@pytest.fixture(scope="module")
def prompts():
    return get_task("arithmetic", split="test", n=4)["prompt"]


def perturbed(model, scale=0.05, seed=0):
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in noisy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)
    return noisy


def max_logp_gap(model, batch, **settings):
    return (batch.sampling_logps - reference_logps(model, batch, **settings)).abs().max().item()


def test_layout_masks_and_eos(engine, setup, prompts):
    for max_tokens in (12, 2):
        batch = engine.generate(prompts, 3, SamplingConfig(max_tokens=max_tokens, seed=0))
        check_batch_layout(batch, setup["tokenizer"], prompts, n=3)
    assert not batch.is_eos.all() and batch.completion_ids.shape[1] == 2


@pytest.mark.parametrize("settings", SAMPLING_CASES)
def test_sampling_logps_are_the_processed_distribution(engine, setup, prompts, settings):
    batch = engine.generate(prompts, 3, SamplingConfig(max_tokens=10, seed=1, **settings))
    assert max_logp_gap(setup["model"], batch, **settings) < TOLERANCE


def test_sync_weights_of_a_perturbed_model(engine, setup, prompts):
    model, tokenizer = setup["model"], setup["tokenizer"]
    noisy = perturbed(model)
    sampling = SamplingConfig(temperature=0.8, max_tokens=10, seed=2)
    before = engine.generate(prompts, 2, sampling)
    assert max_logp_gap(noisy, before, temperature=0.8) > 0.05  # the engine still has the checkpoint's weights

    engine.sync_weights(noisy)
    after = engine.generate(prompts, 2, sampling)
    assert max_logp_gap(noisy, after, temperature=0.8) < TOLERANCE

    greedy = SamplingConfig(temperature=0, max_tokens=12)
    vllm_greedy = engine.generate(prompts, 1, greedy)
    hf_greedy = HFEngine(noisy, tokenizer).generate(prompts, 1, greedy)
    assert vllm_greedy.completion_ids.tolist() == hf_greedy.completion_ids.tolist()
    torch.testing.assert_close(vllm_greedy.sampling_logps, hf_greedy.sampling_logps, atol=TOLERANCE, rtol=0)


def test_sync_weights_merges_lora_adapters(engine, setup, prompts):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(copy.deepcopy(setup["model"]),
                                LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:  # B starts at zero; make the adapter matter
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    weights_before = {name: p.detach().clone() for name, p in peft_model.named_parameters()}

    sampling = SamplingConfig(temperature=0.9, max_tokens=10, seed=3)
    assert max_logp_gap(peft_model, engine.generate(prompts, 2, sampling), temperature=0.9) > 0.05
    engine.sync_weights(peft_model)
    assert max_logp_gap(peft_model, engine.generate(prompts, 2, sampling), temperature=0.9) < TOLERANCE
    for name, parameter in peft_model.named_parameters():  # the trainer's weights are untouched
        assert torch.equal(parameter, weights_before[name]), name


def test_seeds_reproducible_and_distinct_per_completion(engine, prompts):
    sampling = SamplingConfig(temperature=1.5, max_tokens=8, seed=11)
    first = engine.generate(prompts, 4, sampling)
    again = engine.generate(prompts, 4, sampling)
    assert first.completion_ids.tolist() == again.completion_ids.tolist()

    # The same prompt twice in one call: each copy has its own seeds, so the draws differ
    # (one shared seed would make them identical).
    twice = engine.generate([prompts[0], prompts[0]], 4, sampling)
    assert twice.completion_ids[:4].tolist() != twice.completion_ids[4:].tolist()
    # A prompt's completions do not depend on the other prompts of the call.
    alone = engine.generate([prompts[0], prompts[2]], 4, sampling)
    assert alone.completion_ids[:4].tolist() == first.completion_ids[:4].tolist()

    unseeded = SamplingConfig(temperature=1.5, max_tokens=8)
    assert engine.generate(prompts, 4, unseeded).completion_ids.tolist() != \
        engine.generate(prompts, 4, unseeded).completion_ids.tolist()


def test_engine_start_leaves_the_process_usable(setup):
    assert torch.set_num_threads is setup["set_num_threads"]
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1


def test_a_prompt_past_the_positions_is_refused_by_both_engines_alike(engine, setup):
    """vLLM refuses a prompt longer than its context on its own; HF would run past the trained
    positions. Both refuse it first, with the same message, and both fit it with max_prompt_length."""
    from course_lib.rollout import ContextLengthError, PromptTruncationWarning

    prompt = "What is " + " + ".join(str(i) for i in range(60)) + "?"  # ~240 tokens, 128 positions
    hf = HFEngine(setup["model"], setup["tokenizer"])
    messages = []
    for each in (engine, hf):
        with pytest.raises(ContextLengthError, match=r"at most 128\. Fix: set max_prompt_length <= 120") as caught:
            each.generate([prompt], 2, SamplingConfig(max_tokens=8, seed=0))
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    for each in (engine, hf):
        with pytest.warns(PromptTruncationWarning):
            batch = each.generate([prompt], 2, SamplingConfig(max_tokens=8, seed=0, max_prompt_length=100))
        assert batch.prompt_ids.shape[1] == 100


def _add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first term
        b: second term
    """
    return a + b


def test_token_level_turns_draw_what_a_single_turn_call_draws(engine, setup, prompts):
    from course_lib.rollout.base import row_seed, tokenize_prompts

    sampling = SamplingConfig(temperature=1.0, max_tokens=8, seed=11, first_row=3)
    batch = engine.generate(list(prompts), 1, sampling)
    ids = tokenize_prompts(setup["tokenizer"], list(prompts))
    turns, logps = engine.generate_from_ids(ids, sampling, [row_seed(sampling, r) for r in range(len(ids))])
    for row, (turn, turn_logps) in enumerate(zip(turns, logps)):
        length = int(batch.completion_mask[row].sum())
        assert turn == batch.completion_ids[row, :length].tolist()
        torch.testing.assert_close(torch.tensor(turn_logps), batch.sampling_logps[row, :length])


def test_multi_turn_rollout_on_vllm_reads_the_tool_result(engine, setup, prompts):
    """After a (scripted) tool call, vLLM continues from the trajectory's ids: the log-probs it
    reports for its own tokens are those of the HF model reading prompt, call and result."""
    from course_lib.rollout.agents import run_agent_rollouts
    from course_lib.rollout.base import tokenize_prompts
    from course_lib.rollout.tool_calls import TOOL_CHAT_TEMPLATE
    from course_lib.rollout.tools import ToolBox

    tokenizer, model = setup["tokenizer"], setup["model"]
    call = '<tool_call>{"name": "_add", "arguments": {"a": 1, "b": 2}}</tool_call>'

    class FirstTurnCalls:
        eos_ids, context_limit, record_logps = engine.eos_ids, engine.context_limit, True

        def __init__(self):
            self.turn = 0

        def generate_from_ids(self, ids, sampling, seeds=None):
            self.turn += 1
            if self.turn == 1:
                out = [tokenizer(call, add_special_tokens=False)["input_ids"] + self.eos_ids for _ in ids]
                return out, [[0.0] * len(o) for o in out]
            return engine.generate_from_ids(ids, sampling, seeds)

    prompt_ids = tokenize_prompts(tokenizer, list(prompts)[:2])
    out = run_agent_rollouts(FirstTurnCalls(), tokenizer, prompt_ids, [ToolBox([_add])] * 2,
                             SamplingConfig(temperature=1.0, max_tokens=100, seed=5), max_tool_calling_iterations=1,
                             max_completion_length=100, chat_template=TOOL_CHAT_TEMPLATE)
    reference = reference_logps(model, out.batch, temperature=1.0)
    for row, trajectory in enumerate(out.trajectories):
        assert trajectory.calls == 1 and trajectory.messages[1]["content"] == "3"
        first_tool = trajectory.tool_mask.index(0)
        answer = [t for t in range(first_tool, len(trajectory.tool_mask)) if trajectory.tool_mask[t] == 1]
        assert answer, "vLLM wrote no tokens after the tool result"
        torch.testing.assert_close(out.batch.sampling_logps[row, answer], reference[row, answer],
                                   atol=TOLERANCE, rtol=0)
