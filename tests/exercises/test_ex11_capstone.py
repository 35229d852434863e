from course_lib.checks import ex11


def test_verify_sorted(exercise):
    ex11.check_verify_sorted(exercise("ex11_capstone").verify_sorted)


def test_sorting_reward(exercise):
    ex11.check_sorting_reward(exercise("ex11_capstone").sorting_reward)


def test_config_warnings(exercise):
    ex11.check_config_warnings(exercise("ex11_capstone").config_warnings)
