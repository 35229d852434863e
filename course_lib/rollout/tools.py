"""Running tool calls, and the environments whose methods are tools.

:class:`ToolBox` executes the calls of one rollout. Every way a call can go wrong becomes
a *failed* call whose result text tells the model what happened, so one bad call never
stops the run (TRL 1.16 turns a raising tool into ``{'error': message}`` the same way):

- an unknown tool name: ``Tool <name> not found.``;
- arguments the function does not accept (or that are not an object): Python's own
  ``TypeError`` message, raised by the call itself as in TRL;
- a tool that raises: its exception, ``{'error': message}``;
- a tool that runs past ``timeout`` seconds: a timeout message. A Python thread cannot be
  stopped from outside, so a hung *sync* tool is left running in a daemon thread and its
  eventual result is dropped; tools that may hang on model-written code should run it in
  ``course_lib.sandbox`` (a separate, killed process), as :func:`python_tool` does.

:class:`Environments` follows TRL's ``environment_factory``: one instance per rollout
(pooled and ``reset`` between batches), its public methods as tools, an optional
``get_reward()`` as an extra reward source named after the class.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..common.forks import leave_if_forked
from ..rewards.calling import in_thread
from .tool_calls import ToolCall, error_text, result_text, tool_schema


@dataclass
class ToolResult:
    """What one call gave back: the tool's name, the text the model reads, and whether it failed."""

    name: str
    content: str
    failed: bool = False


def _run_with_timeout(function: Callable, arguments: dict, timeout: float | None):
    """``function(**arguments)`` (sync or async); raises ``TimeoutError`` past ``timeout`` seconds."""
    if inspect.iscoroutinefunction(function):
        async def bounded():
            return await asyncio.wait_for(function(**arguments), timeout)
        try:  # its own loop in its own thread: safe inside a notebook's running loop
            return in_thread(lambda: asyncio.run(bounded()), None)
        except asyncio.TimeoutError:
            raise TimeoutError(f"timed out after {timeout} s") from None
    if timeout is None:
        return function(**arguments)
    return in_thread(lambda: function(**arguments), timeout)


class ToolBox:
    """The tools one rollout may call, by name.

    Args:
        tools: functions (sync or async, bound methods included) with type hints and a
            Google-style docstring; their names must be distinct.
        timeout: seconds a call may run before it counts as failed; ``None``: no limit.
    """

    def __init__(self, tools: Sequence[Callable], timeout: float | None = None):
        self.tools: dict[str, Callable] = {}
        for tool in tools:
            name = getattr(tool, "__name__", None)
            if not callable(tool) or not name:
                raise TypeError(f"tools: {tool!r} is not a named function; pass plain functions or methods.")
            if name in self.tools and self.tools[name] is not tool:
                raise ValueError(f"tools: two tools are named {name!r}; rename one, the model calls tools by name.")
            self.tools[name] = tool
        if timeout is not None and not timeout > 0:
            raise ValueError(f"tool timeout={timeout}: use None (no limit) or a positive number of seconds.")
        self.timeout = timeout

    @property
    def schemas(self) -> list[dict]:
        if getattr(self, "_schemas", None) is None:
            self._schemas = [tool_schema(tool) for tool in self.tools.values()]
        return self._schemas

    def call(self, call: ToolCall) -> ToolResult:
        """Run one parsed call; every failure is a result with ``failed=True`` (see the module doc)."""
        name = call.name or "unknown"
        if call.error is not None:
            return ToolResult(name, error_text(call.error), failed=True)
        function = self.tools.get(name)
        if function is None:  # TRL 1.16's words, so both trainers show the model the same text
            return ToolResult(name, error_text(f"Tool {name} not found."), failed=True)
        owner = os.getpid()
        try:
            value = _run_with_timeout(function, call.arguments, self.timeout)
        except TimeoutError:
            return ToolResult(name, error_text(f"{name} timed out after {self.timeout} s"), failed=True)
        except Exception as error:  # the tool's own failure is information for the model
            return ToolResult(name, error_text(_shown(error)), failed=True)
        finally:
            leave_if_forked(owner, f"the tool {name!r}")  # a forked child must not return into the run
        try:
            return ToolResult(name, result_text(value))
        except Exception as error:  # noqa: BLE001 - a __str__ that raises, a value nested too deep (RecursionError)
            return ToolResult(name, error_text(f"{name} returned a {type(value).__name__} that cannot be written "
                                               f"as text ({type(error).__name__}: {_shown(error)})"), failed=True)


def _shown(error: BaseException) -> str:
    """An exception's message, never raising itself (its ``__str__`` is the tool author's code)."""
    try:
        return str(error)[:2000] or type(error).__name__
    except Exception:  # noqa: BLE001
        return type(error).__name__


def public_methods(instance) -> list[Callable]:
    """The tools an environment exposes: its class's public functions other than ``reset`` and ``get_reward``."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


class EnvironmentResetError(RuntimeError):
    """An environment's ``reset`` raised for one dataset row."""


