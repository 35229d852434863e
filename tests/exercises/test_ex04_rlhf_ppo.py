from course_lib.checks import ex04


def test_per_token_rewards(exercise):
    ex04.check_per_token_rewards(exercise("ex04_rlhf_ppo").per_token_rewards)


def test_whiten(exercise):
    ex04.check_whiten(exercise("ex04_rlhf_ppo").whiten)


def test_value_loss(exercise):
    ex04.check_value_loss(exercise("ex04_rlhf_ppo").value_loss)


def test_bradley_terry_loss(exercise):
    ex04.check_bradley_terry_loss(exercise("ex04_rlhf_ppo").bradley_terry_loss)
