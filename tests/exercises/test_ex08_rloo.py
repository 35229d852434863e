from course_lib.checks import ex08


def test_rloo_advantages(exercise):
    ex08.check_rloo_advantages(exercise("ex08_rloo").rloo_advantages)


def test_rloo_reward_with_kl(exercise):
    ex08.check_rloo_reward_with_kl(exercise("ex08_rloo").rloo_reward_with_kl)


def test_token_level_rewards(exercise):
    ex08.check_token_level_rewards(exercise("ex08_rloo").token_level_rewards)


def test_unhealthy_ratio_steps(exercise):
    ex08.check_unhealthy_ratio_steps(exercise("ex08_rloo").unhealthy_ratio_steps)
