from course_lib.checks import ex00


def test_to_conversational(exercise):
    ex00.check_to_conversational(exercise("ex00_setup").to_conversational)
