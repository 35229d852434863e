"""Lesson 12 exercises: the loss mask of a multi-turn trajectory, and an environment.

`trajectory_loss_mask` turns a trajectory, given as its pieces in order, into the mask the
policy-gradient loss uses (``tool_mask`` in TRL 1.16 and in `course_lib/rollout/agents.py`).
`GuessingGame` is an environment in the shape TRL's ``environment_factory`` expects.
"""


def trajectory_loss_mask(segments: list[tuple[str, list[int]]]) -> tuple[list[int], list[int]]:
    """The ids and the loss mask of a trajectory.

    Args:
        segments: the trajectory after the prompt, in order, as ``(writer, ids)`` pairs.
            ``writer`` is ``"model"`` for tokens the policy sampled (its turns, each ending
            with its end-of-turn token) or ``"tool"`` for tokens the rollout loop appended
            (a tool result with its turn markers, and the header that opens the model's
            next turn). A segment may be empty.

    Returns:
        ``(ids, mask)``: all ids concatenated in order (nothing dropped, nothing
        re-tokenized), and a list of the same length with 1 on every model token and 0 on
        every tool token.
    """
    # BEGIN SOLUTION
    # HINT: walk the segments in order; extend ids with each segment's ids and mask with as many 1s (model) or 0s (tool).
    # HINT: usual mistakes: dropping the tool ids (the model reads them), one mask entry per segment instead of per
    # HINT: token, a 0 on the model's end-of-turn token, and masking every turn after the first tool result.
    ids, mask = [], []
    for writer, piece in segments:
        if writer not in ("model", "tool"):
            raise ValueError(f"writer must be 'model' or 'tool', got {writer!r}")
        ids += list(piece)
        mask += [1 if writer == "model" else 0] * len(piece)
    return ids, mask
    # END SOLUTION


class GuessingGame:
    """Find a secret integer with one tool, ``guess``; rewarded for finding it.

    The factory calls ``GuessingGame()`` with no arguments, then ``reset(**row)`` once per
    rollout with the rollout's dataset row (a column ``secret`` holds the number; the row
    has other columns too, such as ``prompt``).
    """

    def reset(self, secret, **row):
        """Start a new game: remember ``secret`` (as an int), forget every earlier guess.

        Returns the text appended to the user's message: exactly
        ``"I am thinking of a number between 1 and 100."``
        """
        # BEGIN SOLUTION
        # HINT: store int(secret) and an empty list of guesses on self; every rollout starts fresh.
        # HINT: usual mistakes: keeping the secret as text ("42" != 42), a guess list on the class (shared by
        # HINT: every game), and a reset without **row (it receives the whole dataset row).
        self.secret, self.guesses = int(secret), []
        return "I am thinking of a number between 1 and 100."
        # END SOLUTION

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the guess

        Returns "higher" when the secret is larger than the guess, "lower" when it is
        smaller, "correct" when they are equal. Every guess is remembered.
        """
        # BEGIN SOLUTION
        self.guesses.append(int(number))
        if self.secret > number:
            return "higher"
        if self.secret < number:
            return "lower"
        return "correct"
        # END SOLUTION

    def get_reward(self) -> float:
        """1.0 if some guess was correct, minus 0.1 per guess after the first (never below
        0.0); 0.0 if the secret was never guessed."""
        # BEGIN SOLUTION
        if self.secret not in self.guesses:
            return 0.0
        return max(0.0, 1.0 - 0.1 * (len(self.guesses) - 1))
        # END SOLUTION
