"""The pre-flight reward probe: hand-worked scores of degenerate completions, and its command."""

import math

import pytest

from course_lib.__main__ import main
from course_lib.rewards import UnscorableSampleWarning, get_reward_functions
from course_lib.rewards.flawed import closeness_reward
from course_lib.rewards.probe import (ANSWER_FREE_CASES, DEGENERATE_CASES, degenerate_completions, probe_rewards,
                                      reference_completion)

BARE = [{"prompt": [{"role": "user", "content": "What is 47 + 46?"}], "answer": "93"},
        {"prompt": [{"role": "user", "content": "What is 12 + 30?"}], "answer": "42"}]
TAGGED_PROMPT = [{"role": "system", "content": "Give the final number inside <answer></answer> tags."},
                 {"role": "user", "content": "What is 12 + 30?"}]


def test_degenerate_cases_are_the_documented_ones():
    cases = degenerate_completions(BARE[0]["prompt"], "93")
    assert tuple(cases) == DEGENERATE_CASES
    assert cases["empty"] == "" and cases["whitespace"].strip() == ""
    assert cases["prompt_numbers"] == "47 46"
    assert cases["prompt_repeated"] == "What is 47 + 46?"
    assert len(cases["very_long"]) > 3000 and not any(c.isdigit() for c in cases["very_long"])
    assert cases["wrong_answer"] == "94"
    # every answer-free case really lacks the right answer as a standalone number, but for the spray of guesses
    for case in ANSWER_FREE_CASES:
        if case != "number_spray":
            assert "93" not in cases[case].replace("993", ""), case


def test_reference_follows_the_layout_the_prompt_asks_for():
    assert reference_completion(BARE[0]["prompt"], "93") == "93"
    assert reference_completion(TAGGED_PROMPT, "42").endswith("<answer>42</answer>")
    gsm8k = [{"role": "system", "content": "Think inside <reasoning> tags, then <answer> tags."},
             {"role": "user", "content": "q"}]
    assert reference_completion(gsm8k, "Some steps #### 7").endswith("</reasoning>\n<answer>\n7\n</answer>\n")


def test_a_verifier_flags_nothing_answer_free():
    report = probe_rewards(get_reward_functions(["correctness_first_number_reward"]), BARE, n_prompts=2)
    assert report.scores["reference"] == [1.0, 1.0]
    assert report.hacks == []
    # the tag around the right answer still reads as the first number: the reward does not ask for the bare form
    assert report.flagged == ["right_answer_wrong_form"]
    # format_no_reasoning is the bare answer itself here: left out as the reference's twin
    assert "format_no_reasoning" not in report.scores


def test_the_flawed_closeness_reward_is_flagged_before_training():
    report = probe_rewards(closeness_reward, BARE, n_prompts=2)
    # 1 - (93 - 99999999) / 93, by hand
    assert report.scores["huge_number"][0] == pytest.approx(1 - (93 - 99999999) / 93)
    # answer + 1 overshoots: 1 - (93 - 94) / 93 > 1
    assert report.scores["wrong_answer"][0] == pytest.approx(1 + 1 / 93)
    assert set(report.hacks) == {"huge_number", "wrong_answer"}
    assert "FLAG (no answer in it)" in report.table()


def test_weights_and_the_gsm8k_family_on_a_hand_worked_case():
    prompt = [{"role": "system", "content": "Think inside <reasoning> tags, then give the number in <answer> tags."},
              {"role": "user", "content": "Tom has 3 pens."}]
    names = ["gsm8k_xmlcount_reward", "gsm8k_soft_format_reward", "gsm8k_strict_format_reward", "gsm8k_int_reward",
             "gsm8k_correctness_reward"]
    report = probe_rewards(get_reward_functions(names), [{"prompt": prompt, "answer": "3"}], n_prompts=1)
    assert report.scores["reference"] == [4.0]
    # the empty answer tag in the layout: four tags (0.5) + soft (0.5) + strict (0.5), no int, not correct
    assert report.scores["empty_answer_tag"] == [1.5]
    assert report.hacks == [] and "format_no_reasoning" in report.flagged
    weighted = probe_rewards(get_reward_functions(names), [{"prompt": prompt, "answer": "3"}], n_prompts=1,
                             weights=[0.0, 0.0, 0.0, 0.0, 1.0])
    assert weighted.scores["reference"] == [2.0] and weighted.scores["empty_answer_tag"] == [0.0]


def test_a_length_paying_reward_is_flagged_on_the_long_reply():
    def characters(prompts, completions, **kwargs):
        return [0.01 * len(c if isinstance(c, str) else c[-1]["content"]) for c in completions]

    report = probe_rewards(characters, BARE, n_prompts=1)
    assert {"very_long", "number_spray", "prompt_repeated"} <= set(report.hacks)


def test_unscorable_reference_is_beaten_by_any_score_and_nan_never_flags():
    def none_for_all(prompts, completions, **kwargs):
        return [None] * len(completions)

    with pytest.warns(UnscorableSampleWarning):
        report = probe_rewards(none_for_all, BARE, n_prompts=1)
    assert math.isnan(report.scores["reference"][0]) and report.flagged == []


def test_bad_input_is_refused_with_a_fix():
    with pytest.raises(ValueError, match="at least one prompt"):
        probe_rewards(closeness_reward, BARE, n_prompts=0)
    with pytest.raises(ValueError, match="'prompt' column"):
        probe_rewards(closeness_reward, [{"question": "q", "answer": "1"}])
    with pytest.raises(ValueError, match="no rows"):
        probe_rewards(closeness_reward, [])


def test_command_exits_1_on_a_hack_and_0_on_the_verifier(capsys):
    assert main(["probe-rewards", "--task", "arithmetic", "--n", "2",
                 "--rewards", "course_lib.rewards.flawed:closeness_reward"]) == 1
    out = capsys.readouterr().out
    assert "huge_number" in out and "flagged without the right answer" in out
    assert main(["probe-rewards", "--task", "arithmetic", "--n", "2"]) == 0
    assert "no answer-free case ties or beats the reference" in capsys.readouterr().out
    assert main(["probe-rewards", "--task", "arithmetic", "--weights", "1,2"]) == 2
    assert "one weight per reward" in capsys.readouterr().err
