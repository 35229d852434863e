from course_lib.checks import ex12


def test_trajectory_loss_mask(exercise):
    ex12.check_trajectory_loss_mask(exercise("ex12_agents").trajectory_loss_mask)


def test_guessing_game(exercise):
    ex12.check_guessing_game(exercise("ex12_agents").GuessingGame)
