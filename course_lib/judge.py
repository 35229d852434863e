"""LLM-as-judge rewards with TRL's signature: a pointwise rubric judge and a group-relative (RULER-style) judge.

Where no verifier exists (style, helpfulness, a proof's clarity) a model can grade the
completions instead: "LLM-as-a-judge" (Zheng et al. 2023). Two shapes:

- **pointwise** (:func:`make_rubric_judge_reward`): the judge reads the rubric, the question
  and one completion, and answers a score from 0 to 10; the reward is score / 10.
- **group-relative** (:func:`make_group_judge_reward`): the judge reads the G completions of
  one prompt together and ranks them, best first; the reward is ``1 - rank / (G - 1)``. This is
  the idea of OpenPipe ART's RULER: GRPO only uses the differences *within* a group (its
  advantage is the reward minus the group mean), so a judge need not be calibrated across
  prompts, only able to compare answers to the same prompt, which is easier.

The judge is any model :func:`course_lib.models.load_policy` loads (a folder, a hub id, or the
embedded ``"smollm2-135m"``, which runs offline on a CPU), or any callable
``list[messages] -> list[str]``. It decodes greedily, in batches of ``batch_size``.
Judgments are cached by (prompt, completion, rubric) (by the whole group for the ranking
judge), so an evaluation of the same completions twice, or a prompt sampled again with the
same answer, costs nothing.

Bad input and bad judges:

- a judgment that cannot be parsed (no score, a ranking that is not a permutation) gives
  **None**, TRL's "unscorable": the sample then counts for nothing instead of for 0;
- a call that runs past ``timeout_s`` stops judging: the rest of the batch is None;
- :attr:`Judge.stats` counts calls, seconds, unparsable judgments, cache hits and
  timeouts, and when the trainer passes TRL's ``log_metric`` kwarg each batch logs
  ``judge/calls``, ``judge/s``, ``judge/unparsable`` and ``judge/cache_hits`` into the history.

A 135M-parameter judge is weak: lesson 09 measures its agreement with the verifier on
held-out answers (accuracy and Cohen's kappa, :func:`agreement`) before trusting it.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .rewards.extract import completion_text

__all__ = ["DEFAULT_RUBRIC", "STORED_JUDGMENTS", "Judge", "held_out_answers", "pairwise_order", "JudgeStats", "agreement", "cohen_kappa", "make_group_judge_reward",
           "make_rubric_judge_reward", "parse_group_ranking", "parse_score"]

#: SmolLM2-135M-Instruct's judgments of the tiny model's answers (``benchmarks/judge_agreement.py``):
#: lesson 09 replays them without loading the judge.
STORED_JUDGMENTS = Path(__file__).resolve().parent / "assets" / "rewards" / "judge_smollm2_arithmetic.json"

#: The rubric lesson 09 uses for arithmetic answers.
DEFAULT_RUBRIC = "The answer is correct: the final number is the exact result of the calculation."


@dataclass
class JudgeStats:
    """What a judge has done so far (all counts since it was built)."""

    calls: int = 0           # prompts sent to the judge model
    seconds: float = 0.0     # time spent in the judge model
    unparsable: int = 0      # judgments that gave no score
    cache_hits: int = 0      # judgments answered from the cache
    timeouts: int = 0        # judgments left undone because the call ran out of time


@dataclass
class Judge:
    """A judge model behind a cache: ``judge(list of chat prompts) -> list of replies``.

    Args:
        model: a name or folder for ``load_policy`` (loaded on first use), a ``(model,
            tokenizer)`` pair, or a callable ``list[messages] -> list[str]`` (a remote API, a fake).
        max_new_tokens: reply budget; a score or a ranking of eight needs few tokens.
        batch_size: prompts per generation call.
        timeout_s: seconds one call of a reward may spend judging; the rest of the batch is None.
        cache_path: a JSON file of earlier judgments, read at construction and written by
            :meth:`save` (lesson 09 ships one, so its fast mode asks the model nothing).

    A chat prompt whose last message has the role ``"prefill"`` has that text appended after
    the assistant's turn opens (``"Score:"``): the reply then starts where a number goes, which
    a small model needs.
    """

    model: Any = "smollm2-135m"
    max_new_tokens: int = 12
    batch_size: int = 8
    timeout_s: float | None = 120.0
    cache_path: str | None = None
    stats: JudgeStats = field(default_factory=JudgeStats)
    _cache: dict = field(default_factory=dict, repr=False)
    _generate: Callable | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"Judge batch_size={self.batch_size}: give at least 1 prompt per call.")
        if self.max_new_tokens < 1:
            raise ValueError(f"Judge max_new_tokens={self.max_new_tokens}: the judge must be able to answer; "
                             "give 8 or more.")
        if self.timeout_s is not None and not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"Judge timeout_s={self.timeout_s}: give a positive number of seconds, or None.")
        if self.cache_path is not None and Path(self.cache_path).exists():
            stored = json.loads(Path(self.cache_path).read_text())
            self._cache.update({tuple(_tuple(k) for k in json.loads(key)): value for key, value in stored.items()})

    def save(self, path: str | None = None) -> Path:
        """Write the cache (every judgment so far) to ``path`` (default ``cache_path``) as JSON."""
        target = Path(path or self.cache_path or "")
        if not str(path or self.cache_path or ""):
            raise ValueError("Judge.save needs a path: pass one, or build the judge with cache_path=.")
        target.write_text(json.dumps({json.dumps(list(k)): v for k, v in sorted(self._cache.items(), key=str)},
                                     indent=0, sort_keys=True))
        return target

    def _generator(self) -> Callable[[list], list[str]]:
        if self._generate is None:
            if callable(self.model) and not hasattr(self.model, "generate"):
                self._generate = self.model
            else:
                from .models import load_policy
                from .rollout import SamplingConfig, make_engine

                model, tokenizer = (self.model if isinstance(self.model, tuple) else load_policy(self.model))
                engine = make_engine("hf", model, tokenizer)
                sampling = SamplingConfig(max_tokens=self.max_new_tokens, temperature=0.0)

                def as_text(messages: list) -> str:
                    prefill = messages[-1]["content"] if messages[-1].get("role") == "prefill" else ""
                    turns = messages[:-1] if prefill else messages
                    return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) + prefill

                self._generate = lambda prompts: list(
                    engine.generate([as_text(p) for p in prompts], n=1, sampling=sampling).texts)
        return self._generate

    def ask(self, keys: Sequence[Any], prompts: Sequence[list]) -> list[str | None]:
        """Replies for ``prompts`` (chat messages), cached under ``keys``; None for those past the time limit."""
        replies: list[str | None] = [None] * len(prompts)
        todo, first = [], {}
        for i, key in enumerate(keys):
            if key in self._cache:
                replies[i] = self._cache[key]
                self.stats.cache_hits += 1
            elif key in first:  # asked twice in a batch: one call, the second answered from it
                self.stats.cache_hits += 1
            else:
                first[key] = i
                todo.append(i)
        start = time.perf_counter()
        for b in range(0, len(todo), self.batch_size):
            chunk = todo[b:b + self.batch_size]
            if self.timeout_s is not None and time.perf_counter() - start > self.timeout_s:
                self.stats.timeouts += len(todo) - b
                break
            t0 = time.perf_counter()
            texts = self._generator()([prompts[i] for i in chunk])
            self.stats.seconds += time.perf_counter() - t0
            self.stats.calls += len(chunk)
            for i, text in zip(chunk, texts):
                replies[i] = self._cache[keys[i]] = str(text)
        for i, key in enumerate(keys):
            if replies[i] is None and key in self._cache:
                replies[i] = self._cache[key]
        return replies


def _tuple(value: Any) -> Any:
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


def _question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return str((users or list(prompt))[-1].get("content", ""))


_SCORE = re.compile(r"(?<![\d.])(10|[0-9])(?:\s*/\s*10)?(?![\d.])")


def parse_score(reply: str | None, top: int = 10) -> float | None:
    """The first whole number 0..``top`` in a judge's reply, as a fraction of ``top``; None if there is none.

    ``"7"``, ``"Score: 7/10"`` and ``"7 out of 10"`` all give 0.7; ``"seven"``, ``""`` and
    ``"12"`` give None."""
    if reply is None:
        return None
    match = _SCORE.search(reply)
    if match is None or int(match.group(1)) > top:
        return None
    return int(match.group(1)) / top


def parse_group_ranking(reply: str | None, n: int) -> list[int] | None:
    """The order a judge gave to ``n`` numbered answers, best first, as 0-based indices; None if unusable.

    Reads the answer numbers 1..n in the order they appear (``"2 > 1 > 3"``, ``"2, 1, 3"``,
    ``"Ranking: [2] [1] [3]"``), keeping the first mention of each. All n mentioned: that
    order. All but one: the missing one is last. Fewer, or a number outside 1..n before the
    ranking is complete: None (TRL's unscorable)."""
    if reply is None or n < 1:
        return None
    order: list[int] = []
    for token in re.findall(r"\d+", reply):
        k = int(token)
        if not 1 <= k <= n:
            return None if len(order) < n - 1 else _complete(order, n)
        if k - 1 not in order:
            order.append(k - 1)
        if len(order) == n:
            break
    return _complete(order, n) if len(order) >= n - 1 else None


def _complete(order: list[int], n: int) -> list[int]:
    return order + [k for k in range(n) if k not in order]


def _rubric_turn(question: str, answer: str, rubric: str) -> dict:
    return {"role": "user", "content": f"Rubric: {rubric}\nQuestion: {question}\nAnswer: {answer}\n"
                                       "Score the answer from 0 to 10."}


def _rubric_prompt(question: str, answer: str, rubric: str) -> list[dict]:
    """System turn, two worked judgments (a small judge copies their form), the case, and ``Score:``."""
    return [{"role": "system", "content": "You grade answers. Reply with one whole number from 0 to 10 and nothing "
                                          "else: 10 is a perfect answer, 0 is a wrong one."},
            _rubric_turn("What is 6 + 7?", "13", rubric), {"role": "assistant", "content": "Score: 10"},
            _rubric_turn("What is 6 + 7?", "15", rubric), {"role": "assistant", "content": "Score: 0"},
            _rubric_turn(question, answer, rubric),
            {"role": "prefill", "content": "Score:"}]


def _group_turn(question: str, answers: Sequence[str], rubric: str) -> dict:
    listed = "\n".join(f"Answer {k + 1}: {a}" for k, a in enumerate(answers))
    return {"role": "user", "content": f"Rubric: {rubric}\nQuestion: {question}\n{listed}\n"
                                       "Rank the answers, best first."}


def _group_prompt(question: str, answers: Sequence[str], rubric: str) -> list[dict]:
    """System turn, one worked ranking, the group, and ``Ranking (best first):``."""
    return [{"role": "system", "content": "You compare answers to the same question. Reply with the answer numbers "
                                          "from best to worst, separated by spaces, and nothing else."},
            _group_turn("What is 6 + 7?", ["15", "13", "14"], rubric),
            {"role": "assistant", "content": "Ranking (best first): 2 3 1"},
            _group_turn(question, answers, rubric),
            {"role": "prefill", "content": "Ranking (best first):"}]


def _log(kwargs: dict, judge: Judge, before: JudgeStats, started: float) -> None:
    log_metric = kwargs.get("log_metric")
    if callable(log_metric):
        log_metric("judge/calls", judge.stats.calls - before.calls)
        log_metric("judge/s", time.perf_counter() - started)
        log_metric("judge/unparsable", judge.stats.unparsable - before.unparsable)
        log_metric("judge/cache_hits", judge.stats.cache_hits - before.cache_hits)


def _snapshot(stats: JudgeStats) -> JudgeStats:
    return JudgeStats(**vars(stats))


def make_rubric_judge_reward(judge: Judge | Any = None, rubric: str = DEFAULT_RUBRIC, *,
                             name: str = "rubric_judge_reward") -> Callable:
    """A pointwise judge reward: the judge scores each completion 0-10 against ``rubric``; reward = score / 10.

    ``judge``: a :class:`Judge`, or what ``Judge(model=...)`` takes (default the embedded
    SmolLM2). An unparsable reply or one past the time limit scores None (counted in
    ``judge.stats``)."""
    judge = judge if isinstance(judge, Judge) else Judge() if judge is None else Judge(model=judge)
    if not isinstance(rubric, str) or not rubric.strip():
        raise ValueError("rubric is empty: say what a good answer is, e.g. "
                         f"rubric={DEFAULT_RUBRIC!r}.")

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        before, started = _snapshot(judge.stats), time.perf_counter()
        questions = [_question(p) for p in (prompts or [""] * len(completions))]
        answers = [completion_text(c) for c in completions]
        keys = [("rubric", q, a, rubric) for q, a in zip(questions, answers)]
        replies = judge.ask(keys, [_rubric_prompt(q, a, rubric) for q, a in zip(questions, answers)])
        scores = [parse_score(r) for r in replies]
        judge.stats.unparsable += sum(s is None and r is not None for s, r in zip(scores, replies))
        _log(kwargs, judge, before, started)
        return scores

    reward.__name__ = reward.__qualname__ = name
    reward.judge = judge
    return reward


def make_group_judge_reward(judge: Judge | Any = None, rubric: str = DEFAULT_RUBRIC, *,
                            name: str = "group_judge_reward") -> Callable:
    """A group-relative (RULER-style) judge reward: each prompt's completions are ranked together.

    The completions of one prompt are the consecutive rows with the same prompt (the
    trainer's prompt-major order, G per prompt). Reward: ``1 - rank / (G - 1)``, so the best
    of a group gets 1.0 and the worst 0.0 (a group of one gets 1.0). An unusable ranking gives
    the whole group None."""
    judge = judge if isinstance(judge, Judge) else Judge() if judge is None else Judge(model=judge)

    def reward(prompts=None, completions=(), **kwargs) -> list[float | None]:
        before, started = _snapshot(judge.stats), time.perf_counter()
        prompts = list(prompts) if prompts is not None else [""] * len(completions)
        answers = [completion_text(c) for c in completions]
        groups: list[tuple[int, int]] = []
        for i in range(len(answers)):
            if i == 0 or prompts[i] != prompts[i - 1]:
                groups.append((i, i + 1))
            else:
                groups[-1] = (groups[-1][0], i + 1)
        keys = [("group", _question(prompts[a]), tuple(answers[a:b]), rubric) for a, b in groups]
        requests = [_group_prompt(_question(prompts[a]), answers[a:b], rubric) for a, b in groups]
        replies = judge.ask(keys, requests)
        scores: list[float | None] = [None] * len(answers)
        for (a, b), reply in zip(groups, replies):
            size = b - a
            order = parse_group_ranking(reply, size)
            if order is None:
                judge.stats.unparsable += reply is not None
                continue
            for rank, k in enumerate(order):
                scores[a + k] = 1.0 if size == 1 else 1.0 - rank / (size - 1)
        _log(kwargs, judge, before, started)
        return scores

    reward.__name__ = reward.__qualname__ = name
    reward.judge = judge
    return reward


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's kappa of two binary raters: ``(p_o - p_e) / (1 - p_e)`` (Cohen 1960).

    ``p_o`` is the observed agreement, ``p_e`` the agreement expected by chance from each
    rater's own rate of "yes". 1 is perfect agreement, 0 is chance, below 0 worse than chance.
    NaN when ``p_e`` is 1 (both raters always say the same thing: kappa is undefined)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"cohen_kappa needs two equally long, non-empty lists; got {len(a)} and {len(b)}.")
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(map(bool, a)) / n, sum(map(bool, b)) / n
    p_e = pa * pb + (1 - pa) * (1 - pb)
    return math.nan if p_e == 1 else (p_o - p_e) / (1 - p_e)


