from course_lib.checks import ex02


def test_reinforce_loss(exercise):
    ex02.check_reinforce_loss(exercise("ex02_policy_gradients").reinforce_loss)


def test_baseline_subtract(exercise):
    ex02.check_baseline_subtract(exercise("ex02_policy_gradients").baseline_subtract)


def test_discounted_returns(exercise):
    ex02.check_discounted_returns(exercise("ex02_policy_gradients").discounted_returns)
