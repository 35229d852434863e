"""DAPO's soft overlong punishment: TRL 1.16's values on every length around the budget."""

import pytest

from course_lib.rewards import soft_overlong_punishment


@pytest.mark.parametrize("budget, cache", [(100, 20), (16, 4), (10, 0)])
def test_same_values_as_trl(budget, cache):
    from trl.rewards import get_soft_overlong_punishment

    ids = [[1] * n for n in range(0, budget + 5)]
    ours = soft_overlong_punishment(budget, cache)(prompts=None, completions=None, completion_ids=ids)
    assert ours == pytest.approx(get_soft_overlong_punishment(budget, cache)(completion_ids=ids))


def test_hand_worked_values_and_bad_settings():
    reward = soft_overlong_punishment(100, 20)
    assert reward(completion_ids=[[0] * 80, [0] * 90, [0] * 100, [0] * 101]) == [0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="soft_punish_cache"):
        soft_overlong_punishment(10, 20)
