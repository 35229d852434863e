"""Checks of lesson 12's exercises (the loss mask of a trajectory; a guessing-game environment; trajectory-level
and turn-level credit)."""

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


# ---------------------------------------------------------------------------------------
# Credit: one advantage per trajectory (GRPO) or one per turn (discounted return-to-go)
# ---------------------------------------------------------------------------------------
# A group of three guessing games, each model turn a guess rewarded by its feedback (-0.1 for a
# miss, 1.0 for the secret): A finds it at the third guess, B at the first, C never (three misses).
_REWARDS = [[-0.1, -0.1, 1.0], [1.0], [-0.1, -0.1, -0.1]]
_TURNS = [[0, 0, -1, -1, 1, 1, -1, -1, 2, 2, 2], [0, 0, 0], [0, 0, -1, -1, 1, -1, -1, 2, 2]]  # -1: tool tokens
# Worked by hand: returns R = (0.8, 1.0, -0.3), mean 0.5, unbiased std sqrt((0.09 + 0.25 + 0.64) / 2) = 0.7,
# so A = (0.3, 0.5, -0.8) / (0.7 + 1e-4).
_TRAJECTORY = [0.3 / 0.7001, 0.5 / 0.7001, -0.8 / 0.7001]
# gamma = 0.5, returns-to-go G_t = r_t + 0.5 G_{t+1}: A (0.1, 0.4, 1.0), B (1.0,), C (-0.175, -0.15, -0.1);
# pooled over the 7 turns: mean 2.075 / 7 = 0.296429, unbiased std 0.519818 (numpy, ddof=1).
_TURN = [[-0.3781835279913407, 0.19940586021361606, 1.3545846366235295], [1.3545846366235295],
         [-0.9076404671792178, -0.8595080181621381, -0.7632431201279786]]
_GAMMA = 0.5


def _standardize(values, eps=1e-4, unbiased=True):
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / (len(values) - (1 if unbiased else 0))) ** 0.5
    return [(v - mean) / (spread + eps) for v in values]


def _token_values(fn, args, kwargs, name):
    """Call the learner's function on copies; check its shape and the tool tokens; return it."""
    import copy
    import math

    try:
        out = fn(*copy.deepcopy(args), **kwargs)
    except ZeroDivisionError as error:
        raise Hint(f"{name} divided by zero ({error}): a standard deviation over one value (one trajectory's turns, "
                   "or a single turn) has n - 1 = 0. Standardise over the whole group (see the docstring).")
    token_turns = args[1]
    try:
        out = [[float(v) for v in row] for row in out]
    except TypeError:
        out = None
    if out is None or len(out) != len(token_turns) or any(len(r) != len(t) for r, t in zip(out, token_turns)):
        raise Hint(f"{name} returns one list per trajectory with one advantage per token, shaped like token_turns "
                   f"(lengths {[len(t) for t in token_turns]}).")
    if any(math.isnan(v) for row in out for v in row):
        raise Hint(f"{name} gave NaN: when every value of the group is equal the std is 0, and "
                   "(x - mean) / (std + eps) is 0, not NaN; add eps to the std (and standardise over the whole group, never over one value).")
    if any(v != 0.0 for row, turns in zip(out, token_turns) for v, turn in zip(row, turns) if turn < 0):
        raise Hint(f"{name}: tool tokens (turn -1) must get 0.0: the rollout loop wrote them, the model did not, "
                   "so no advantage moves their log-probs (the holes of exercise 1's mask).")
    return out


def _per_unit_values(out, token_turns, by_turn: bool, name: str):
    """The one value per trajectory (by_turn False) or per turn, refusing tokens of one unit that differ."""
    values = []
    for i, (row, turns) in enumerate(zip(out, token_turns)):
        units = {}
        for value, turn in zip(row, turns):
            if turn >= 0:
                units.setdefault(turn if by_turn else 0, []).append(value)
        for turn, seen in units.items():
            if max(seen) - min(seen) > 1e-9:
                if by_turn:
                    raise Hint(f"{name}: the tokens of trajectory {i}'s turn {turn} hold different values {seen}; "
                               "every token of a turn gets its turn's advantage.")
                raise Hint(f"{name}: trajectory {i}'s model tokens hold different values {sorted(set(seen))}; "
                           "trajectory-level credit is ONE scalar per trajectory, the same on every model token "
                           "(one value per turn is turn_advantages, the next function).")
        values.append([units[t][0] for t in sorted(units)] if by_turn else units[0][0])
    return values


