from course_lib.checks import ex06


def test_aggregate_loss(exercise):
    ex06.check_aggregate_loss(exercise("ex06_grpo_variants").aggregate_loss)


def test_sequence_level_ratio(exercise):
    ex06.check_sequence_level_ratio(exercise("ex06_grpo_variants").sequence_level_ratio)


def test_two_sided_clip_objective(exercise):
    ex06.check_two_sided_clip_objective(exercise("ex06_grpo_variants").two_sided_clip_objective)

