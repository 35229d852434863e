"""The supervised warm-up on scripted tool traces: its loss, its mask, and that it teaches the format."""

from __future__ import annotations

import re

import pytest
import torch

from course_lib.models import load_policy
from course_lib.rollout import HFEngine, SamplingConfig, tokenize_prompts
from course_lib.rollout.agents import run_agent_rollouts
from course_lib.rollout.tool_calls import TOOL_CHAT_TEMPLATE
from course_lib.rollout.tools import ToolBox
from course_lib.rollout.warmup import ScriptedPolicy, supervised_loss, supervised_warmup


def mul(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return a * b


def respond(text: str) -> str:
    """The scripted policy: call mul on the prompt's numbers, then repeat the tool's result."""
    if "<|im_start|>tool" not in text:
        a, b = re.findall(r"(\d+)\*(\d+)", text)[-1]
        return f'<tool_call>{{"name": "mul", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    return text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]


def _prompts(tokenizer, count, seed):
    generator = torch.Generator().manual_seed(seed)
    pairs = torch.randint(10, 99, (count, 2), generator=generator).tolist()
    return tokenize_prompts(tokenizer, [[{"role": "user", "content": f"{a}*{b}"}] for a, b in pairs])


def _traces(tokenizer, count, seed):
    prompt_ids = _prompts(tokenizer, count, seed)
    return run_agent_rollouts(ScriptedPolicy(tokenizer, respond, context_limit=128), tokenizer, prompt_ids,
                              [ToolBox([mul])] * count, SamplingConfig(max_tokens=100), max_tool_calling_iterations=1,
                              max_completion_length=104, chat_template=TOOL_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


def test_scripted_traces_are_rollouts_with_tool_masks(tiny):
    _, tokenizer = tiny
    rollout = _traces(tokenizer, 2, seed=0)
    trajectory = rollout.trajectories[0]
    assert (trajectory.calls, trajectory.failures, trajectory.stop) == (1, 0, "eos")
    a, b = trajectory.messages[0]["tool_calls"][0]["function"]["arguments"].values()
    assert trajectory.messages[1]["content"] == str(a * b) == trajectory.messages[2]["content"]
    assert 0 in trajectory.tool_mask and trajectory.tool_mask[-1] == 1


def test_supervised_loss_is_the_mean_nll_of_model_tokens(tiny):
    model, tokenizer = tiny
    rollout = _traces(tokenizer, 3, seed=1)
    with torch.no_grad():
        ours = supervised_loss(model, rollout)
    nll, count = 0.0, 0
    for row, trajectory in enumerate(rollout.trajectories):  # unpadded, one row at a time, by hand
        prompt = [t for t, m in zip(rollout.batch.prompt_ids[row].tolist(), rollout.batch.prompt_mask[row]) if m]
        ids = torch.tensor(prompt + trajectory.completion_ids)
        with torch.no_grad():
            logps = torch.log_softmax(model(ids[None]).logits[0, len(prompt) - 1:-1].float(), -1)
        for t, (token, trained) in enumerate(zip(trajectory.completion_ids, trajectory.tool_mask)):
            if trained:
                nll -= logps[t, token].item()
                count += 1
    assert ours.item() == pytest.approx(nll / count, rel=1e-5)


def test_warmup_teaches_the_call_format(tiny):
    """Measured on the tiny model: no greedy held-out first turn opens a call to mul before; after
    96 steps on 64 scripted traces all 32 do (loss 9.87 -> 0.24; none yet after 64 steps, all after
    72), but none copies both numbers of its prompt: it writes one memorised call. The format is
    learned, the arguments are not yet."""
    model, tokenizer = tiny
    import copy

    model = copy.deepcopy(model)
    held_out = _prompts(tokenizer, 32, seed=99)

    def opens_call():
        turns, _ = HFEngine(model, tokenizer).generate_from_ids(held_out, SamplingConfig(temperature=0, max_tokens=80))
        texts = [tokenizer.decode(t) for t in turns]
        exact = sum(text.startswith(respond(tokenizer.decode(p))) for text, p in zip(texts, held_out))
        print(f"exact calls (both numbers copied): {exact}/32")
        return sum(text.startswith('<tool_call>{"name": "mul", "arguments": {"a": ') for text in texts) / 32

    before = opens_call()
    losses = supervised_warmup(model, [_traces(tokenizer, 8, seed=s) for s in range(8)], epochs=12, learning_rate=3e-3)
    after = opens_call()
    print(f"call format: {before:.2f} -> {after:.2f} of held-out first turns; loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    assert before == 0.0 and after >= 0.75
    assert losses[-1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match="rollouts is empty"):
        supervised_warmup(model, [])
