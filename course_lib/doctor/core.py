"""The doctor's machinery: findings, the rule registry, and running the rules over a history.

A *rule* is a small pure function ``check(rows, config) -> Diagnosis | None`` over the
metric rows a run logged (one dict per optimizer step, TRL's metric names) and the run's
config (a plain dict; ``{}`` when unknown, e.g. a TRL log). It is registered with
:func:`rule`, which records its name, severity, the signals it reads and its thresholds,
with the reasoning behind each threshold. :func:`diagnose` runs every rule; the
:class:`Doctor` does the same live and reports each finding once, when it first fires.

Severities: ``"info"`` (normal behaviour that looks alarming, said once), ``"warning"``
(the run wastes compute or drifts; it may still learn), ``"error"`` (the run cannot learn
or is breaking; ``doctor="stop"`` ends it).

Causal order: every rule belongs to a *stage* of :data:`STAGES`, the order in which one
failure causes the next. A learning rate that is too large wrecks sampling (entropy, lengths),
which empties the rewards' spread, which wastes the budget; never the other way round. The
report lists findings stage by stage (within a stage, errors first), so its first line is the
most upstream finding: the one to act on first, the others read as its likely consequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

SEVERITIES = ("info", "warning", "error")
#: The causal order of the report: optimizer and learning rate, then sampling, then rewards,
#: then the data (groups all alike: a task too hard or too easy for the model), then budget
#: (time and length), then symptoms (rules that see the update do nothing and name an upstream
#: cause in their message), then "normal" (info: behaviour that only looks wrong).
STAGES = ("optimizer", "sampling", "rewards", "data", "budget", "symptom", "normal")


@dataclass(frozen=True)
class Diagnosis:
    """What a rule's check returns when it fires: the message (cause and fix) and the values seen."""

    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    """A rule that fired at ``step``: the row type the trainer writes to ``history.jsonl``."""

    rule: str
    severity: str
    step: int
    message: str
    signals: tuple[str, ...]
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        """The history row of this finding (``"type": "doctor"`` tells it from metric rows)."""
        return {"type": "doctor", "step": self.step, "rule": self.rule, "severity": self.severity,
                "message": self.message, "signals": list(self.signals), "evidence": self.evidence}

    def __str__(self) -> str:
        return f"[doctor {self.severity}] step {self.step}, {self.rule}: {self.message}"


@dataclass(frozen=True)
class Rule:
    """A registered rule. ``thresholds`` maps each threshold to ``(value, why)``."""

    name: str
    severity: str
    signals: tuple[str, ...]
    thresholds: dict[str, tuple[float, str]]
    check: Callable[[list[dict], dict], Diagnosis | None]
    summary: str
    stage: str = "rewards"
    #: A state every run passes through (too few rows early on): the report on a whole run keeps
    #: its finding only if it still holds at the end (the live doctor says it once, when it holds).
    passing: bool = False

    def threshold(self, key: str) -> float:
        return self.thresholds[key][0]


#: name -> Rule, in registration order (the order of the report).
RULES: dict[str, Rule] = {}


def rule(name: str, severity: str, signals: Iterable[str], thresholds: dict[str, tuple[float, str]] | None = None,
         stage: str = "rewards", passing: bool = False):
    """Register ``check`` as a doctor rule (a decorator). Its docstring's first line is its summary;
    ``stage`` (one of :data:`STAGES`) places its findings in the report's causal order; ``passing``
    marks a state every run passes through (:attr:`Rule.passing`)."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity={severity!r}; expected one of {SEVERITIES}.")
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; expected one of {STAGES}.")

    def register(check: Callable[[list[dict], dict], Diagnosis | None]):
        if name in RULES:
            raise ValueError(f"a doctor rule named {name!r} is already registered.")
        summary = (check.__doc__ or name).strip().splitlines()[0]
        RULES[name] = Rule(name, severity, tuple(signals), dict(thresholds or {}), check, summary, stage, passing)
        return check

    return register


# ---------------------------------------------------------------------- helpers for rules
def metric_rows(rows: Iterable[dict]) -> list[dict]:
    """The optimizer-step rows of a history (doctor findings and other row types dropped)."""
    return [r for r in rows if r.get("type", "metrics") == "metrics" and "step" in r]


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def values(rows: list[dict], key: str) -> list[float]:
    """The finite values of ``key``, in step order (rows without it are skipped)."""
    return [float(r[key]) for r in rows if is_finite(r.get(key))]


def steps_of(rows: list[dict], key: str) -> list[int]:
    return [int(r["step"]) for r in rows if is_finite(r.get(key))]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def median(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])


def stderr(xs: list[float]) -> float:
    """Standard error of the mean of ``xs`` (0 for fewer than two values)."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def pearson(xs: list[float], ys: list[float]) -> float:
    """Pearson correlation of two equally long series; NaN when either is constant."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return float("nan")
    mx, my = mean(xs), mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def steps_per_row(rows: list[dict]) -> list[int]:
    """Optimizer steps each logged row stands for: the step difference to the row before (the
    first row: its own step). TRL logs every ``logging_steps`` (10 by default), so rows are not
    steps; this trainer logs every step."""
    out, previous = [], 0
    for r in rows:
        step = int(r["step"])
        out.append(max(step - previous, 1))
        previous = step
    return out


def has_rewards(rows: list[dict]) -> bool:
    """Whether the history logged a reward of sampled completions (an RL run). SFT logs none;
    DPO's ``rewards/chosen``, ``rewards/rejected`` and ``rewards/margins`` are implicit rewards
    of fixed pairs, not of samples, and do not count."""
    return any("reward" in r or any(k.startswith("rewards/") and k.endswith(("/mean", "/std")) for k in r)
               for r in rows)


def causal_order(findings: list["Finding"]) -> list["Finding"]:
    """``findings`` in the report's order: warnings and errors by stage (:data:`STAGES`), errors
    first within a stage, then the order the rules were registered in, then the earlier step;
    info findings (behaviour that only looks wrong, or costs nothing) after them all."""
    names = list(RULES)

    def key(f):
        spec = RULES.get(f.rule)
        stage = STAGES.index(spec.stage) if spec else len(STAGES)
        return (f.severity == "info", stage, -SEVERITIES.index(f.severity), names.index(f.rule) if f.rule in names
                else 0, f.step)

    return sorted(findings, key=key)


def first_key(rows: list[dict], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` that some row logged (metric names differ per algorithm)."""
    for key in keys:
        if any(is_finite(r.get(key)) for r in rows):
            return key
    return None


