"""Greedy held-out evaluation of a policy that may call tools (multi-turn).

Each problem is rolled out once, greedily, through the same loop the trainer samples with
(:func:`~course_lib.rollout.agents.run_agent_rollouts`, the prompt rendered with the tools'
schemas, tool results appended token by token). The *final answer* is the trajectory's last
model turn; it is scored with the course's one rule for "correct"
(:func:`course_lib.rewards.answers.is_correct`, or a given ``correct_fn``). A trajectory that
ends on a tool call (the iteration cap or the token budget reached) has no final answer and
is wrong.

The per-problem booleans pair before and after training on the same problems, for
:func:`course_lib.evaluation.lift_interval`::

    before = evaluate_tool_accuracy(model, tokenizer, held_out, tools=[multiply])
    ...train...
    after = evaluate_tool_accuracy(model, tokenizer, held_out, tools=[multiply])
    lift, low, high = lift_interval(before.correct, after.correct)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .models import eval_mode
from .progress import progress_bar
from .rewards.answers import is_correct

__all__ = ["ToolEvaluation", "evaluate_tool_accuracy", "final_answer"]

#: The training config's default ``tool_timeout`` (TRL 1.16 has no tool timeout; ours is 30 s):
#: evaluation uses the same, so a call that fails by timing out in training fails here too.
TRAINING_TOOL_TIMEOUT = 30.0


def _environment_reward(environment) -> float | None:
    """``environment.get_reward()`` as a float, ``None`` passed through (TRL ignores such a reward)."""
    get_reward = getattr(environment, "get_reward", None)
    if not callable(get_reward):
        raise ValueError(f"score='environment': {type(environment).__name__} has no get_reward method.")
    value = get_reward()
    return None if value is None else float(value)


@dataclass
class ToolEvaluation:
    """Per-problem outcomes of :func:`evaluate_tool_accuracy`, in dataset order.

    Attributes:
        correct: whether the final answer is correct.
        calls, failures: tool calls run and how many of them failed.
        rounds: rounds of tool results each trajectory read (a round runs every call of one turn).
        rewards: each environment's ``get_reward()`` after its rollout (``score="environment"``), else empty.
        stops: how each trajectory ended (``"eos"``, ``"length"``, ``"iteration_cap"``, ``"budget"``).
        answers: the final model turn (``""`` when the trajectory ended on a call).
        texts: the whole trajectory, tool results marked ``[tool: ...]``.
    """

    correct: list[bool] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct)

    @property
    def call_frequency(self) -> float:
        """Calls per problem (TRL's ``tools/call_frequency``, here of greedy rollouts)."""
        return sum(self.calls) / len(self.calls)

    @property
    def called_share(self) -> float:
        """Share of problems whose trajectory ran at least one call."""
        return sum(c > 0 for c in self.calls) / len(self.calls)

    @property
    def rounds_per_problem(self) -> float:
        """Mean tool rounds per problem."""
        return sum(self.rounds) / len(self.rounds)

    @property
    def failure_frequency(self) -> float:
        """Failed calls per call (0 without calls), as ``tools/failure_frequency``."""
        total = sum(self.calls)
        return sum(self.failures) / total if total else 0.0

    def summary(self) -> str:
        from .evaluation import format_accuracy

        return (f"accuracy {format_accuracy(sum(self.correct), len(self.correct))}, "
                f"{self.call_frequency:.2f} calls/problem, {100 * self.called_share:.0f}% of problems call, "
                f"{100 * self.failure_frequency:.0f}% of calls failed")


def final_turn(messages) -> str:
    """The text of the last assistant message, or ``""`` when there is none or it is a tool call
    (the trajectory stopped at the iteration cap or the budget before any answer). ``messages``
    is a trajectory's chat, as a reward function receives it in ``completions``."""
    turns = [m for m in messages if m.get("role") == "assistant"]
    if not turns:
        return ""
    if turns[-1].get("tool_calls"):
        return ""
    return turns[-1].get("content") or ""


def final_answer(trajectory) -> str:
    """:func:`final_turn` of a trajectory's messages: the answer the evaluation reads."""
    return final_turn(trajectory.messages)


@torch.no_grad()
def evaluate_tool_accuracy(model, tokenizer, dataset, *, tools: Sequence[Callable] | None = None,
                           environment_factory=None, correct_fn: Callable | None = None,
                           answer_column: str = "answer", max_completion_length: int = 128,
                           max_tool_calling_iterations: int | None = 1, tool_timeout: float | None = TRAINING_TOOL_TIMEOUT,
                           score: str = "answer", success_reward: float = 1.0,
                           batch_size: int = 32, chat_template_kwargs: dict | None = None, engine=None,
                           progress: bool | None = None) -> ToolEvaluation:
    """Greedy multi-turn rollouts on ``dataset`` with ``tools`` and/or ``environment_factory``;
    per-problem correctness of the final answer and the calls made (see the module doc).

    Args:
        model, tokenizer: the policy (a PEFT model works); it is put in eval mode for the
            rollouts and its training mode is restored after.
        dataset: rows with a conversational ``prompt``, the ``answer_column`` and whatever
            columns the environments' ``reset(**row)`` reads.
        tools, environment_factory: as for ``Trainer`` (TRL 1.16's meaning).
        correct_fn: ``correct_fn(final_answer, reference) -> bool``; default :func:`is_correct`
            (the ``<answer>`` tag's number, else the first number).
        max_completion_length, max_tool_calling_iterations, tool_timeout: as in the config;
            tool results count toward ``max_completion_length``; ``tool_timeout`` defaults to the
            training config's default (30 s), so a tool that times out in training times out here.
        score: ``"answer"`` reads the final answer against ``answer_column``; ``"environment"``
            reads the state of each rollout's environment instead: a problem is solved when its
            ``get_reward()`` is at least ``success_reward`` (a task whose answer lives only inside
            the environment, such as a game, needs no answer column).
        batch_size: problems rolled out together.
        engine: the rollout engine; default ``HFEngine(model, tokenizer)``.
    """
    from .rollout import HFEngine, SamplingConfig
    from .rollout.tool_run import ToolRun

    if not tools and environment_factory is None:
        raise ValueError("evaluate_tool_accuracy needs tools or an environment_factory; for single-turn "
                         "evaluation use course_lib.evaluation.evaluate_accuracy.")
    if len(dataset) == 0:
        raise ValueError("evaluate_tool_accuracy got a dataset with no rows, which has no accuracy.")
    if score not in ("answer", "environment"):
        raise ValueError(f"score={score!r}: use 'answer' (the final turn against answer_column) or 'environment' "
                         "(each environment's get_reward()).")
    if score == "environment" and (environment_factory is None or correct_fn is not None):
        raise ValueError("score='environment' reads get_reward() of the rollouts' environments: pass "
                         "environment_factory (whose class defines get_reward) and no correct_fn.")
    if score == "answer" and answer_column not in dataset.column_names:
        raise ValueError(f"evaluate_tool_accuracy reads the reference from column {answer_column!r} "
                         f"(columns: {dataset.column_names}). Fix: add it or pass answer_column=.")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: use at least 1.")
    columns = {name: list(dataset[name]) for name in dataset.column_names}
    run = ToolRun(tools, environment_factory, tokenizer, columns, max_tool_calling_iterations=max_tool_calling_iterations,
                  tool_timeout=tool_timeout, max_completion_length=max_completion_length)
    engine = engine if engine is not None else HFEngine(model, tokenizer, record_logps=False)
    sampling = SamplingConfig(temperature=0.0, max_tokens=max_completion_length,
                              chat_template_kwargs=chat_template_kwargs)
    check = correct_fn or is_correct
    out = ToolEvaluation()
    count = len(dataset)
    show = count > batch_size if progress is None else progress
    with eval_mode(model):
        with progress_bar(total=count, desc="tool eval", unit="problem", disable=not show) as bar:
            for start in range(0, count, batch_size):
                rows = list(range(start, min(start + batch_size, count)))
                batch_columns = {name: [values[r] for r in rows] for name, values in columns.items()}
                rollout = run.rollout(engine, tokenizer, batch_columns["prompt"], batch_columns, rows, sampling)
                environments = rollout.reward_kwargs.get("environments", [None] * len(rows))
                for r, trajectory, environment in zip(rows, rollout.agent.trajectories, environments):
                    answer = final_answer(trajectory)
                    if score == "environment":
                        reward = _environment_reward(environment)
                        out.rewards.append(reward)
                        out.correct.append(reward is not None and reward >= success_reward)
                    else:
                        out.correct.append(bool(answer) and bool(check(answer, columns[answer_column][r])))
                    out.rounds.append(trajectory.rounds)
                    out.calls.append(trajectory.calls)
                    out.failures.append(trajectory.failures)
                    out.stops.append(trajectory.stop)
                    out.answers.append(answer)
                    out.texts.append(trajectory.display_text())
                bar.update(len(rows))
    return out
