"""Answer equivalence: the course's rule where it is stricter, math-verify for LaTeX, fractions and sentences."""

import json
from pathlib import Path

import pytest

from course_lib.rewards.equivalence import (equivalent, make_math_verify_reward, math_verify_available,
                                            math_verify_equal)

needs_math_verify = pytest.mark.skipif(not math_verify_available(),
                                       reason="math-verify is not installed (pip install \"math-verify>=0.9.0\"; "
                                              "pyproject.toml declares it)")

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k" / "test.jsonl"


@needs_math_verify
@pytest.mark.parametrize("predicted, reference, verdict, rule", [
    ("72", "72", True, "course"),
    ("$1,080", "1080", True, "course"),
    ("1e3", "1000", True, "course"),                  # math-verify does not read the exponent
    ("18.0000001", "18", False, "course"),            # exact: a rounding slip is wrong
    ("\\frac{1}{2}", "0.5", True, "math-verify"),
    ("\\boxed{72}", "72", True, "math-verify"),
    ("3/4", "0.75", True, "math-verify"),
    ("x = 4", "4", True, "math-verify"),
    ("The answer is 72.", "72", True, "math-verify"),
    ("\\sqrt{324}", "18", True, "math-verify"),
    ("\\frac{1}{3}", "0.5", False, "math-verify"),
    ("19 or 18", "18", False, "hedge"),               # math-verify alone accepts the hedge
    ("seventy-two", "72", False, "math-verify"),
    (None, "72", False, "course"),
    ("72", "Some reasoning #### 72", True, "course"),
])
def test_equivalent(predicted, reference, verdict, rule):
    assert equivalent(predicted, reference) == (verdict, rule)


@needs_math_verify
def test_math_verify_alone_takes_the_last_formula_of_a_hedge():
    assert math_verify_equal("19 or 18", "18") is True
    assert math_verify_equal("18.0000001", "18") is False


@needs_math_verify
def test_reward_reads_the_tag_then_the_whole_text():
    reward = make_math_verify_reward()
    scores = reward(completions=["<answer>\\frac{3}{2}</answer>", "so it is \\boxed{1.5}", "<answer>1.4</answer>",
                                 "no idea"], answer=["1.5"] * 4)
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert reward(completions=["1"], answer=[None]) == [None]
    with pytest.raises(KeyError, match="answer_column"):
        reward(completions=["1"], solution=["1"])


@needs_math_verify
@pytest.mark.skipif(not DATA.exists(), reason=f"needs the GSM8K test file at {DATA}")
def test_on_real_gsm8k_answers_the_combination_is_never_wrong_where_either_rule_is_right():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from answer_equivalence import candidates, course_rule

    from course_lib.rewards.extract import extract_last_number

    checked = 0
    for line in DATA.read_text().splitlines()[:30]:
        reference, kinds = candidates(json.loads(line)["answer"])
        for kind, (candidate, right) in kinds.items():
            if course_rule(kind, candidate, reference) != right and math_verify_equal(candidate, reference) != right:
                continue  # both rules wrong (a last line that does not end with the answer): nothing to keep
            read = extract_last_number(candidate) if kind == "last_line" else candidate
            assert equivalent(read, reference)[0] == right, (kind, candidate, reference)
            checked += 1
    assert checked >= 30 * 9


def test_without_math_verify_the_error_names_the_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify now raises ImportError
    assert math_verify_available() is False
    with pytest.raises(ImportError, match=r"pip install \"math-verify>=0.9.0\""):
        make_math_verify_reward()
    assert equivalent("72", "72") == (True, "course")  # plain numbers never need it


@needs_math_verify
@pytest.mark.skipif(not DATA.exists(), reason=f"needs the GSM8K test file at {DATA}")
def test_the_benchmark_prints_disagreements_and_the_table():
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "answer_equivalence.py"
    out = subprocess.run([sys.executable, str(script), "--n", "4", "--show", "3"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    # 4 problems x 10 ways; boxed, units, fraction, sentence, hedge and near disagree on every problem
    assert "24 disagreements on 40 answers" in out.stdout
    assert "hedge" in out.stdout and "combined right" in out.stdout
