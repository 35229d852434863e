from course_lib.checks import ex13


def test_truncation_rule(exercise):
    ex13.check_truncation_rule(exercise("ex13_debugging").truncation_rule)


def test_name_the_failures(exercise):
    module = exercise("ex13_debugging")
    ex13.check_name_the_failures(module.name_the_failures, module.FAILURES)
