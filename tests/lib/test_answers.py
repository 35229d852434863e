"""Every closing question of every notebook has a revealable answer."""
import re

import pytest

from course_lib.lesson_answers import answer_text, load_answers, notebook_questions, show_answer
from course_lib.grading import project_root

NOTEBOOKS = sorted((project_root() / "notebooks").glob("[0-9][0-9]*_*.py"))


def test_notebook_questions_are_read_from_the_questions_section():
    source = "# %% [markdown]\n# 1. not a question\n# ## Questions\n#\n# 1. First?\n#    more\n# 2. Second?\n"
    assert notebook_questions(source) == [1, 2]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_every_question_has_a_substantive_answer(notebook):
    questions = notebook_questions(notebook.read_text())
    assert questions == list(range(1, len(questions) + 1)) and questions, f"{notebook.name}: no numbered questions"
    answers = load_answers(notebook.stem.split("_")[0])
    assert sorted(answers) == questions, f"{notebook.name}: questions {questions}, answers {sorted(answers)}"
    for number, text in answers.items():
        words = len(re.findall(r"\w+", text))
        assert words >= 60, f"{notebook.name} question {number}: an answer of {words} words is too thin"
    # The notebook tells the learner how to reveal them.
    assert f'show_answer("{notebook.stem.split("_")[0]}"' in notebook.read_text()


def test_show_answer_prints_one_answer_and_names_a_missing_question(capsys):
    show_answer("03", 2)
    out = capsys.readouterr().out
    assert out.startswith("**Lesson 03, question 2.**") and "ratio" in out
    assert answer_text(3, 2) == answer_text("03_ppo", 2)
    assert "Question 5" in answer_text("03")
    with pytest.raises(ValueError, match="no question 9"):
        answer_text("03", 9)
    with pytest.raises(ValueError, match="lesson"):
        answer_text("three", 1)
