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
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_typical_mistake_gets_its_diagnosis(check, wrong, words):
    assert words in _hint_of(check, wrong)


def test_the_reference_shape_passes():
    ex12.check_guessing_game(Game)
