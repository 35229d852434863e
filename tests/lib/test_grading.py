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
