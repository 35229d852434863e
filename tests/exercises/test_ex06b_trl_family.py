from course_lib.checks import ex06b


def test_cispo_per_token_loss(exercise):
    ex06b.check_cispo_per_token_loss(exercise("ex06b_trl_family").cispo_per_token_loss)


def test_high_entropy_token_mask(exercise):
    ex06b.check_high_entropy_token_mask(exercise("ex06b_trl_family").high_entropy_token_mask)
