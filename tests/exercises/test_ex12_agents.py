from course_lib.checks import ex12


def test_trajectory_loss_mask(exercise):
    ex12.check_trajectory_loss_mask(exercise("ex12_agents").trajectory_loss_mask)


def test_guessing_game(exercise):
    ex12.check_guessing_game(exercise("ex12_agents").GuessingGame)


def test_trajectory_advantages(exercise):
    ex12.check_trajectory_advantages(exercise("ex12_agents").trajectory_advantages)


def test_turn_advantages(exercise):
    ex12.check_turn_advantages(exercise("ex12_agents").turn_advantages)
