from course_lib.checks import ex03


def test_clipped_surrogate(exercise):
    ex03.check_clipped_surrogate(exercise("ex03_ppo").clipped_surrogate)


def test_gae(exercise):
    ex03.check_gae(exercise("ex03_ppo").gae)


def test_kl_k1(exercise):
    ex03.check_kl_k1(exercise("ex03_ppo").kl_k1)


def test_kl_k3(exercise):
    ex03.check_kl_k3(exercise("ex03_ppo").kl_k3)
