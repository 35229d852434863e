from course_lib.checks import ex09


def test_extract_answer(exercise):
    ex09.check_extract_answer(exercise("ex09_rewards").extract_answer)


def test_partial_format_reward(exercise):
    ex09.check_partial_format_reward(exercise("ex09_rewards").partial_format_reward)


def test_proximity_score(exercise):
    ex09.check_proximity_score(exercise("ex09_rewards").proximity_score)


def test_combine_rewards(exercise):
    ex09.check_combine_rewards(exercise("ex09_rewards").combine_rewards)


def test_parse_ranking(exercise):
    ex09.check_parse_ranking(exercise("ex09_rewards").parse_ranking)


def test_probe_case(exercise):
    ex09.check_probe_case(exercise("ex09_rewards").probe_case)
