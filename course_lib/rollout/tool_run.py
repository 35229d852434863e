"""A training run with tools: everything the trainer needs, built and checked at construction.

``Trainer(..., tools=[...], environment_factory=...)`` builds one :class:`ToolRun`. It checks
what can be checked before the first step (every tool has a schema, prompts are
conversations, the chat template can render tools, the ``environment`` column names only
known environments) and, each generation cycle, makes the rollouts' environments, resets
them with their dataset rows, renders each prompt with the tools its rollout may call and
runs :func:`~course_lib.rollout.agents.run_agent_rollouts`.

As in TRL 1.16: ``reset(**row)`` receives the whole dataset row (the ``environment`` column
left out when a dict of factories chooses by it) and its text, if any, is appended to the
prompt's last message; reward functions receive ``environments=`` (one instance per
completion) and, for conversational prompts, each completion as its list of messages
(assistant turns and tool results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from .agents import AgentRollout, run_agent_rollouts, tool_metrics
from .base import SamplingConfig, check_context, tokenize_prompts
from .tool_calls import (COMPACT_CONTEXT, COMPACT_TOOL_CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE, tool_chat_template,
                         tool_schema)
from .tools import Environments, ToolBox, append_observation, public_methods


@dataclass
class ToolRollout:
    """One cycle's multi-turn rollouts, with what the rewards and metrics read."""

    agent: AgentRollout
    completions: list            # per completion: its messages (conversational prompts)
    reward_kwargs: dict          # {"environments": [...]} when the run has environments
    environment_index: torch.Tensor  # (B,) which environment each completion used (0 for a single one)


class ToolRun:
    """Tools and environments of a run (see the module doc).

    Args:
        tools: standalone tool functions, offered to every rollout.
        environment_factory: ``None``, a callable making an environment, or a dict of them
            chosen per row by the ``environment`` column.
        tokenizer: the policy's tokenizer (its template, or the course's tool template).
        columns: the training dataset's columns, ``{name: list of values}``.
        max_tool_calling_iterations, tool_timeout, max_completion_length: from the config.
    """

    def __init__(self, tools: Sequence[Callable] | None, environment_factory, tokenizer,
                 columns: Mapping[str, list], *, max_tool_calling_iterations: int | None,
                 tool_timeout: float | None, max_completion_length: int):
        self.tools = list(tools or [])
        for tool in self.tools:
            tool_schema(tool)
        ToolBox(self.tools, timeout=tool_timeout)  # refuses duplicate names and a bad timeout now
        self.environments = None if environment_factory is None else Environments(environment_factory)
        prompts = columns.get("prompt", [])
        bad = next((i for i, p in enumerate(prompts) if not _is_conversation(p)), None)
        if bad is not None:
            raise ValueError(f"train_dataset row {bad}: a run with tools needs conversational prompts (lists of "
                             "{'role', 'content'} messages), since the chat template writes the tools into the "
                             "prompt. Fix: wrap each prompt as [{'role': 'user', 'content': text}].")
        if self.environments is not None and self.environments.multiple:
            if "environment" not in columns:
                raise ValueError("environment_factory is a dict, so every row must name its environment: "
                                 "train_dataset has no 'environment' column. Fix: add one, or pass one factory.")
            self.environments.check_names(columns["environment"])
        self.template = tool_chat_template(tokenizer)
        self.max_iterations, self.timeout = max_tool_calling_iterations, tool_timeout
        self.max_completion_length = max_completion_length
        self.environment_names = (list(self.environments.factories) if self.environments is not None else [None])

    def template_for(self, engine) -> str | None:
        """The template this engine's rollouts render with: the compact tool template instead of
        ``TOOL_CHAT_TEMPLATE`` when the engine's model reads at most ``COMPACT_CONTEXT`` positions
        (the tiny model's 128: the full tool list would not fit)."""
        limit = getattr(engine, "context_limit", None)
        if self.template == TOOL_CHAT_TEMPLATE and limit is not None and limit <= COMPACT_CONTEXT:
            return COMPACT_TOOL_CHAT_TEMPLATE
        return self.template

    def reward_functions(self) -> list[Callable]:
        """The environments' ``get_reward`` as reward functions, one per class (weight 1)."""
        return [] if self.environments is None else self.environments.reward_functions()

    def rollout(self, engine, tokenizer, prompts: list, columns: Mapping[str, list], rows: Sequence[int],
                sampling: SamplingConfig) -> ToolRollout:
        """Multi-turn rollouts for ``prompts`` (one per completion; ``rows``: their dataset rows)."""
        count = len(prompts)
        multiple = self.environments is not None and self.environments.multiple
        names = list(columns["environment"]) if multiple else [None] * count
        instances = self.environments.instances(names) if self.environments is not None else [None] * count
        if self.environments is not None:
            row_dicts = [{"prompt": prompts[i], **{k: v[i] for k, v in columns.items()
                                                   if not (multiple and k == "environment")}} for i in range(count)]
            observations = Environments.reset(instances, row_dicts, rows, timeout=self.timeout)
            prompts = [append_observation(p, o) for p, o in zip(prompts, observations)]
        tool_lists = [self.tools + (public_methods(e) if e is not None else []) for e in instances]
        kwargs = dict(sampling.chat_template_kwargs or {})
        template = self.template_for(engine)
        prompt_ids = []
        for prompt, tools in zip(prompts, tool_lists):
            prompt_ids += tokenize_prompts(tokenizer, [prompt], sampling.max_prompt_length,
                                           {**kwargs, "tools": tools or None, "chat_template": template})
        check_context(prompt_ids, self.max_completion_length, getattr(engine, "context_limit", None))
        agent = run_agent_rollouts(engine, tokenizer, prompt_ids, [ToolBox(t, self.timeout) for t in tool_lists],
                                   sampling, max_tool_calling_iterations=self.max_iterations,
                                   max_completion_length=self.max_completion_length, chat_template=template)
        index = torch.tensor([self.environment_names.index(n) for n in names])
        return ToolRollout(agent=agent, completions=[t.messages for t in agent.trajectories],
                           reward_kwargs={"environments": instances} if self.environments is not None else {},
                           environment_index=index)

    def metrics(self, rollout: ToolRollout, rewards: torch.Tensor, gather: Callable) -> dict:
        """TRL's tool metrics and, with several environments, each one's mean reward
        (``environments/<name>/reward``), over the whole generation batch: ``gather`` collects a
        ``(B,)`` tensor from every process."""
        agent = rollout.agent
        metrics = tool_metrics(gather(agent.calls), gather(agent.failures), gather(agent.capped))
        if self.environments is not None and self.environments.multiple:
            rewards, environment_index = gather(rewards), gather(rollout.environment_index)
            for i, name in enumerate(self.environment_names):
                chosen = rewards[environment_index == i]
                if len(chosen):
                    metrics[f"environments/{name}/reward"] = torch.nanmean(chosen.float()).item()
        return metrics


