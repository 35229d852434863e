"""Lesson 12 exercises: the loss mask of a multi-turn trajectory, an environment, and credit.

`trajectory_loss_mask` turns a trajectory, given as its pieces in order, into the mask the
policy-gradient loss uses (``tool_mask`` in TRL 1.16 and in `course_lib/rollout/agents.py`).
`GuessingGame` is an environment in the shape TRL's ``environment_factory`` expects.
`trajectory_advantages` and `turn_advantages` give the tokens of a group of multi-turn
trajectories their advantages two ways: one number per trajectory (GRPO, TRL 1.16, this
library's trainer) or one per model turn from the rewards that came after it.
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


def trajectory_advantages(turn_rewards: list[list[float]], token_turns: list[list[int]],
                          eps: float = 1e-4) -> list[list[float]]:
    """Trajectory-level credit: GRPO's one advantage per trajectory, on every token its model wrote.

    Args:
        turn_rewards: a group of G >= 2 trajectories sampled for the same prompt;
            ``turn_rewards[i][t]`` is what trajectory ``i`` earned at its model turn ``t``
            (e.g. the feedback to its t-th guess). Every trajectory has at least one turn.
        token_turns: ``token_turns[i][k]`` is the model turn (0, 1, ...) that token ``k`` of
            trajectory ``i`` belongs to, or -1 for a token the rollout loop wrote (a tool
            result, the header after it).
        eps: added to the standard deviation (TRL 1.16's 1e-4).

    Returns:
        A list shaped like ``token_turns``. With ``R_i = sum_t turn_rewards[i][t]`` (the
        trajectory's return), ``A_i = (R_i - mean(R)) / (std(R) + eps)`` over the group, the
        standard deviation unbiased (divided by G - 1, as ``torch.std`` and TRL's GRPO), on
        every model token of trajectory ``i``; 0.0 on every tool token.
    """
    # HINT: returns R_i = sum of trajectory i's turn rewards; mean and std over the G returns (std divides by G - 1).
    # HINT: usual mistakes: R_i = the last turn's reward, the mean of the turn rewards instead of their sum,
    # HINT: dividing by G in the std, no eps, one number per trajectory instead of one per token, and an
    # HINT: advantage on the tool tokens (they get 0.0: the model did not write them).
    # BEGIN SOLUTION
    returns = [sum(rewards) for rewards in turn_rewards]
    mean = sum(returns) / len(returns)
    std = (sum((r - mean) ** 2 for r in returns) / (len(returns) - 1)) ** 0.5
    advantages = [(r - mean) / (std + eps) for r in returns]
    return [[advantages[i] if turn >= 0 else 0.0 for turn in turns] for i, turns in enumerate(token_turns)]
    # END SOLUTION


def turn_advantages(turn_rewards: list[list[float]], token_turns: list[list[int]], gamma: float = 1.0,
                    eps: float = 1e-4) -> list[list[float]]:
    """Turn-level credit: each model turn is judged by the rewards from that turn on.

    Args:
        turn_rewards, token_turns, eps: as in :func:`trajectory_advantages`.
        gamma: the discount per turn, in [0, 1].

    Returns:
        A list shaped like ``token_turns``. Each turn's discounted return-to-go
        ``G_{i,t} = sum_{k >= t} gamma^(k - t) * turn_rewards[i][k]`` (so
        ``G_{i,t} = r_{i,t} + gamma * G_{i,t+1}``); the mean and the unbiased standard
        deviation over **all** turns of **all** G trajectories of the group, pooled;
        ``A_{i,t} = (G_{i,t} - mean) / (std + eps)`` on every token of turn ``t`` of
        trajectory ``i``; 0.0 on every tool token.
    """
    # HINT: walk each trajectory's turns backwards, G = r_t + gamma * G; then standardise all the G values of
    # HINT: the group together. Usual mistakes: summing from the first turn up to t (that is the past, not the
    # HINT: return-to-go), gamma**k instead of gamma**(k - t), standardising each trajectory (or each turn
    # HINT: index) on its own, and tool tokens not 0.0.
    # BEGIN SOLUTION
    returns_to_go = []
    for rewards in turn_rewards:
        future, backwards = 0.0, []
        for reward in reversed(rewards):
            future = reward + gamma * future
            backwards.append(future)
        returns_to_go.append(backwards[::-1])
    flat = [g for returns in returns_to_go for g in returns]
    mean = sum(flat) / len(flat)
    std = (sum((g - mean) ** 2 for g in flat) / (len(flat) - 1)) ** 0.5
    pooled = [(g - mean) / (std + eps) for g in flat]
    starts = [sum(len(r) for r in returns_to_go[:i]) for i in range(len(returns_to_go))]
    return [[pooled[starts[i] + turn] if turn >= 0 else 0.0 for turn in turns] for i, turns in enumerate(token_turns)]
    # END SOLUTION

