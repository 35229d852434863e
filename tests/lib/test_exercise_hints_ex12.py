"""Lesson 12's graders name the typical mistake (each wrong answer differs from the
reference by one mistake, written out as a learner would write it)."""

from __future__ import annotations

import pytest

from course_lib.checks import ex12
from course_lib.feedback import Hint


def _hint_of(check, wrong) -> str:
    with pytest.raises(Hint) as caught:
        check(wrong)
    return str(caught.value)


def mask_inverted(segments):
    ids = [t for _, piece in segments for t in piece]
    return ids, [0 if w == "model" else 1 for w, piece in segments for _ in piece]


def mask_drops_tool_ids(segments):
    kept = [(w, p) for w, p in segments if w == "model"]
    return [t for _, p in kept for t in p], [1 for _, p in kept for _ in p]


def mask_per_segment(segments):
    return [t for _, p in segments for t in p], [int(w == "model") for w, _ in segments]


def mask_without_end_of_turn(segments):
    ids, mask = [], []
    for writer, piece in segments:
        ids += piece
        mask += [int(writer == "model" and i < len(piece) - 1) for i in range(len(piece))]
    return ids, mask


def mask_only_first_turn(segments):
    ids, mask, seen_tool = [], [], False
    for writer, piece in segments:
        seen_tool = seen_tool or writer == "tool"
        ids += piece
        mask += [int(writer == "model" and not seen_tool)] * len(piece)
    return ids, mask


class Game:
    def reset(self, secret, **row):
        self.secret, self.guesses = int(secret), []
        return "I am thinking of a number between 1 and 100."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the guess
        """
        self.guesses.append(number)
        return "higher" if self.secret > number else "lower" if self.secret < number else "correct"

    def get_reward(self) -> float:
        return max(0.0, 1.0 - 0.1 * (len(self.guesses) - 1)) if self.secret in self.guesses else 0.0


class GameWithoutRowKeywords(Game):
    def reset(self, secret):
        return super().reset(secret)


class GameComparingStrings(Game):
    def reset(self, secret, **row):
        text = super().reset(secret)
        self.secret = secret  # the dataset's "42" kept as text
        return text

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the guess
        """
        self.guesses.append(number)
        return "correct" if str(number) == str(self.secret) else "higher" if str(self.secret) > str(number) else "lower"


