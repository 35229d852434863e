"""RL basics that run instantly: bandits, a "What is 2 + 2?" answer policy, a grid world.

Lesson 01 (RL basics) and lesson 02 (policy gradients) are built on these modules:

- ``bandits``: one state, K actions; epsilon-greedy, UCB1, gradient bandit (REINFORCE).
- ``answer_policy``: an LLM reduced to a softmax over candidate answers; verifier vs
  reward function, sampling until success, REINFORCE pushing probability around.
- ``gridworld`` / ``gridworld_agents``: beans (+1) and ghosts (-1) on a grid; value
  iteration and policy evaluation (the two Bellman equations) as the exact references, tabular REINFORCE and Q-learning as learners.
- ``variance``: the REINFORCE gradient estimator with and without baselines.
- ``length_bias`` (lesson 06): a policy that only chooses when to stop, trained with
  ``policy_loss`` itself, to measure the length bias of each ``loss_type``.
- ``plots``: matplotlib figures for all of the above.

Everything is seeded and runs on a CPU in well under a second per experiment.
"""

from .answer_policy import (
    CANDIDATE_ANSWERS,
    CORRECT_ANSWER,
    AnswerPolicy,
    AnswerTrainingTrace,
    binary_reward,
    combined_reward,
    correctness_reward,
    expected_attempts,
    is_number,
    is_number_reward,
    reinforce_step,
    sample_until_success,
    train_answer_policy,
    verify_answer,
)
from .bandits import (
    AgentComparison,
    BanditHistory,
    BernoulliBandit,
    EpsilonGreedy,
    GaussianBandit,
    GradientBandit,
    RandomAgent,
    UCB1,
    compare_agents,
    make_testbed,
    run_bandit,
)
from .gridworld import DEFAULT_LAYOUT, GridWorld, policy_evaluation, render_grid, value_iteration
from .gridworld_agents import GridLearningCurve, greedy_score, train_gridworld
from .variance import GradientVarianceResult, exact_policy_gradient, gradient_variance

__all__ = [
    "CANDIDATE_ANSWERS", "CORRECT_ANSWER", "AnswerPolicy", "AnswerTrainingTrace", "binary_reward",
    "combined_reward", "correctness_reward", "expected_attempts", "is_number", "is_number_reward",
    "reinforce_step", "sample_until_success", "train_answer_policy", "verify_answer",
    "AgentComparison", "BanditHistory", "BernoulliBandit", "EpsilonGreedy", "GaussianBandit",
    "GradientBandit", "RandomAgent", "UCB1", "compare_agents", "make_testbed", "run_bandit",
    "DEFAULT_LAYOUT", "GridWorld", "policy_evaluation", "render_grid", "value_iteration",
    "GridLearningCurve", "greedy_score", "train_gridworld",
    "GradientVarianceResult", "exact_policy_gradient", "gradient_variance",
]

# Figures here are built without pyplot (nothing leaks between calls): let a notebook cell that
# ends with one show it as an image.
from ..common.figures import enable_notebook_display as _enable_notebook_display  # noqa: E402

_enable_notebook_display()
