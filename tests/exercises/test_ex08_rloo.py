from course_lib.checks import ex08


def test_rloo_advantages(exercise):
    ex08.check_rloo_advantages(exercise("ex08_rloo").rloo_advantages)


def test_rloo_reward_with_kl(exercise):
    ex08.check_rloo_reward_with_kl(exercise("ex08_rloo").rloo_reward_with_kl)


def test_token_level_rewards(exercise):
    ex08.check_token_level_rewards(exercise("ex08_rloo").token_level_rewards)


def test_rloo_sequence_clipped_loss(exercise):
    ex08.check_rloo_sequence_clipped_loss(exercise("ex08_rloo").rloo_sequence_clipped_loss)
