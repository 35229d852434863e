"""Checks of lesson 12's exercises (the loss mask of a trajectory; a guessing-game environment)."""

from __future__ import annotations

import inspect

from ..feedback import Hint

# A trajectory worked by hand: call, result, call, result, answer (ids are arbitrary).
_SEGMENTS = [("model", [5, 6, 7, 2]), ("tool", [9, 40, 41, 2, 9, 3]), ("model", [8, 8, 2]),
             ("tool", [9, 42, 2, 9, 3]), ("model", [11, 2])]
_IDS = [5, 6, 7, 2, 9, 40, 41, 2, 9, 3, 8, 8, 2, 9, 42, 2, 9, 3, 11, 2]
_MASK = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1]


def check_trajectory_loss_mask(fn) -> None:
    out = fn([(w, list(p)) for w, p in _SEGMENTS])
    if not (isinstance(out, tuple) and len(out) == 2):
        raise Hint(f"return a pair (ids, mask); got {type(out).__name__}.")
    ids, mask = (list(x) for x in out)
    if ids != _IDS:
        raise Hint(f"ids must be every segment's ids concatenated in order, tool results included (the model reads "
                   f"them); expected {_IDS}, got {ids}.")
    if len(mask) != len(ids):
        raise Hint(f"the mask needs one entry per id ({len(ids)}), got {len(mask)}: a mask per segment or per turn is "
                   "not a token mask.")
    if mask == [1 - m for m in _MASK]:
        raise Hint("the mask is inverted: 1 marks tokens the model wrote (trained), 0 the tool's tokens.")
    ends = [3, 12, 19]  # each model turn's end-of-turn token
    if [m for i, m in enumerate(mask) if i not in ends] == [m for i, m in enumerate(_MASK) if i not in ends] \
            and any(mask[i] != 1 for i in ends):
        raise Hint("every model token is trained, its end-of-turn token included: the model chose to stop there.")
    if mask[:4] == _MASK[:4] and not any(mask[10:13] + mask[18:]):
        raise Hint("only the first turn is trained: model turns after a tool result are 1 again (the mask has holes, "
                   "it does not end at the first tool result).")
    if mask != _MASK:
        wrong = [i for i, (a, b) in enumerate(zip(mask, _MASK)) if a != b]
        raise Hint(f"positions {wrong} are wrong: the tool's tokens (the result and the header the loop writes before "
                   "the next model turn) are all 0, and model turns after a tool result are 1 again.")
    if tuple(map(list, fn([("model", []), ("tool", [1]), ("model", [])]))) != ([1], [0]):
        raise Hint("an empty segment adds nothing (a model turn can be empty when the budget ran out).")


def check_guessing_game(cls) -> None:
    if not inspect.isclass(cls):
        raise Hint("GuessingGame must be a class: environment_factory calls it to make one instance per rollout.")
    game = cls()
    try:
        text = game.reset(secret="42", prompt=[{"role": "user", "content": "Play"}], split="train")
    except TypeError as error:
        raise Hint(f"reset receives the whole dataset row as keywords (secret, prompt, ...): accept **row. ({error})")
    if text != "I am thinking of a number between 1 and 100.":
        raise Hint(f"reset must return the text appended to the user's message; got {text!r}.")
    if game.get_reward() != 0.0:
        raise Hint("before any guess the reward is 0.0.")
    answers = [game.guess(number=n) for n in (50, 20, 42)]
    if answers != ["lower", "higher", "correct"]:
        raise Hint(f"guesses 50, 20, 42 against secret 42 must answer ['lower', 'higher', 'correct']; got {answers}. "
                   "'higher' means the secret is higher than the guess. (Did you compare with the string '42'? "
                   "Store int(secret).)")
    reward = game.get_reward()
    if reward == 0.0:
        raise Hint("42 was guessed but get_reward says 0.0: compare numbers, not text. Store int(secret) in reset.")
    if abs(reward - 0.8) > 1e-9:
        raise Hint(f"three guesses, the last correct: reward 1.0 - 0.1 * 2 = 0.8; got {reward!r}.")
    game.reset(secret=42, prompt=None)
    if game.get_reward() != 0.0:
        raise Hint("reset must forget the previous game's guesses (set a new list on self in reset, not on the class): "
                   "one instance serves many rollouts in turn.")
    game.guess(number=42)
    if game.get_reward() != 1.0:
        raise Hint("a first correct guess earns 1.0.")
    game.guess(number=7)  # a guess after the secret was found
    after = game.get_reward()
    if after == 0.0:
        raise Hint("42 was guessed, then 7: the secret WAS found, so the reward is 1.0 - 0.1 * 1 = 0.9, not 0.0. "
                   "Check whether any guess was correct (secret in guesses), not only the last one.")
    if abs(after - 0.9) > 1e-9:
        raise Hint(f"guesses 42 (correct), then 7: two guesses, one after the first, so 1.0 - 0.1 * 1 = 0.9; "
                   f"got {after!r}. Every guess counts, including those after the correct one.")
    for _ in range(14):
        game.guess(number=1)
    if game.get_reward() != 0.0:
        raise Hint(f"16 guesses, one correct: the reward never goes below 0.0, max(0, 1 - 1.5) = 0.0; "
                   f"got {game.get_reward()!r}.")
    other = cls()
    other.reset(secret=3)
    other.guess(number=5)
    if other.get_reward() != 0.0:
        raise Hint("a game whose secret was never guessed earns 0.0.")
    _check_tool_schema(cls)
    _check_played(cls)


