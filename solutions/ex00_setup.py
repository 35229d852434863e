"""Lesson 00 exercise: the conversational prompt format every task in the course uses."""


def to_conversational(question: str, system: str | None = None) -> list[dict]:
    """Turn a question into TRL's conversational prompt: a list of chat messages.

    Example: ``to_conversational("What is 2 + 2?")`` returns
    ``[{"role": "user", "content": "What is 2 + 2?"}]``; with ``system="Be brief."`` a
    ``{"role": "system", ...}`` message comes first.
    """
    # BEGIN SOLUTION
    # HINT: each message is a dict with the keys "role" and "content".
    messages = [{"role": "system", "content": system}] if system is not None else []
    return messages + [{"role": "user", "content": question}]
    # END SOLUTION
