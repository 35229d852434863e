from course_lib.checks import ex01


def test_sample_until_success(exercise):
    ex01.check_sample_until_success(exercise("ex01_rl_basics").sample_until_success)


def test_verifier_reward(exercise):
    ex01.check_verifier_reward(exercise("ex01_rl_basics").verifier_reward)


def test_epsilon_greedy_action(exercise):
    ex01.check_epsilon_greedy_action(exercise("ex01_rl_basics").epsilon_greedy_action)
