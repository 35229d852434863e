"""The course's tool templates in TRL 1.16: accepted at construction, and two training steps
of lesson 12's environment in TRL's ``GRPOTrainer`` on the CPU (in a child process, so TRL's
accelerate state never meets this process's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl_child import env_for_trl_child

from course_lib.models import load_policy
from course_lib.rollout.tool_calls import (COMPACT_TOOL_CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE, prepare_for_trl,
                                           tool_chat_template)

trl_utils = pytest.importorskip("trl.chat_template_utils")


@pytest.mark.parametrize("template", [TOOL_CHAT_TEMPLATE, COMPACT_TOOL_CHAT_TEMPLATE])
def test_trl_accepts_the_course_templates_once_prepared(template):
    tokenizer = load_policy("tiny")[1]
    assert not trl_utils.supports_tool_calling(tokenizer)  # the embedded ChatML template knows no tools
    tokenizer.chat_template = template
    assert trl_utils.supports_tool_calling(tokenizer) and trl_utils.is_chat_template_prefix_preserving(tokenizer)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        trl_utils.add_response_schema(tokenizer)  # why prepare_for_trl exists: TRL knows only its own list
    prepare_for_trl(tokenizer, template)
    assert tokenizer.response_template is not None
    assert tool_chat_template(tokenizer) is None  # this library now renders with the same template


def test_compact_template_is_the_default_for_small_contexts():
    tokenizer = load_policy("tiny")[1]
    assert tool_chat_template(tokenizer, context_limit=128) == COMPACT_TOOL_CHAT_TEMPLATE
    assert tool_chat_template(tokenizer, context_limit=8192) == TOOL_CHAT_TEMPLATE


def test_two_trl_steps_with_the_lessons_environment(tmp_path):
    script = Path(__file__).with_name("trl_tool_training.py")
    env = env_for_trl_child({**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                             "OMP_NUM_THREADS": "1"})
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert [row["step"] for row in result["rows"]] == [1, 2]
    for row in result["rows"]:  # TRL's tool metrics and the environment's reward, logged under its class name
        assert {"tools/call_frequency", "tools/failure_frequency", "rewards/MultiplyDesk/mean"} <= set(row)
    assert result["chat_template"] == COMPACT_TOOL_CHAT_TEMPLATE
    assert result["seen"] and all(isinstance(c, list) and c[0]["role"] == "assistant" for c in result["seen"])


class Lockers:
    """Four tools: the case whose full tool list does not fit the tiny model's 128 positions."""

    def reset(self, **row):
        self.opened = []

    def open_locker(self, name: str) -> str:
        """Open a locker.

        Args:
            name: the locker
        """
        self.opened.append(name)
        return "empty"

    def list_lockers(self) -> str:
        """List the lockers."""
        return "a b c"

    def knock(self, name: str) -> str:
        """Knock on a locker.

        Args:
            name: the locker
        """
        return "hollow"

    def leave(self) -> str:
        """Leave the room."""
        return "bye"

    def get_reward(self) -> float:
        return float(bool(self.opened))


def test_tiny_model_rollouts_use_the_compact_template_and_fit():
    from course_lib.rollout import HFEngine, SamplingConfig
    from course_lib.rollout.tool_run import ToolRun

    model, tokenizer = load_policy("tiny")
    assert model.config.max_position_embeddings == 128
    columns = {"prompt": [[{"role": "user", "content": "Open one."}]]}
    run = ToolRun(None, Lockers, tokenizer, columns, max_tool_calling_iterations=2, tool_timeout=5,
                  max_completion_length=24)
    full = tokenizer.apply_chat_template(columns["prompt"][0], tools=[Lockers().open_locker, Lockers().list_lockers,
                                                                       Lockers().knock, Lockers().leave],
                                         chat_template=TOOL_CHAT_TEMPLATE, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    assert len(full) + 24 > 128  # the full template would not fit
    engine = HFEngine(model, tokenizer, record_logps=False)
    rollout = run.rollout(engine, tokenizer, columns["prompt"], columns, [0], SamplingConfig(max_tokens=24))
    prompt = tokenizer.decode([t for t in rollout.agent.batch.prompt_ids[0].tolist() if t != tokenizer.pad_token_id])
    assert prompt.startswith("<|im_start|>system\ntools: knock(name) leave() list_lockers() open_locker(name)")
    assert run.template_for(engine) == COMPACT_TOOL_CHAT_TEMPLATE