class Environments:
    """TRL's ``environment_factory``: a callable, or a dict of them chosen by the ``environment`` column.

    One instance of each factory is made at construction to check it (a ``reset`` method,
    tool schemas for its public methods) and seeds a pool; a batch draws one instance per
    rollout from the pool, making more only when it needs more at once.
    """

    def __init__(self, factory: Callable | Mapping[str, Callable]):
        self.multiple = isinstance(factory, Mapping)
        self.factories: dict = dict(factory) if self.multiple else {None: factory}
        if not self.factories:
            raise ValueError("environment_factory is an empty dict; map at least one name to a factory.")
        self.pool: dict = {}
        self.reward_classes: list[type] = []
        for name, make in self.factories.items():
            if not callable(make):
                raise TypeError(f"environment_factory[{name!r}] is not callable; pass a class or a function "
                                "returning a new environment.")
            instance = make()
            if not callable(getattr(instance, "reset", None)):
                raise ValueError(f"the environment {type(instance).__name__} has no reset method; define "
                                 "reset(self, **row) returning None or text to append to the last user message.")
            for method in public_methods(instance):
                tool_schema(method)  # refuses undocumented methods now, not mid-run
            self.pool[name] = [instance]
            if callable(getattr(instance, "get_reward", None)) and type(instance) not in self.reward_classes:
                self.reward_classes.append(type(instance))

    def check_names(self, names: Sequence) -> None:
        """Refuse ``environment`` column values that name no factory (at construction)."""
        if not self.multiple:
            return
        unknown = sorted({str(n) for n in names if n not in self.factories})
        if unknown:
            raise ValueError(f"the 'environment' column names {unknown}, which environment_factory does not "
                             f"define (it has {sorted(map(str, self.factories))}). Fix: add them to the dict "
                             "or correct the column.")

    def instances(self, names: Sequence) -> list:
        """One instance per rollout, ``names[i]`` choosing the factory (all ``None`` for a single one)."""
        handed: dict = {}
        out = []
        for name in names:
            pool, index = self.pool[name], handed.get(name, 0)
            if index == len(pool):
                pool.append(self.factories[name]())
            handed[name] = index + 1
            out.append(pool[index])
        return out

    @staticmethod
    def reset(instances: Sequence, rows: Sequence[dict], row_ids: Sequence[int], timeout: float | None = None) -> list:
        """``reset(**row)`` on each instance; returns what each returned (``None`` or text).

        ``timeout``: seconds each ``reset`` may take (the run's ``tool_timeout``); past it the run
        stops with :class:`EnvironmentResetError` instead of waiting forever.
        """
        observations = []
        for instance, row, row_id in zip(instances, rows, row_ids):
            try:
                observation = _run_with_timeout(instance.reset, dict(row), timeout)
            except TimeoutError:
                raise EnvironmentResetError(f"{type(instance).__name__}.reset did not return within tool_timeout="
                                            f"{timeout} s on dataset row {row_id}. Fix: make reset return faster, "
                                            "or raise tool_timeout.") from None
            except Exception as error:
                raise EnvironmentResetError(f"{type(instance).__name__}.reset failed on dataset row {row_id} "
                                            f"(columns {sorted(row)}): {type(error).__name__}: {error}") from error
            if observation is not None and not isinstance(observation, str):
                raise EnvironmentResetError(f"{type(instance).__name__}.reset returned a {type(observation).__name__} "
                                            f"on dataset row {row_id}; return None or a string.")
            observations.append(observation)
        return observations

    def reward_functions(self) -> list[Callable]:
        """One reward function per class with ``get_reward``, named after the class (weight 1 in TRL).

        It reads the ``environments`` argument (one instance per completion) and scores only
        the rollouts of its own class (``None`` for the others, ignored when combining). A
        ``get_reward()`` that returns ``None`` is passed on as ``None`` too: as in TRL 1.16, that
        rollout has no reward from this source (NaN, left out of the weighted sum), not a crash.
        """
        functions = []
        for cls in self.reward_classes:
            def reward(prompts, completions, environments=None, _cls=cls, **_):
                if environments is None:
                    raise ValueError(f"{_cls.__name__}.get_reward needs the rollouts' environments.")
                return [_reward_value(e.get_reward()) if type(e) is _cls else None for e in environments]
            reward.__name__ = cls.__name__
            functions.append(reward)
        return functions


def _reward_value(value):
    """``get_reward()``'s value as a float, or ``None`` when it returned ``None``."""
    return None if value is None else float(value)


def append_observation(prompt, observation: str | None):
    """The prompt with ``reset``'s text appended to its last user message (a new list; the row is untouched)."""
    if observation is None:
        return prompt
    if isinstance(prompt, str):
        return prompt + observation
    last = dict(prompt[-1])
    last["content"] = (last.get("content") or "") + observation
    return list(prompt[:-1]) + [last]


def python_tool(timeout_s: float = 2.0, memory_mb: int = 256, max_output_chars: int = 2000) -> Callable:
    """A ``run_python(code)`` tool that executes model-written code in ``course_lib.sandbox``.

    The program runs in a fresh bubblewrap sandbox (no network, no host files, killed after
    ``timeout_s``); the tool returns what it printed (at most ``max_output_chars``), and a run
    that fails (an exception, a timeout, a limit) raises, so the call counts as failed and the
    model reads the reason. The machine's isolation is checked here, once: without it the
    tool is refused (``SandboxUnavailableError`` with the fix) rather than run code unprotected.
    """
    from ..sandbox import SandboxUnavailableError, detect_isolation
    from ..sandbox import run_python as sandboxed

    found = detect_isolation()
    if not found.available:
        raise SandboxUnavailableError(f"python_tool runs model-written code and needs OS isolation: {found.reason}")

    def run_python(code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: the program's source code
        """
        result = sandboxed(code, timeout_s=timeout_s, memory_mb=memory_mb)
        if not result.ok:
            reason = result.killed_reason or f"exit code {result.returncode}"
            raise RuntimeError(f"{reason}: {result.stderr.strip()[-max_output_chars:]}")
        return result.stdout[:max_output_chars]
    return run_python