def config_dict(config: Any) -> dict:
    """A config object (``RLConfig``), a dict, or None, as a plain dict."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return config
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise TypeError(f"config is a {type(config).__name__}; pass an RLConfig, a dict or None.")


# ---------------------------------------------------------------------- running the rules
def diagnose(rows: Iterable[dict], config: Any = None, rules: Iterable[str] | None = None) -> list[Finding]:
    """Every rule that fires on the history ``rows`` (oldest first), most severe first.

    ``config``: the run's config (object or dict), ``None`` when unknown: rules then name
    fields without their current values. ``rules``: names to run (default: all).
    """
    rows, config = metric_rows(rows), config_dict(config)
    if not rows or not has_rewards(rows):  # no reward logged: not an RL run, the rules do not apply
        return []
    names = list(RULES) if rules is None else list(rules)
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise ValueError(f"unknown doctor rule(s) {unknown}; known: {sorted(RULES)}.")
    findings = []
    for name in names:
        spec = RULES[name]
        found = spec.check(rows, config)
        if found is not None:
            findings.append(Finding(spec.name, spec.severity, int(rows[-1]["step"]), found.message, spec.signals,
                                    found.evidence))
    return causal_order(findings)


class Doctor:
    """The live doctor: call :meth:`check` with the history so far at each logging step.

    Each rule is reported once, the first time it fires (``step`` is that step).
    """

    def __init__(self, config: Any = None, rules: Iterable[str] | None = None):
        self.config = config_dict(config)
        self.rules = None if rules is None else list(rules)
        self.reported: dict[str, Finding] = {}

    def check(self, rows: Iterable[dict]) -> list[Finding]:
        """The findings that fire now and had not fired before."""
        new = [f for f in diagnose(rows, self.config, self.rules) if f.rule not in self.reported]
        for finding in new:
            self.reported[finding.rule] = finding
        return new


NO_REWARDS = ("this log has no rewards (an SFT or DPO run, or a run that logged no reward): the doctor's rules "
              "read RL signals (rewards, groups, KL, the sampler) and do not apply to it.")


def format_report(findings: list[Finding], rows_seen: int, last_step: int | None = None,
                  rewards: bool = True) -> str:
    """The text report: the most upstream finding first (:func:`causal_order`), the others
    below it as its likely consequences; or a line saying none fired."""
    span = f"{rows_seen} logged rows" + (f" up to optimizer step {last_step}" if last_step is not None else "")
    if not rewards:
        return f"doctor: {span}; {NO_REWARDS}"
    if not findings:
        return f"doctor: {span}, no rule fired."
    findings = causal_order(findings)
    loud = [f for f in findings if f.severity != "info"]
    lines = [f"doctor: {span}, {len(findings)} finding(s), in causal order (optimizer and learning rate, "
             "sampling, rewards, data, budget)."]
    if loud:
        lines.append(f"Act on the first: {loud[0].rule}. The findings below it are most likely its consequences.")
    for f in findings:
        lines.append(f"\n{f.severity.upper():7s} {f.rule} (step {f.step}; signals: {', '.join(f.signals)})")
        lines.append(f"  {f.message}")
    return "\n".join(lines)