def agreement(judge_scores: Sequence[float | None], verdicts: Sequence[bool], threshold: float = 0.5) -> dict:
    """How well a judge agrees with a verifier: accuracy and Cohen's kappa of "score >= threshold" vs the verdict.

    Unscored samples (None) are left out and counted. Returns ``{"n", "unscored", "accuracy",
    "kappa", "judge_yes_rate", "verifier_yes_rate"}``."""
    pairs = [(s >= threshold, bool(v)) for s, v in zip(judge_scores, verdicts) if s is not None]
    if not pairs:
        return {"n": 0, "unscored": len(verdicts), "accuracy": math.nan, "kappa": math.nan,
                "judge_yes_rate": math.nan, "verifier_yes_rate": math.nan}
    judged, truth = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"n": len(pairs), "unscored": len(verdicts) - len(pairs),
            "accuracy": sum(x == y for x, y in pairs) / len(pairs), "kappa": cohen_kappa(judged, truth),
            "judge_yes_rate": sum(judged) / len(pairs), "verifier_yes_rate": sum(truth) / len(pairs)}


def held_out_answers(n: int = 12, group: int = 4, seed: int = 0) -> tuple[list, list[str], list[str]]:
    """``(prompts, completions, answers)``: ``group`` samples of the tiny model (temperature 1, seeded)
    for each of ``n`` held-out arithmetic problems, prompt-major: the answers lesson 09's judge grades."""
    from .data import get_task
    from .models import load_policy
    from .rollout import SamplingConfig, make_engine

    model, tokenizer = load_policy("tiny")
    problems = get_task("arithmetic", split="test", n=n, seed=seed + 11)
    out = make_engine("hf", model, tokenizer).generate(list(problems["prompt"]), n=group,
                                                       sampling=SamplingConfig(max_tokens=6, temperature=1.0,
                                                                               seed=seed))
    prompts = [p for p in problems["prompt"] for _ in range(group)]
    answers = [a for a in problems["answer"] for _ in range(group)]
    return prompts, list(out.texts), answers


def pairwise_order(scores: list, verdicts: list[bool], group: int) -> tuple[float, int]:
    """Share of (right, wrong) pairs within a group that the ranking puts right first; the number of pairs."""
    wins = pairs = 0
    for start in range(0, len(scores), group):
        s, v = scores[start:start + group], verdicts[start:start + group]
        if any(x is None for x in s):
            continue
        for i in range(group):
            for j in range(group):
                if v[i] and not v[j]:
                    pairs += 1
                    wins += s[i] > s[j]
    return (wins / pairs if pairs else float("nan")), pairs