class GameSwapped(Game):
    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the guess
        """
        self.guesses.append(number)
        return "lower" if self.secret > number else "higher" if self.secret < number else "correct"


class GameRememberingOldGuesses(Game):
    guesses: list = []

    def reset(self, secret, **row):
        self.secret = int(secret)
        return "I am thinking of a number between 1 and 100."


class GameWithNegativeReward(Game):
    def get_reward(self) -> float:
        return 1.0 - 0.1 * (len(self.guesses) - 1) if self.secret in self.guesses else 0.0


class GameWithPublicHelper(Game):
    def distance(self) -> int:
        return 0


class GamePayingOnlyForTheLastGuess(Game):
    def get_reward(self) -> float:
        found = bool(self.guesses) and self.guesses[-1] == self.secret
        return max(0.0, 1.0 - 0.1 * (len(self.guesses) - 1)) if found else 0.0


class GameNotCountingGuessesAfterTheSecret(Game):
    def get_reward(self) -> float:
        if self.secret not in self.guesses:
            return 0.0
        return max(0.0, 1.0 - 0.1 * self.guesses.index(self.secret))


def _std(values, ddof=1):
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - ddof)) ** 0.5


def _spread(turns, values):
    """Each model token gets values[turn]; tool tokens 0."""
    return [values[t] if t >= 0 else 0.0 for t in turns]


def credit_one_number_per_trajectory(turn_rewards, token_turns, eps=1e-4):
    returns = [sum(r) for r in turn_rewards]
    mean, std = sum(returns) / len(returns), _std(returns)
    return [(R - mean) / (std + eps) for R in returns]  # not broadcast to the tokens


def credit_last_reward(turn_rewards, token_turns, eps=1e-4):
    returns = [r[-1] for r in turn_rewards]
    mean, std = sum(returns) / len(returns), _std(returns)
    return [[(R - mean) / (std + eps) if t >= 0 else 0.0 for t in turns] for R, turns in zip(returns, token_turns)]


def credit_mean_reward(turn_rewards, token_turns, eps=1e-4):
    returns = [sum(r) / len(r) for r in turn_rewards]
    mean, std = sum(returns) / len(returns), _std(returns)
    return [[(R - mean) / (std + eps) if t >= 0 else 0.0 for t in turns] for R, turns in zip(returns, token_turns)]


def credit_population_std(turn_rewards, token_turns, eps=1e-4):
    returns = [sum(r) for r in turn_rewards]
    mean, std = sum(returns) / len(returns), _std(returns, ddof=0)
    return [[(R - mean) / (std + eps) if t >= 0 else 0.0 for t in turns] for R, turns in zip(returns, token_turns)]


def credit_without_eps(turn_rewards, token_turns, eps=1e-4):
    import statistics

    returns = [sum(r) for r in turn_rewards]
    mean, std = statistics.mean(returns), statistics.stdev(returns)
    return [[(R - mean) / std if t >= 0 else 0.0 for t in turns] for R, turns in zip(returns, token_turns)]


def credit_on_tool_tokens(turn_rewards, token_turns, eps=1e-4):
    returns = [sum(r) for r in turn_rewards]
    mean, std = sum(returns) / len(returns), _std(returns)
    return [[(R - mean) / (std + eps) for _ in turns] for R, turns in zip(returns, token_turns)]


def credit_over_tokens(turn_rewards, token_turns, eps=1e-4):
    returns = [sum(r) for r in turn_rewards]
    per_token = [R for R, turns in zip(returns, token_turns) for t in turns if t >= 0]
    mean, std = sum(per_token) / len(per_token), _std(per_token)
    return [[(R - mean) / (std + eps) if t >= 0 else 0.0 for t in turns] for R, turns in zip(returns, token_turns)]


def credit_per_turn_in_trajectory_function(turn_rewards, token_turns, eps=1e-4):
    flat = [r for rewards in turn_rewards for r in rewards]
    mean, std = sum(flat) / len(flat), _std(flat)
    return [[(rewards[t] - mean) / (std + eps) if t >= 0 else 0.0 for t in turns]
            for rewards, turns in zip(turn_rewards, token_turns)]


def _returns_to_go(rewards, gamma):
    out, future = [], 0.0
    for r in reversed(rewards):
        future = r + gamma * future
        out.insert(0, future)
    return out


def _pooled(per_trajectory, token_turns, eps=1e-4, ddof=1):
    flat = [g for row in per_trajectory for g in row]
    mean, std = sum(flat) / len(flat), _std(flat, ddof)
    return [_spread(turns, [(g - mean) / (std + eps) for g in row]) for row, turns in zip(per_trajectory, token_turns)]


def turns_immediate_reward(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return _pooled([list(r) for r in turn_rewards], token_turns, eps)


def turns_summed_from_the_start(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    sums = []
    for rewards in turn_rewards:
        total, row = 0.0, []
        for r in rewards:
            total = r + gamma * total
            row.append(total)
        sums.append(row)
    return _pooled(sums, token_turns, eps)


def turns_absolute_discount(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    returns = [[sum(gamma ** k * r[k] for k in range(t, len(r))) for t in range(len(r))] for r in turn_rewards]
    return _pooled(returns, token_turns, eps)


def turns_without_discount(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return _pooled([_returns_to_go(r, 1.0) for r in turn_rewards], token_turns, eps)


def turns_not_standardised(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return [_spread(turns, _returns_to_go(r, gamma)) for r, turns in zip(turn_rewards, token_turns)]


def turns_population_std(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return _pooled([_returns_to_go(r, gamma) for r in turn_rewards], token_turns, eps, ddof=0)


def turns_standardised_per_trajectory(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    out = []
    for rewards, turns in zip(turn_rewards, token_turns):
        g = _returns_to_go(rewards, gamma)
        mean, std = sum(g) / len(g), _std(g)  # one turn: 0 / 0
        out.append(_spread(turns, [(v - mean) / (std + eps) for v in g]))
    return out


def turns_standardised_per_index(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    returns = [_returns_to_go(r, gamma) for r in turn_rewards]
    scaled = [[0.0] * len(g) for g in returns]
    for t in range(max(len(g) for g in returns)):
        rows = [i for i, g in enumerate(returns) if t < len(g)]
        column = [returns[i][t] for i in rows]
        mean, std = sum(column) / len(column), _std(column)
        for i in rows:
            scaled[i][t] = (returns[i][t] - mean) / (std + eps)
    return [_spread(turns, row) for row, turns in zip(scaled, token_turns)]


def turns_one_value_per_trajectory(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return credit_population_std(turn_rewards, token_turns, eps)


def turns_on_tool_tokens(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    right = _pooled([_returns_to_go(r, gamma) for r in turn_rewards], token_turns, eps)
    return [[v if t >= 0 else 0.5 for v, t in zip(row, turns)] for row, turns in zip(right, token_turns)]


def reference_turn_advantages(turn_rewards, token_turns, gamma=1.0, eps=1e-4):
    return _pooled([_returns_to_go(r, gamma) for r in turn_rewards], token_turns, eps)


@pytest.mark.parametrize("check, wrong, words", [
    (ex12.check_trajectory_loss_mask, mask_inverted, "inverted"),
    (ex12.check_trajectory_loss_mask, mask_drops_tool_ids, "tool results included"),
    (ex12.check_trajectory_loss_mask, mask_per_segment, "one entry per id"),
    (ex12.check_trajectory_loss_mask, mask_without_end_of_turn, "end-of-turn token included"),
    (ex12.check_trajectory_loss_mask, mask_only_first_turn, "model turns after a tool result are 1 again"),
    (ex12.check_guessing_game, GameWithoutRowKeywords, "accept **row"),
    (ex12.check_guessing_game, GameComparingStrings, "Store int(secret)"),
    (ex12.check_guessing_game, GameSwapped, "'higher' means the secret is higher"),
    (ex12.check_guessing_game, GameRememberingOldGuesses, "forget the previous game"),
    (ex12.check_guessing_game, GameWithNegativeReward, "never goes below 0.0"),
    (ex12.check_guessing_game, GameWithPublicHelper, "Prefix helpers with an underscore"),
    (ex12.check_guessing_game, GamePayingOnlyForTheLastGuess, "not only the last one"),
    (ex12.check_guessing_game, GameNotCountingGuessesAfterTheSecret, "including those after the correct one"),
    (ex12.check_trajectory_advantages, credit_one_number_per_trajectory, "one advantage per token"),
    (ex12.check_trajectory_advantages, credit_last_reward, "SUM of its turn rewards, not its last"),
    (ex12.check_trajectory_advantages, credit_mean_reward, "not their mean"),
    (ex12.check_trajectory_advantages, credit_population_std, "not by G."),
    (ex12.check_trajectory_advantages, credit_without_eps, "std + eps"),
    (ex12.check_trajectory_advantages, credit_on_tool_tokens, "tool tokens (turn -1) must get 0.0"),
    (ex12.check_trajectory_advantages, credit_over_tokens, "not over tokens"),
    (ex12.check_trajectory_advantages, credit_per_turn_in_trajectory_function, "ONE scalar per trajectory"),
    (ex12.check_turn_advantages, turns_immediate_reward, "turns AFTER it"),
    (ex12.check_turn_advantages, turns_summed_from_the_start, "to the END of the trajectory"),
    (ex12.check_turn_advantages, turns_absolute_discount, "gamma^(k - t); you used gamma^k"),
    (ex12.check_turn_advantages, turns_without_discount, "undiscounted"),
    (ex12.check_turn_advantages, turns_not_standardised, "standardise the returns-to-go"),
    (ex12.check_turn_advantages, turns_population_std, "divides by n - 1"),
    (ex12.check_turn_advantages, turns_standardised_per_trajectory, "divided by zero"),
    (ex12.check_turn_advantages, turns_standardised_per_index, "not only the turns with the same index"),
    (ex12.check_turn_advantages, turns_one_value_per_trajectory, "every turn of a trajectory got the same value"),
    (ex12.check_turn_advantages, turns_on_tool_tokens, "tool tokens (turn -1) must get 0.0"),
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_typical_mistake_gets_its_diagnosis(check, wrong, words):
    assert words in _hint_of(check, wrong)


def test_the_reference_shape_passes():
    ex12.check_guessing_game(Game)
    ex12.check_turn_advantages(reference_turn_advantages)