def _bisection_guesses(secret: int, low: int = 1, high: int = 100) -> int:
    """How many guesses binary search (guess the middle, rounded down) needs to hit ``secret``."""
    count = 0
    while True:
        count += 1
        middle = (low + high) // 2
        if middle == secret:
            return count
        low, high = (middle + 1, high) if secret > middle else (low, middle - 1)


def _bisect(text: str) -> str:
    """A scripted player: binary search over 1..100 from the feedback in the conversation so far."""
    import re

    game = text.rsplit("<|im_start|>user", 1)[-1]
    low, high = 1, 100
    for number, answer in zip(re.findall(r'"number": (\d+)', game), re.findall(r"<\|im_start\|>tool\n(\w+)", game)):
        if answer == "correct":
            return f"It is {number}."
        low, high = (int(number) + 1, high) if answer == "higher" else (low, int(number) - 1)
    return f'<tool_call>{{"name": "guess", "arguments": {{"number": {(low + high) // 2}}}}}</tool_call>'


def _check_played(cls) -> None:
    """The game played for real: a scripted binary search through the rollout loop, one instance
    per rollout made by ``environment_factory``, scored from each game's ``get_reward()``."""
    from datasets import Dataset

    from ..models import load_policy
    from ..rollout.warmup import ScriptedPolicy
    from ..tool_evaluation import evaluate_tool_accuracy

    model, tokenizer = load_policy("tiny")
    secrets = [42, 1, 100, 73]
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Find my number."}]] * len(secrets),
                              "secret": secrets})
    result = evaluate_tool_accuracy(model, tokenizer, rows, environment_factory=cls, score="environment",
                                    max_tool_calling_iterations=8, max_completion_length=1000, progress=False,
                                    engine=ScriptedPolicy(tokenizer, _bisect), success_reward=0.0)
    for secret, reward, calls, text in zip(secrets, result.rewards, result.calls, result.texts):
        needed = _bisection_guesses(secret)
        expected = max(0.0, 1.0 - 0.1 * (needed - 1))
        if calls != needed or reward is None or abs(reward - expected) > 1e-9:
            raise Hint(f"played through the rollout loop by a binary search, secret {secret} takes {needed} guesses "
                       f"and should earn {expected:.1f}; the game answered {calls} calls and get_reward gave {reward!r}. "
                       f"The trajectory: {text[:300]!r}")


def _check_tool_schema(cls) -> None:
    from ..rollout.tool_calls import tool_schema
    from ..rollout.tools import public_methods

    names = [m.__name__ for m in public_methods(cls())]
    if names != ["guess"]:
        raise Hint(f"the tools are the public methods other than reset and get_reward; expected ['guess'], got {names}. "
                   "Prefix helpers with an underscore.")
    try:
        tool_schema(cls().guess)
    except Exception as error:  # the schema builder's own message says what is missing
        raise Hint(f"guess needs type hints and a Google-style docstring with an Args section: {error}")
