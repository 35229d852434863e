from course_lib.checks import ex07


def test_batch_arithmetic(exercise):
    ex07.check_batch_arithmetic(exercise("ex07_batch_schedule").batch_arithmetic)


def test_micro_batches(exercise):
    ex07.check_micro_batches(exercise("ex07_batch_schedule").micro_batches)
