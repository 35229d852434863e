"""pass@k, maj@k and sampled evaluation, against hand-worked values and exhaustive enumeration."""
import itertools
import math

import pytest
import torch

from course_lib.evaluation import (
    evaluate_sampled,
    is_correct,
    maj_at_k,
    majority_answer,
    mean_pass_at_k,
    pass_at_k,
    sampled_completions,
)


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (10, 1, 1, 0.1),                # pass@1 is the fraction correct
    (4, 0, 2, 0.0),                 # nothing correct
    (4, 4, 1, 1.0),                 # everything correct
    (64, 1, 64, 1.0),               # k = n: one correct sample is enough
    (64, 1, 32, 0.5),               # half of the draws of 32 contain the one correct sample
    (8, 3, 6, 1.0),                 # n - c = 5 < k: every draw contains a correct one
])
def test_pass_at_k_hand_worked(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_correct_sample():
    """The estimator's definition, enumerated: every k-subset of the n samples, equally likely."""
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                expected = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_is_exact_for_large_n():
    n, c, k = 200, 7, 100
    expected = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_pass_at_k_differs_from_the_biased_shortcut():
    # 1 - (1 - c/n)^k treats draws as independent (with replacement): lower than the estimator.
    n, c, k = 10, 2, 5
    assert 1 - (1 - c / n) ** k == pytest.approx(0.67232)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(8, 5) / math.comb(10, 5))  # 0.7778
    assert pass_at_k(n, c, k) > 1 - (1 - c / n) ** k


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_problems():
    assert mean_pass_at_k([0, 2, 5], 5, 2) == pytest.approx((0.0 + 0.7 + 1.0) / 3)
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 5, 2)


@pytest.fixture(scope="module")
def tiny_policy():
    from course_lib.models import load_policy

    return load_policy("tiny")


def test_majority_answer_counts_votes_ignores_missing_and_breaks_ties_by_first_seen():
    assert majority_answer(["4", "5", "4", None, None, None]) == "4"
    assert majority_answer(["5", "4", "4", "5"]) == "5"
    assert majority_answer([None, None]) is None
    assert majority_answer([]) is None


def test_maj_at_k_uses_the_first_k_samples_and_compares_numerically():
    answers = [["12", "12", "13", "13", "13"],   # first 3 vote 12 (right); all 5 vote 13
               ["7", "8", "8", "8", "8"],        # first 1 votes 7 (wrong); 3 or 5 vote 8 (right)
               [None, None, None, None, None]]   # never answers: wrong
    references = ["12", "8.0", "3"]
    assert maj_at_k(answers, references, 1) == pytest.approx(1 / 3)
    assert maj_at_k(answers, references, 3) == pytest.approx(2 / 3)
    assert maj_at_k(answers, references, 5) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least k answers"):
        maj_at_k(answers, references, 6)


def test_evaluate_sampled_on_the_tiny_model(tiny_policy):
    from course_lib.data import get_task

    model, tokenizer = tiny_policy
    rows = get_task("arithmetic", split="test", n=6, seed=0)
    result = evaluate_sampled(model, tokenizer, rows, n=8, ks=(1, 4, 8), temperature=1.0, max_new_tokens=6, seed=3)
    assert len(result.correct_counts) == 6 and all(0 <= c <= 8 for c in result.correct_counts)
    # pass@k from the counts, recomputed by enumeration; and it can only grow with k
    for k in (1, 4, 8):
        enumerated = sum(sum(any(s) for s in itertools.combinations([True] * c + [False] * (8 - c), k))
                         / math.comb(8, k) for c in result.correct_counts) / 6
        assert result.pass_at[k] == pytest.approx(enumerated)
    assert result.pass_at[1] <= result.pass_at[4] <= result.pass_at[8]
    assert result.pass_at[1] == pytest.approx(sum(result.correct_counts) / 48)
    # same seed, same samples; the global random state is left alone
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    again = sampled_completions(model, tokenizer, rows["prompt"], 8, max_new_tokens=6, seed=3)
    assert torch.rand(1) == before
    assert [sum(is_correct(t, a) for t in row)
            for row, a in zip(again, rows["answer"])] == result.correct_counts


def test_evaluate_sampled_refuses_k_above_n(tiny_policy):
    from course_lib.data import get_task

    model, tokenizer = tiny_policy
    rows = get_task("arithmetic", split="test", n=2, seed=0)
    with pytest.raises(ValueError, match=r"\[1, n=4\]"):
        evaluate_sampled(model, tokenizer, rows, n=4, ks=(1, 8))


def test_score_samples_from_texts_of_any_engine():
    from course_lib.evaluation import group_texts, score_samples

    texts = ["<answer>4</answer>", "5", "4.0", "4",   # problem 1: 3 right of 4, majority "4"
             "7", "7", "8", "no idea"]                 # problem 2: reference 8, 1 right, majority "7"
    result = score_samples(group_texts(texts, 4), ["4", "8"], ks=(1, 4), temperature=0.7)
    assert result.n == 4 and result.temperature == 0.7 and result.correct_counts == [3, 1]
    assert result.pass_at[1] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert result.pass_at[4] == pytest.approx(1.0)
    assert result.maj_at[4] == pytest.approx(1 / 2)  # "4" wins problem 1 ("4.0" votes with "4"), "7" loses 2
    assert result.answers[1][3] is None
    with pytest.raises(ValueError, match="groups of n=3"):
        group_texts(texts, 3)
    with pytest.raises(ValueError, match=r"\[1, n=4\]"):
        score_samples(group_texts(texts, 4), ["4", "8"], ks=(8,))


def test_greedy_and_sampled_completions_leave_the_model_in_the_mode_they_found(tiny_policy):
    """Both evaluate in eval mode (no dropout) and hand the model back as it was, module by module."""
    from course_lib.evaluation import greedy_completions
    from course_lib.sampled_evaluation import sampled_completions

    model, tokenizer = tiny_policy
    prompts = [[{"role": "user", "content": "1+1"}]]
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    try:
        for evaluate in (lambda: greedy_completions(model, tokenizer, prompts, max_new_tokens=2),
                         lambda: sampled_completions(model, tokenizer, prompts, n=2, max_new_tokens=2)):
            model.train()
            frozen = next(m for m in model.modules() if not list(m.children()))  # a leaf, e.g. the embedding
            frozen.eval()  # a module the caller keeps in eval mode stays there
            evaluate()
            assert seen and not any(seen), "a forward ran in training mode"
            assert not frozen.training
            assert all(m.training for m in model.modules() if m is not frozen)
            seen.clear()
    finally:
        hook.remove()
        model.eval()
