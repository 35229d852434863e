from course_lib.checks import ex14


def test_packing_mask(exercise):
    ex14.check_packing_mask(exercise("ex14_post_training").packing_mask)


def test_dpo_sigmoid_loss(exercise):
    ex14.check_dpo_sigmoid_loss(exercise("ex14_post_training").dpo_sigmoid_loss)


def test_distillation_advantages(exercise):
    ex14.check_distillation_advantages(exercise("ex14_post_training").distillation_advantages)


def test_rejection_filter(exercise):
    ex14.check_rejection_filter(exercise("ex14_post_training").rejection_filter)
