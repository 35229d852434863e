"""Checks for lesson 00 (setup)."""

from ..feedback import Hint


def check_to_conversational(fn) -> None:
    got = fn("What is 2 + 2?")
    if isinstance(got, dict):
        raise Hint("return a *list* of messages, even when there is only one.")
    if got != [{"role": "user", "content": "What is 2 + 2?"}]:
        raise Hint(f"expected [{{'role': 'user', 'content': 'What is 2 + 2?'}}], got {got!r}.")
    with_system = fn("Hi", system="Be brief.")
    if with_system and with_system[-1].get("role") == "system":
        raise Hint("the system message comes first, before the user's question.")
    if with_system != [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]:
        raise Hint(f"with a system prompt, expected a system message then the user message; got {with_system!r}.")
