"""Multi-turn rollouts: the model calls tools, reads their results, and goes on.

One completion is a whole *trajectory*: the model's turns and, between them, the tool
results the environment wrote. The loop, for every rollout at once (rows that finished
drop out)::

    ids = prompt
    repeat:
        turn = engine.generate_from_ids(ids)      # until the end-of-turn token or the budget
        append turn                               # tool_mask 1: the model wrote these
        calls = parse_assistant_turn(turn)        # <tool_call>{...}</tool_call> blocks, read as TRL reads them
        if no calls, or the turn was cut, or max_tool_calling_iterations rounds done: stop
        (a turn with a malformed block is plain text: no calls, as in TRL 1.16)
        results = run each call                   # failures become error results
        append tokenize(results + next turn's header)   # tool_mask 0: the environment wrote these

Token in, token out: the ids the engine sampled are kept as they are and the result text is
tokenized once and appended; nothing already in the trajectory is decoded and re-encoded
(decoding happens only to *read* a turn). Re-encoding text need not give back the sampled
ids (a tokenizer may merge characters across a boundary differently), and then the
log-probs the trainer computes would be of tokens the model never sampled.

Budget: tool-result tokens count toward ``max_completion_length`` as in TRL 1.16; a result
too long for what is left is cut (with a marker saying how many tokens were dropped); when
not even an empty result and one more model token fit, the trajectory ends before the
results, which are not appended (``stop="budget"``).

Each :class:`Trajectory` records how it ended: ``"eos"`` (the model answered without a call),
``"length"`` (cut at the budget mid-turn), ``"iteration_cap"`` (it still called tools after
``max_tool_calling_iterations`` rounds; those last calls are not run), ``"budget"`` (above).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .base import SEED_MODULUS, RolloutBatch, SamplingConfig, pad_token_id, row_seed
from .tool_calls import parse_assistant_turn, result_suffix_text
from .tools import ToolBox, ToolResult

STOP_REASONS = ("eos", "length", "iteration_cap", "budget")
# Turn t of row r is drawn with seed row_seed(r) + t * _TURN_STRIDE: turn 0 is what a
# single-turn rollout draws, and later turns never reuse another row's or turn's seed.
_TURN_STRIDE = 0x9E3779B97F4A7C15 % SEED_MODULUS
TRUNCATION_MARK = " ...[{dropped} tokens cut]"
#: More characters than any tokenizer puts in one token on average: a result is cut to
#: ``(room + 1) * CHARS_PER_TOKEN`` characters before it is tokenized.
CHARS_PER_TOKEN = 32


@dataclass
class Trajectory:
    """One multi-turn completion.

    Attributes:
        completion_ids: every token after the prompt, model and tool alike.
        tool_mask: 1 for tokens the model sampled, 0 for tool-result tokens (TRL's ``tool_mask``).
        logps: the sampler's log-prob of each token (0.0 on tool tokens), when recorded.
        messages: the trajectory as chat messages (assistant turns, with ``tool_calls``, and
            ``tool`` results), the form TRL hands conversational reward functions.
        segments: ``(kind, text)`` pieces in order, kind ``"model"`` or ``"tool"``, for display.
        calls, failures: tool calls made and how many of them failed.
        rounds: rounds of tool results appended (one per tool-calling turn whose calls ran).
        stop: how it ended, one of :data:`STOP_REASONS`.
    """

    completion_ids: list[int] = field(default_factory=list)
    tool_mask: list[int] = field(default_factory=list)
    logps: list[float] | None = None
    messages: list[dict] = field(default_factory=list)
    segments: list[tuple[str, str]] = field(default_factory=list)
    calls: int = 0
    failures: int = 0
    rounds: int = 0
    stop: str = "eos"

    def display_text(self) -> str:
        """The model's text with each tool result marked ``[tool: ...]``."""
        return "".join(text if kind == "model" else f"[tool: {text}]" for kind, text in self.segments)


@dataclass
class AgentRollout:
    """A batch of trajectories as padded tensors: a :class:`RolloutBatch` plus the tool bookkeeping.

    ``batch.completion_mask`` is the *attention* mask (1 on every trajectory token, tool
    results included: the model must read them); ``tool_mask`` ``(B, T)`` is 1 on model tokens;
    the loss mask is their product.
    """

    batch: RolloutBatch
    tool_mask: torch.Tensor
    trajectories: list[Trajectory]

    @property
    def calls(self) -> torch.Tensor:
        return torch.tensor([t.calls for t in self.trajectories], dtype=torch.float32)

    @property
    def failures(self) -> torch.Tensor:
        return torch.tensor([t.failures for t in self.trajectories], dtype=torch.float32)

    @property
    def capped(self) -> torch.Tensor:
        return torch.tensor([t.stop == "iteration_cap" for t in self.trajectories], dtype=torch.float32)


def tool_metrics(calls: torch.Tensor, failures: torch.Tensor, capped: torch.Tensor) -> dict:
    """TRL's ``tools/call_frequency`` (calls per completion) and ``tools/failure_frequency``
    (failed calls per call, 0 without calls), plus the share of trajectories that hit the
    iteration cap. Inputs are ``(B,)`` per-completion counts of the whole generation batch."""
    total_calls = float(calls.sum())
    return {"tools/call_frequency": total_calls / max(len(calls), 1),
            "tools/failure_frequency": float(failures.sum()) / total_calls if total_calls else 0.0,
            "tools/iteration_cap_ratio": float(capped.mean()) if len(capped) else 0.0}


def _turn_seeds(sampling: SamplingConfig, rows: Sequence[int], turn: int) -> list[int] | None:
    if sampling.seed is None:
        return None
    return [(row_seed(sampling, r) + turn * _TURN_STRIDE) % SEED_MODULUS for r in rows]


class _ResultFitter:
    """Tokenizes one round of tool results so it fits the tokens left (cutting long results)."""

    def __init__(self, tokenizer, template: str | None, chat_template_kwargs: dict | None):
        self.tokenizer, self.template, self.kwargs = tokenizer, template, chat_template_kwargs

    def ids(self, results: Sequence[tuple[str, str]]) -> list[int]:
        text = result_suffix_text(self.tokenizer, self.template, results, self.kwargs)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def fit(self, results: list[ToolResult], room: int) -> tuple[list[int], list[str]] | None:
        """``(suffix ids, contents)`` within ``room`` tokens, or ``None`` if even empty results do not fit.

        A result longer than ``room * CHARS_PER_TOKEN`` characters is cut by characters first:
        tokenizing a 5 MB result to keep a few hundred tokens of it cost seconds and gigabytes.
        The tokens dropped with those characters are estimated from the kept part's ratio.
        """
        limit = (room + 1) * CHARS_PER_TOKEN
        full = [r.content for r in results]
        contents = [c[:limit] for c in full]
        if contents == full:
            suffix = self.ids([(r.name, c) for r, c in zip(results, contents)])
            if len(suffix) <= room:
                return suffix, contents
        overhead = len(self.ids([(r.name, "") for r in results]))
        if overhead > room:
            return None
        pieces = [self.tokenizer(c, add_special_tokens=False)["input_ids"] for c in contents]
        unseen = [round((len(f) - len(c)) * len(p) / max(len(c), 1)) for f, c, p in zip(full, contents, pieces)]
        keep = max(0, (room - overhead) // len(results))
        for _ in range(8):  # shrink until the rendered suffix fits; marks and merges cost a few tokens
            contents = [c if len(p) <= keep and not more else
                        self.tokenizer.decode(p[:max(keep - 8, 0)])
                        + TRUNCATION_MARK.format(dropped=len(p) - max(keep - 8, 0) + more)
                        for c, p, more in zip(full, pieces, unseen)]
            suffix = self.ids([(r.name, c) for r, c in zip(results, contents)])
            if len(suffix) <= room:
                return suffix, contents
            keep = max(0, keep - (len(suffix) - room) // len(results) - 1)
        contents = [""] * len(results)
        return self.ids([(r.name, "") for r in results]), contents


def run_agent_rollouts(engine, tokenizer, prompt_ids: Sequence[Sequence[int]], toolboxes: Sequence[ToolBox],
                       sampling: SamplingConfig, *, max_tool_calling_iterations: int | None,
                       max_completion_length: int, chat_template: str | None = None) -> AgentRollout:
    """Roll out one trajectory per row of ``prompt_ids`` (already rendered with the tools' schemas).

    Args:
        engine: a rollout engine with ``generate_from_ids`` (HF or vLLM).
        prompt_ids: ``B`` unpadded prompts, one per completion (prompts already repeated).
        toolboxes: ``B`` tool boxes, one per rollout (an environment's methods differ per rollout).
        sampling: the sampling settings; with ``sampling.seed`` set, row ``r``'s turn ``t`` is
            seeded with ``row_seed(sampling, r) + t * stride``: its first turn draws what a
            single-turn call draws, and ``sampling.first_row`` makes seeds global as there.
        max_tool_calling_iterations: most rounds of tool calls per trajectory (``None``: no cap).
        max_completion_length: most tokens after the prompt, tool results included.
        chat_template: the template that renders tool results (see ``tool_chat_template``).
    """
    if len(toolboxes) != len(prompt_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(toolboxes)} tool boxes; pass one per rollout.")
    cap = float("inf") if max_tool_calling_iterations is None else max_tool_calling_iterations
    eos_ids = set(engine.eos_ids)
    limit = getattr(engine, "context_limit", None)
    fitter = _ResultFitter(tokenizer, chat_template, sampling.chat_template_kwargs)
    record = getattr(engine, "record_logps", True)
    trajectories = [Trajectory(logps=[] if record else None) for _ in prompt_ids]
    active = list(range(len(prompt_ids)))
    turn = 0
    while active:
        room = {r: _room(len(prompt_ids[r]), len(trajectories[r].completion_ids), max_completion_length, limit)
                for r in active}
        step = dataclasses.replace(sampling, max_tokens=max(1, max(room.values())))
        inputs = [list(prompt_ids[r]) + trajectories[r].completion_ids for r in active]
        new_ids, new_logps = engine.generate_from_ids(inputs, step, _turn_seeds(sampling, active, turn))
        still = []
        for i, r in enumerate(active):
            trajectory = trajectories[r]
            ids = new_ids[i][:room[r]]
            trajectory.completion_ids += ids
            trajectory.tool_mask += [1] * len(ids)
            if trajectory.logps is not None:
                recorded = list(new_logps[i][:len(ids)]) if new_logps is not None else []
                trajectory.logps += recorded + [0.0] * (len(ids) - len(recorded))
            text = tokenizer.decode([t for t in ids if t not in eos_ids], skip_special_tokens=False)
            shown = tokenizer.decode(ids, skip_special_tokens=True)
            trajectory.segments.append(("model", shown))
            parsed = parse_assistant_turn(text, toolboxes[r].schemas, plain_text=shown)  # TRL's reading
            calls = parsed.calls
            trajectory.messages.append(parsed.message())
            if not calls or not ids or ids[-1] not in eos_ids:
                trajectory.stop = "eos" if ids and ids[-1] in eos_ids else "length"
                continue
            if turn >= cap:
                trajectory.stop = "iteration_cap"
                continue
            results = [toolboxes[r].call(call) for call in calls]
            trajectory.calls += len(results)
            trajectory.failures += sum(result.failed for result in results)
            left = _room(len(prompt_ids[r]), len(trajectory.completion_ids), max_completion_length, limit) - 1
            fitted = fitter.fit(results, left) if left > 0 else None
            if fitted is None:
                trajectory.stop = "budget"
                continue
            suffix, contents = fitted
            trajectory.rounds += 1
            trajectory.completion_ids += suffix
            trajectory.tool_mask += [0] * len(suffix)
            if trajectory.logps is not None:
                trajectory.logps += [0.0] * len(suffix)
            for result, content in zip(results, contents):
                trajectory.messages.append({"role": "tool", "name": result.name, "content": content})
                trajectory.segments.append(("tool", f"{result.name} -> {content}"))
            still.append(r)
        active = still
        turn += 1
    return _assemble(tokenizer, prompt_ids, trajectories, eos_ids)


def _room(prompt_length: int, used: int, max_completion_length: int, context_limit: int | None) -> int:
    room = max_completion_length - used
    if context_limit is not None:
        room = min(room, context_limit - prompt_length - used)
    return max(room, 0)


def _assemble(tokenizer, prompt_ids, trajectories: list[Trajectory], eos_ids: set) -> AgentRollout:
    from .base import left_pad

    pad_id = pad_token_id(tokenizer)
    prompt_tensor, prompt_mask = left_pad(prompt_ids, pad_id)
    width = max(1, max(len(t.completion_ids) for t in trajectories))
    rows = len(trajectories)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    tool_mask = torch.zeros((rows, width), dtype=torch.long)
    logps = torch.zeros((rows, width), dtype=torch.float32) if trajectories[0].logps is not None else None
    for i, t in enumerate(trajectories):
        n = len(t.completion_ids)
        ids[i, :n] = torch.as_tensor(t.completion_ids, dtype=torch.long)
        attention[i, :n] = 1
        tool_mask[i, :n] = torch.as_tensor(t.tool_mask, dtype=torch.long)
        if logps is not None:
            logps[i, :n] = torch.as_tensor(t.logps, dtype=torch.float32)
    is_eos = torch.tensor([bool(t.completion_ids) and t.completion_ids[-1] in eos_ids for t in trajectories])
    batch = RolloutBatch(prompt_ids=prompt_tensor, prompt_mask=prompt_mask, completion_ids=ids,
                         completion_mask=attention, is_eos=is_eos, texts=[t.display_text() for t in trajectories],
                         sampling_logps=logps)
    return AgentRollout(batch=batch, tool_mask=tool_mask, trajectories=trajectories)


def rendering_differences(tokenizer, prompt_messages: list, trajectory: Trajectory, prompt_ids: Sequence[int], *,
                          tools=None, chat_template: str | None = None, chat_template_kwargs: dict | None = None
                          ) -> list[str]:
    """Where the chat template, rendering the finished conversation, disagrees with the ids trained on.

    ``prompt_messages + trajectory.messages`` is rendered with the template (the prompt's tools
    included) and tokenized; the result is compared with ``prompt_ids + completion_ids``. Each
    difference is named: its position, whose tokens it is in (``prompt``, ``model`` or ``tool``),
    and both sides decoded. The one difference every ChatML template gives is the text the
    template writes after the last end-of-turn token (``"\\n"``), which the model never
    generates; it is reported as ``trailing`` and is harmless. An empty list: token in, token out
    holds for this trajectory.
    """
    kwargs = dict(chat_template_kwargs or {})
    rendered = tokenizer.apply_chat_template(list(prompt_messages) + trajectory.messages, tools=tools,
                                             chat_template=chat_template, tokenize=True, return_dict=False, **kwargs)
    rendered = list(rendered)
    ours = list(prompt_ids) + list(trajectory.completion_ids)
    owner = ["prompt"] * len(prompt_ids) + ["model" if m else "tool" for m in trajectory.tool_mask]
    differences = []
    common = min(len(ours), len(rendered))
    first = next((i for i in range(common) if ours[i] != rendered[i]), None)
    if first is not None:
        differences.append(f"position {first} ({owner[first]} tokens): trained on "
                           f"{tokenizer.decode(ours[first:first + 12])!r}, the template renders "
                           f"{tokenizer.decode(rendered[first:first + 12])!r}")
    elif len(rendered) > len(ours):
        differences.append(f"trailing: the template adds {tokenizer.decode(rendered[len(ours):])!r} after the last turn")
    elif len(ours) > len(rendered):
        differences.append(f"position {len(rendered)} ({owner[len(rendered)]} tokens): trained on "
                           f"{tokenizer.decode(ours[len(rendered):])!r}, which the template does not render")
    return differences
