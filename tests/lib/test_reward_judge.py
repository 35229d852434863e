"""Judge rewards: parsing, Cohen's kappa by hand, cache, batching, time limit, logging; log_metric in the trainer."""

import math
import time

import pytest

from course_lib.judge import (Judge, agreement, cohen_kappa, make_group_judge_reward,
                                      make_rubric_judge_reward, parse_group_ranking, parse_score)

Q = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.mark.parametrize("reply, expected", [(" 7", 0.7), ("Score: 10", 1.0), ("7/10", 0.7), ("7 out of 10", 0.7),
                                             (" 0", 0.0), ("seven", None), ("", None), ("12", None), (None, None),
                                             ("3.5", None)])
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


@pytest.mark.parametrize("reply, n, expected", [
    ("2 1 3", 3, [1, 0, 2]), ("2 > 3 > 1", 3, [1, 2, 0]), ("Ranking: [3], [1], [2]", 3, [2, 0, 1]),
    ("2 1", 3, [1, 0, 2]),            # all but one: the missing one is last
    ("2 2 1 3", 3, [1, 0, 2]),        # repeats keep the first mention
    ("2", 3, None), ("", 3, None), (None, 3, None), ("5 1 2", 3, None), ("1", 1, [0]),
    ("1 2 3 9", 3, [0, 1, 2]),        # a stray number after a complete ranking is ignored
])
def test_parse_group_ranking(reply, n, expected):
    assert parse_group_ranking(reply, n) == expected


def test_cohen_kappa_by_hand():
    # p_o = 3/4; rates 1/2 and 1/4: p_e = 1/2 * 1/4 + 1/2 * 3/4 = 1/2; kappa = (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    assert cohen_kappa([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert math.isnan(cohen_kappa([1, 1], [1, 1]))
    # a judge that always says yes agrees 3 times in 4 with a verifier that says yes 3 times in 4, by chance alone
    stats = agreement([1.0, 1.0, 1.0, 1.0], [True, True, True, False])
    assert stats["accuracy"] == 0.75 and stats["kappa"] == pytest.approx(0.0)
    assert agreement([None, 0.9], [True, True])["unscored"] == 1


class FakeJudgeModel:
    """Answers from a table keyed by the last user message; counts its calls and batch sizes."""

    def __init__(self, reply, delay=0.0):
        self.reply, self.delay, self.batches = reply, delay, []

    def __call__(self, prompts):
        time.sleep(self.delay)
        self.batches.append(len(prompts))
        return [self.reply(p[-2]["content"]) for p in prompts]  # p[-1] is the prefill


def test_rubric_judge_caches_batches_counts_unparsable_and_logs():
    model = FakeJudgeModel(lambda text: " 10" if "Answer: 4\n" in text else " maybe")
    judge = Judge(model, batch_size=2)
    reward = make_rubric_judge_reward(judge)
    logged = []
    scores = reward(prompts=[Q] * 4, completions=["4", "5", "4", "6"], log_metric=lambda k, v: logged.append((k, v)))
    assert scores == [1.0, None, 1.0, None]
    assert model.batches == [2, 1]                # three distinct judgments, two per call
    assert judge.stats.calls == 3 and judge.stats.unparsable == 2 and judge.stats.cache_hits == 1  # the second "4"
    assert dict(logged)["judge/calls"] == 3 and dict(logged)["judge/unparsable"] == 2 and dict(logged)["judge/s"] >= 0
    again = reward(prompts=[Q], completions=["4"])
    assert again == [1.0] and judge.stats.calls == 3 and judge.stats.cache_hits == 2


def test_group_judge_turns_a_ranking_into_relative_rewards():
    judge = Judge(FakeJudgeModel(lambda text: " 2 1 3" if "Answer 3" in text else " nonsense"))
    reward = make_group_judge_reward(judge)
    other = [{"role": "user", "content": "What is 3 + 3?"}]
    scores = reward(prompts=[Q, Q, Q, other, other], completions=["5", "4", "9", "6", "7"])
    assert scores[:3] == [0.5, 1.0, 0.0]          # 1 - rank / (G - 1)
    assert scores[3:] == [None, None] and judge.stats.unparsable == 1


def test_time_limit_leaves_the_rest_unscored():
    judge = Judge(FakeJudgeModel(lambda text: " 5", delay=0.3), batch_size=1, timeout_s=0.2)
    scores = make_rubric_judge_reward(judge)(prompts=[Q] * 3, completions=["1", "2", "3"])
    assert scores[0] == 0.5 and scores[1:] == [None, None] and judge.stats.timeouts == 2


def test_cache_file_round_trip(tmp_path):
    path = tmp_path / "judge.json"
    first = Judge(FakeJudgeModel(lambda text: " 8"), cache_path=str(path))
    make_rubric_judge_reward(first)(prompts=[Q], completions=["4"])
    first.save()

    def must_not_run(prompts):
        raise AssertionError("the cache should have answered")

    second = Judge(must_not_run, cache_path=str(path))
    assert make_rubric_judge_reward(second)(prompts=[Q], completions=["4"]) == [0.8]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="batch_size"):
        Judge(batch_size=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Judge(timeout_s=-1)
    with pytest.raises(ValueError, match="rubric is empty"):
        make_rubric_judge_reward(Judge(lambda p: []), rubric=" ")


def test_trainer_logs_what_a_reward_function_logs(tmp_path):
    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.trainer import Trainer

    judge_reward = make_rubric_judge_reward(Judge(FakeJudgeModel(lambda text: " 5")))

    def named_columns_only(prompts, completions, answer, question, completion_ids):  # no **kwargs: must not receive log_metric
        return [0.0] * len(completions)

    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=2,
                         per_device_train_batch_size=8, num_generations=4, max_completion_length=4,
                         learning_rate=1e-5, logging_steps=1, save_steps=0)
    model, tokenizer = load_policy("tiny")
    rows = Trainer(config, [judge_reward, named_columns_only], get_task("arithmetic", n=16), model, tokenizer,
                   progress=False).train()
    steps = [r for r in rows if "reward" in r]
    # each step judges 8 completions; a judgment already made (same question, same answer) is a cache hit
    assert [r["judge/calls"] + r["judge/cache_hits"] for r in steps] == [8.0, 8.0]
    assert all(r["judge/s"] >= 0 and r["judge/unparsable"] == 0 and r["reward"] == 0.5 for r in steps)
