from course_lib.checks import ex05


def test_group_advantages(exercise):
    ex05.check_group_advantages(exercise("ex05_grpo").group_advantages)


def test_grpo_clipped_loss(exercise):
    ex05.check_grpo_clipped_loss(exercise("ex05_grpo").grpo_clipped_loss)


def test_completion_logps_and_entropy(exercise):
    ex05.check_completion_logps_and_entropy(exercise("ex05_grpo").completion_logps_and_entropy)


def test_grpo_loop(exercise):
    ex05.check_grpo_loop(exercise("ex05_grpo").grpo_loop)