def _is_conversation(prompt) -> bool:
    return isinstance(prompt, list) and len(prompt) > 0 and all(isinstance(m, dict) for m in prompt)


def setup_tools(config, reward_funcs: list, tools, environment_factory, tokenizer, columns):
    """``(tool_run or None, reward functions, their weights)`` for a trainer.

    No reward source is refused, unless the config's algorithm learns without rewards (SFT, DPO,
    distillation: their configs' ``NEEDS_REWARD_FUNCS`` is False).

    An environment's ``get_reward`` comes after ``reward_funcs`` with weight 1 (TRL 1.16);
    ``config.reward_weights`` covers ``reward_funcs`` only. Making the probe environments
    leaves the global random stream as it was, so a run's initialisation does not depend on them.
    """
    run = None
    if tools or environment_factory is not None:
        with torch.random.fork_rng():
            run = ToolRun(tools, environment_factory, tokenizer, columns,
                          max_tool_calling_iterations=config.max_tool_calling_iterations,
                          tool_timeout=config.tool_timeout, max_completion_length=config.max_completion_length)
        if getattr(config, "dynamic_sampling", False):
            raise ValueError("dynamic_sampling=True: refilling groups does not carry tool trajectories yet. Fix: set "
                             "dynamic_sampling=False for a run with tools or environment_factory.")
        if config.eval_strategy != "no":
            raise ValueError(f"eval_strategy={config.eval_strategy!r}: in-loop evaluation runs single-turn and cannot "
                             "score tool runs. Fix: set eval_strategy='no' and evaluate after training.")
    environment_rewards = [] if run is None else run.reward_functions()
    if not reward_funcs and not environment_rewards and getattr(config, "NEEDS_REWARD_FUNCS", True):
        raise ValueError("no reward source: pass reward_funcs, or an environment_factory whose environment defines "
                         "get_reward().")
    weights = list(config.check_reward_weights(len(reward_funcs))) if reward_funcs else []
    return run, list(reward_funcs) + environment_rewards, weights + [1.0] * len(environment_rewards)
