"""Answers to the closing questions of each lesson, revealed on request.

Every notebook ends with numbered questions (``# 1. ...`` under ``## Questions``). Their
answers live in ``notebooks/answers/NN_topic.md``, one ``## Question k`` section each, so
that a learner can try a question first and then print its answer::

    from course_lib.lesson_answers import show_answer
    show_answer("03", 2)   # lesson 03, question 2
    show_answer(3)         # every answer of lesson 03

``tests/lib/test_answers.py`` checks that every question of every notebook has an answer.
"""

from __future__ import annotations

import re
from pathlib import Path

from .grading import project_root

_QUESTION_HEADING = re.compile(r"^## Question (\d+)\s*$", re.MULTILINE)
_NOTEBOOK_QUESTION = re.compile(r"^# (\d+)\. ", re.MULTILINE)


def _lesson_number(lesson: int | str) -> str:
    text = str(lesson).strip()
    match = re.match(r"^(\d{1,2})([a-z]?)(?:_\w+)?$", text)
    if match is None:
        raise ValueError(f"lesson={lesson!r}: give the lesson's number, "
                         "e.g. show_answer('03', 2), show_answer(3, 2) or show_answer('06b', 1).")
    return f"{int(match.group(1)):02d}{match.group(2)}"


def answers_path(lesson: int | str, root: Path | None = None) -> Path:
    """``notebooks/answers/NN_topic.md`` of a lesson (``lesson`` = 3, "03" or "03_ppo")."""
    number = _lesson_number(lesson)
    folder = (root or project_root()) / "notebooks" / "answers"
    matches = sorted(folder.glob(f"{number}_*.md"))
    if not matches:
        raise FileNotFoundError(f"No answers for lesson {number} in {folder}.")
    return matches[0]


def load_answers(lesson: int | str, root: Path | None = None) -> dict[int, str]:
    """``{question number: answer text (markdown)}`` of a lesson."""
    text = answers_path(lesson, root).read_text(encoding="utf-8")
    headings = list(_QUESTION_HEADING.finditer(text))
    answers = {}
    for heading, following in zip(headings, [*headings[1:], None]):
        end = following.start() if following is not None else len(text)
        answers[int(heading.group(1))] = text[heading.end():end].strip()
    return answers


def notebook_questions(notebook_source: str) -> list[int]:
    """The numbers of the closing questions in a notebook's jupytext source (``# 1. ...``
    lines after the ``## Questions`` heading)."""
    start = notebook_source.find("# ## Questions")
    if start < 0:
        return []
    return [int(n) for n in _NOTEBOOK_QUESTION.findall(notebook_source[start:])]


def answer_text(lesson: int | str, question: int | None = None) -> str:
    """The markdown of one answer (or of all of them, ``question=None``)."""
    answers = load_answers(lesson)
    number = _lesson_number(lesson)
    if question is None:
        return "\n\n".join(f"**Question {k}.** {text}" for k, text in sorted(answers.items()))
    if question not in answers:
        raise ValueError(f"Lesson {number} has questions {sorted(answers)}; there is no question {question!r}.")
    return f"**Lesson {number}, question {question}.** {answers[question]}"


def show_answer(lesson: int | str, question: int | None = None) -> None:
    """Reveal an answer: rendered as markdown in a notebook, printed elsewhere."""
    text = answer_text(lesson, question)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))