def check_trajectory_advantages(fn) -> None:
    from ..feedback import assert_close

    name = "trajectory_advantages"
    out = _token_values(fn, (_REWARDS, _TURNS), {}, name)
    got = _per_unit_values(out, _TURNS, False, name)
    returns = [sum(r) for r in _REWARDS]
    mean = sum(returns) / len(returns)
    tokens = [R for R, turns in zip(returns, _TURNS) for t in turns if t >= 0]
    token_mean = sum(tokens) / len(tokens)
    token_std = (sum((v - token_mean) ** 2 for v in tokens) / (len(tokens) - 1)) ** 0.5
    assert_close(got, _TRAJECTORY, name=name, hints={
        "a trajectory's return R_i is the SUM of its turn rewards, not its last turn's reward.":
            _standardize([r[-1] for r in _REWARDS]),
        "R_i is the sum of the turn rewards, not their mean: with the mean a game that missed twice before finding "
        "the secret is paid almost as little as one that never found it.":
            _standardize([sum(r) / len(r) for r in _REWARDS]),
        "the std divides by G - 1 (unbiased, as torch.std and TRL's GRPO), not by G.":
            _standardize(returns, unbiased=False),
        "subtract the group mean AND divide by the group's std (+ eps): GRPO standardises the returns.":
            [R - mean for R in returns],
        "divide by std + eps (eps = 1e-4), not by the std alone.": _standardize(returns, eps=0.0),
        "the mean and std are over the G trajectories, one return each, not over tokens (a long trajectory would "
        "count many times).": [(R - token_mean) / (token_std + 1e-4) for R in returns],
    })
    equal = _token_values(fn, ([[0.5, 0.5], [1.0]], [[0, -1, 1], [0, 0]]), {}, name)
    if any(v != 0.0 for row in equal for v in row):
        raise Hint(f"{name}: two trajectories with the same return (1.0) must get 0.0 everywhere; got {equal}.")


def check_turn_advantages(fn) -> None:
    from ..feedback import assert_close

    name = "turn_advantages"
    out = _token_values(fn, (_REWARDS, _TURNS), {"gamma": _GAMMA}, name)
    got = _per_unit_values(out, _TURNS, True, name)
    if [len(g) for g in got] != [len(r) for r in _REWARDS]:
        raise Hint(f"{name}: expected one value per model turn, {[len(r) for r in _REWARDS]} turns per trajectory.")
    if all(max(g) - min(g) < 1e-9 for g in got if len(g) > 1):
        raise Hint(f"{name}: every turn of a trajectory got the same value; turn-level credit judges each turn by the "
                   "rewards from that turn on, so the turns of a game differ (one value per trajectory is "
                   "trajectory_advantages).")

    def to_go(discount):  # discount(t, k): the weight of reward k in turn t's return
        return [[sum(discount(t, k) * r[k] for k in range(t, len(r))) for t in range(len(r))] for r in _REWARDS]

    def pooled(returns, unbiased=True):
        flat = _standardize([g for row in returns for g in row], unbiased=unbiased)
        return _unflatten(flat, returns)

    right = to_go(lambda t, k: _GAMMA ** (k - t))
    past = [[sum(_GAMMA ** (t - k) * r[k] for k in range(t + 1)) for t in range(len(r))] for r in _REWARDS]
    by_index = [[0.0] * len(r) for r in _REWARDS]
    for t in range(max(len(r) for r in _REWARDS)):
        rows = [i for i, r in enumerate(right) if t < len(r)]
        for i, value in zip(rows, _standardize([right[i][t] for i in rows])):
            by_index[i][t] = value
    own = [[0.0] if len(g) == 1 else _standardize(g, unbiased=False) for g in right]
    flat_got = [v for row in got for v in row]
    assert_close(flat_got, [v for row in _TURN for v in row], name=name, hints={
        "a turn's return adds the rewards of the turns AFTER it (return-to-go, G_t = r_t + gamma * G_{t+1}); "
        "you used each turn's own reward only.": _flatten(pooled([list(r) for r in _REWARDS])),
        "the return-to-go sums from this turn to the END of the trajectory; you summed from the start up to "
        "this turn (that is what already happened, which this turn cannot change).": _flatten(pooled(past)),
        "the discount counts from the current turn, gamma^(k - t); you used gamma^k.":
            _flatten(pooled(to_go(lambda t, k: _GAMMA ** k))),
        "use the discount gamma: you computed undiscounted returns (gamma = 1).":
            _flatten(pooled(to_go(lambda t, k: 1.0))),
        "standardise the returns-to-go (subtract the mean, divide by the std + eps) over the group's turns.":
            _flatten(right),
        "the std divides by n - 1 (unbiased), n the number of turns in the whole group.":
            _flatten(pooled(right, False)),
        "standardise across the group, all turns of all G trajectories pooled, not within each trajectory (a "
        "one-turn trajectory would then always get 0).": _flatten(own),
        "pool all turns of the group together, not only the turns with the same index t: here a game's turns are "
        "its guesses, and the third guess of one game is compared with every guess of the others.": _flatten(by_index),
    })
    # One turn per trajectory and gamma = 1: turn-level credit is trajectory-level credit. By hand: R = (0.2, 1.0,
    # 0.0, 0.6), mean 0.45, unbiased std sqrt(0.59 / 3) = 0.443471.
    single = _token_values(fn, ([[0.2], [1.0], [0.0], [0.6]], [[0, 0], [0], [0, -1], [0]]), {"gamma": 1.0}, name)
    spread = (0.59 / 3) ** 0.5 + 1e-4
    expected = [[-0.25 / spread] * 2, [0.55 / spread], [-0.45 / spread, 0.0], [0.15 / spread]]
    assert_close([v for row in single for v in row], [v for row in expected for v in row],
                 name=f"{name} with one turn per trajectory (equal to trajectory-level credit there)")


def _flatten(rows):
    return [v for row in rows for v in row]


def _unflatten(flat, like):
    out, start = [], 0
    for row in like:
        out.append(flat[start:start + len(row)])
        start += len(row)
    return out
