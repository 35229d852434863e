"""Exercise harness: stub generation, drift detection, loading the chosen implementation."""
import pytest

from course_lib.grading import check_stubs, load_exercise, make_stub, write_stubs

SOLUTION = '''def f(x):
    """Double x."""
    # BEGIN SOLUTION
    # HINT: multiply.
    y = 2 * x
    return y
    # END SOLUTION


def g():
    return 1
'''


def test_make_stub_replaces_marked_blocks_and_keeps_hints():
    stub = make_stub(SOLUTION, "ex99_demo.py")
    assert "y = 2 * x" not in stub and "# HINT: multiply." in stub
    assert '    raise NotImplementedError("Exercise: replace this line with your code.")' in stub
    assert "def g():\n    return 1" in stub
    namespace = {}
    exec(stub, namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](3)
    assert namespace["g"]() == 1


@pytest.mark.parametrize("bad", ["    # BEGIN SOLUTION\n", "    # END SOLUTION\n",
                                 "# BEGIN SOLUTION\n# BEGIN SOLUTION\n"])
def test_unbalanced_markers_are_errors(bad):
    with pytest.raises(ValueError, match="SOLUTION"):
        make_stub(bad)


def test_check_stubs_detects_drift_and_load_exercise_picks_the_implementation(tmp_path, monkeypatch):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions" / "ex99_demo.py").write_text(SOLUTION)
    monkeypatch.setenv("COURSE_ROOT", str(tmp_path))
    assert check_stubs(tmp_path) == ["exercises/ex99_demo.py is missing"]
    write_stubs(tmp_path)
    assert check_stubs(tmp_path) == []
    (tmp_path / "exercises" / "ex99_demo.py").write_text("edited by hand")
    assert check_stubs(tmp_path) == ["exercises/ex99_demo.py differs from its generated stub"]
    write_stubs(tmp_path)
    assert load_exercise("ex99_demo", impl="solutions").f(4) == 8
    with pytest.raises(NotImplementedError):
        load_exercise("ex99_demo", impl="exercises").f(4)
    monkeypatch.setenv("COURSE_IMPL", "solutions")
    assert load_exercise("ex99_demo").f(1) == 2
    with pytest.raises(ValueError, match="impl"):
        load_exercise("ex99_demo", impl="answers")


# `python -m course_lib grade`: one verdict per exercise function. These run the real
# exercise tests in a child pytest (a few seconds each).

def _copy_course(tmp_path, root):
    """A course folder under tmp_path: solutions/, tests/exercises/ and exercises/ = the solutions."""
    import shutil

    shutil.copytree(root / "solutions", tmp_path / "solutions")
    shutil.copytree(root / "solutions", tmp_path / "exercises")
    (tmp_path / "tests").mkdir()
    shutil.copy(root / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    shutil.copytree(root / "tests" / "exercises", tmp_path / "tests" / "exercises",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_grade_reports_every_function_done_on_the_solutions():
    from course_lib.grading import format_grades, grade_functions

    grades = grade_functions("solutions")
    assert len(grades) >= 30 and {g.status for g in grades} == {"done"}
    assert ("ex02_policy_gradients", "discounted_returns") in {(g.lesson, g.function) for g in grades}
    report = format_grades(grades, "solutions")
    assert f"{len(grades)} done (of {len(grades)} functions)" in report
    assert "python -m pytest tests/exercises -q --impl solutions" in report


def test_grade_reports_every_untouched_stub_not_started():
    """Every exercise test fails on the untouched stubs, so no stub passes for a finished exercise
    (`make test` runs `check-stubs` first: here it cannot skip)."""
    from course_lib.grading import format_grades, grade_functions, project_root

    if check_stubs(project_root()):
        pytest.skip("exercises/ holds edited code, not the generated stubs")
    grades = grade_functions("exercises")
    assert {g.status for g in grades} == {"not started"}
    assert grades[0].function in format_grades(grades).split("Next to write: ")[1]


def test_grade_names_the_wrong_function_with_its_hint(tmp_path, monkeypatch):
    from course_lib.grading import format_grades, grade_functions, project_root

    course = _copy_course(tmp_path, project_root())
    target = course / "exercises" / "ex02_policy_gradients.py"
    source = target.read_text()
    # The classic mistake: accumulating the returns forward in time.
    wrong = '''

def discounted_returns(rewards, gamma):
    out, running = [], 0.0
    for r in rewards.tolist():
        running = r + gamma * running
        out.append(running)
    return torch.tensor(out, dtype=rewards.dtype)
'''
    target.write_text(source + wrong)  # the later definition wins
    stub = course / "exercises" / "ex05_grpo.py"
    stub.write_text(make_stub((course / "solutions" / "ex05_grpo.py").read_text(), "ex05_grpo.py"))
    monkeypatch.setenv("COURSE_ROOT", str(course))
    grades = {(g.lesson, g.function): g for g in grade_functions("exercises", root=course)}
    bad = grades[("ex02_policy_gradients", "discounted_returns")]
    assert bad.status == "wrong"
    assert "compute it from the last step backwards" in bad.message
    assert {g.status for key, g in grades.items() if key[0] == "ex05_grpo"} == {"not started"}
    others = {g.status for key, g in grades.items() if key[0] != "ex05_grpo" and g is not bad}
    assert others == {"done"}
    report = format_grades(list(grades.values()))
    assert "wrong        discounted_returns" in report and "| rewards [0, 0, 1], gamma=0.9: the sum runs" in report
    assert "python -m pytest tests/exercises/test_ex02_policy_gradients.py::test_discounted_returns -q" in report


def test_grade_command_for_one_lesson(capsys):
    from course_lib.__main__ import main

    assert main(["grade", "--impl", "solutions", "--lesson", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ex02_policy_gradients  (3/3 done)") and "ex03" not in out
    assert "python -m pytest tests/exercises/test_ex02_policy_gradients.py -q --impl solutions" in out
