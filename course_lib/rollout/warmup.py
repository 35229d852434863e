"""Teach a model the call format before RL: scripted traces and supervised fine-tuning on them.

A model that never writes ``<tool_call>...`` gets no signal from a tool reward: every group
scores the same. The usual remedy is a short supervised warm-up on traces of a scripted
policy (the same recipe as the SFT stage before RL in DeepSeek-R1 or Tülu 3, here on tool
traces). Two pieces:

- :class:`ScriptedPolicy` is a rollout engine whose turns come from a Python function of the
  text so far. Run through :func:`~course_lib.rollout.agents.run_agent_rollouts` with the
  real tools, its traces have exactly the tokens and the ``tool_mask`` a model's own
  rollout would have (same template, same result tokens, same budget rules).
- :func:`scripted_traces` plays a scripted policy through the same :class:`~course_lib.rollout.tool_run.ToolRun`
  a training run builds (tools and/or ``environment_factory``: one environment per trace,
  ``reset(**row)``, its methods as tools), so environment tasks get traces too.
- :func:`supervised_warmup` minimises the negative log-likelihood of the trajectory's
  *model* tokens (``tool_mask`` 1) given the prompt and everything before them, tool results
  included as context but never as targets: the loss mask of the RL runs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .agents import AgentRollout


class ScriptedPolicy:
    """A rollout engine that writes ``respond(text_so_far)`` (then its end-of-turn token) each turn.

    ``text_so_far`` is the decoded prompt and trajectory (special tokens kept), which is all a
    script needs to decide its next turn; the returned text is tokenized once, as sampled
    tokens would be kept. Its "log-probs" are 0.
    """

    record_logps = True

    def __init__(self, tokenizer, respond: Callable[[str], str], context_limit: int | None = None):
        self.tokenizer, self.respond, self.context_limit = tokenizer, respond, context_limit
        self.eos_ids = [tokenizer.eos_token_id]

    def sync_weights(self, model) -> None:
        pass

    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling, seeds=None):
        outs = []
        for ids in prompt_ids:
            text = self.respond(self.tokenizer.decode(list(ids), skip_special_tokens=False))
            outs.append((self.tokenizer(text, add_special_tokens=False)["input_ids"] + self.eos_ids)[:sampling.max_tokens])
        return outs, [[0.0] * len(out) for out in outs]


def scripted_traces(tokenizer, respond: Callable[[str], str], dataset, *, tools: Sequence[Callable] | None = None,
                    environment_factory=None, max_tool_calling_iterations: int | None = 1,
                    max_completion_length: int = 128, tool_timeout: float | None = 30.0,
                    context_limit: int | None = None, chat_template_kwargs: dict | None = None) -> AgentRollout:
    """Traces of the scripted policy ``respond`` on every row of ``dataset`` (one batch).

    The rows are rendered, reset and rolled out exactly as the trainer does it with the same
    ``tools`` / ``environment_factory`` (TRL 1.16's meaning), so the traces carry the tokens,
    the ``tool_mask`` and the budget rules of a real rollout. ``dataset``: a ``datasets.Dataset``
    or a dict of columns, with a conversational ``prompt`` column and whatever ``reset`` reads.
    """
    from .base import SamplingConfig
    from .tool_run import ToolRun

    columns = {name: list(dataset[name]) for name in (dataset.column_names if hasattr(dataset, "column_names")
                                                     else dataset)}
    if not columns.get("prompt"):
        raise ValueError("scripted_traces needs a non-empty conversational 'prompt' column.")
    run = ToolRun(tools, environment_factory, tokenizer, columns, max_tool_calling_iterations=max_tool_calling_iterations,
                  tool_timeout=tool_timeout, max_completion_length=max_completion_length)
    engine = ScriptedPolicy(tokenizer, respond, context_limit=context_limit)
    rows = list(range(len(columns["prompt"])))
    sampling = SamplingConfig(max_tokens=max_completion_length, chat_template_kwargs=chat_template_kwargs)
    return run.rollout(engine, tokenizer, columns["prompt"], columns, rows, sampling).agent


def check_traces_fit(rollouts: Sequence[AgentRollout]) -> None:
    """Refuse traces that a budget cut: training on them teaches the model to stop mid-call.

    A trace that ended ``"length"`` (cut mid-turn) or ``"budget"`` (no room for a tool result)
    is not what the script meant to show; the usual cause is a ``max_completion_length`` too
    small for the script's turns plus the tool results.
    """
    stops = [t.stop for rollout in rollouts for t in rollout.trajectories]
    cut = [i for i, stop in enumerate(stops) if stop in ("length", "budget")]
    if cut:
        raise ValueError(f"{len(cut)} of {len(stops)} warm-up traces were cut by the token budget (trace {cut[0]} "
                         f"ended {stops[cut[0]]!r}); training on them teaches the model to stop mid-answer. Fix: "
                         "raise max_completion_length when building the traces (tool results count toward it), or "
                         "shorten the script's turns.")


def supervised_loss(model, rollout: AgentRollout) -> torch.Tensor:
    """Mean negative log-likelihood of the model tokens of ``rollout`` (``tool_mask`` 1), a scalar.

    The whole trajectory is attended to (``batch.completion_mask``); only tokens the policy
    would have written are targets. Shapes: prompt ``(B, P)``, completion ``(B, T)``.
    """
    from ..ops.masking import masked_mean
    from ..policy import completion_forward

    batch = rollout.batch
    device = next(model.parameters()).device
    logps, _, _ = completion_forward(model, batch.prompt_ids.to(device), batch.prompt_mask.to(device),
                                     batch.completion_ids.to(device), batch.completion_mask.to(device))
    loss_mask = (batch.completion_mask * rollout.tool_mask).to(device)
    return -masked_mean(logps.float(), loss_mask.float())


def supervised_warmup(model, rollouts: Sequence[AgentRollout], *, epochs: int = 1, learning_rate: float = 1e-3,
                      seed: int = 0, allow_cut: bool = False) -> list[float]:
    """AdamW on :func:`supervised_loss`, one step per rollout batch, ``epochs`` passes in a seeded
    order; returns the loss of every step. The model is left in training mode.

    Traces cut by the token budget are refused (:func:`check_traces_fit`) unless ``allow_cut``."""
    if not rollouts:
        raise ValueError("rollouts is empty: build traces with run_agent_rollouts(ScriptedPolicy(...), ...).")
    if not allow_cut:
        check_traces_fit(rollouts)
    if epochs < 1 or not learning_rate > 0:
        raise ValueError(f"epochs={epochs}, learning_rate={learning_rate}: use epochs >= 1 and a positive rate.")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    order_generator = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for _ in range(epochs):
        for index in torch.randperm(len(rollouts), generator=order_generator).tolist():
            loss = supervised_loss(model, rollouts[index])
            if not torch.isfinite(loss):
                raise FloatingPointError(f"supervised warm-up: non-finite loss on batch {index}; lower learning_rate.")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
