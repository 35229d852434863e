"""The Bradley-Terry reward model: loss against hand-worked values and TRL's formula, the
scalar head at the last real token, labelling, training on a learnable preference."""

import math

import pytest
import torch

from course_lib.reward_model import (PreferencePairs, RewardModel, bradley_terry_loss,
                                     reward_model_function, score_texts, simulated_preferences, train_reward_model)
from course_lib.tiny import TinyRecipe, build_char_tokenizer, build_tiny_model


def test_loss_hand_worked():
    # One pair with equal scores: -log(1/2). One with a gap of 2: -log(sigmoid(2)) = log(1 + e^-2).
    loss = bradley_terry_loss(torch.tensor([0.0, 3.0]), torch.tensor([0.0, 1.0]))
    assert loss.item() == pytest.approx((math.log(2) + math.log(1 + math.exp(-2))) / 2, rel=1e-6)


def test_loss_matches_trl_reward_trainer_formula():
    # TRL 1.16 RewardTrainer.compute_loss: -logsigmoid(chosen - rejected - margin).mean()
    # + center_rewards_coefficient * mean((chosen + rejected) ** 2), written out independently.
    generator = torch.Generator().manual_seed(0)
    chosen, rejected = torch.randn(7, generator=generator), torch.randn(7, generator=generator)
    margin = torch.rand(7, generator=generator)
    expected = -torch.log(1 / (1 + torch.exp(-(chosen - rejected - margin)))).mean() + 0.01 * ((chosen + rejected) ** 2).mean()
    got = bradley_terry_loss(chosen, rejected, margin=margin, center_coefficient=0.01)
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)


def test_loss_gradient_is_sigmoid_of_minus_the_gap():
    # d/d chosen of -log sigmoid(c - r) = -(1 - sigmoid(c - r)) = -sigmoid(r - c), per pair / N.
    chosen = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    rejected = torch.tensor([0.0, 1.0, -2.0], requires_grad=True)
    bradley_terry_loss(chosen, rejected).backward()
    expected = -torch.sigmoid(rejected.detach() - chosen.detach()) / 3
    torch.testing.assert_close(chosen.grad, expected)
    torch.testing.assert_close(rejected.grad, -expected)


def test_loss_is_finite_for_huge_gaps_and_depends_only_on_differences():
    huge = bradley_terry_loss(torch.tensor([-1000.0]), torch.tensor([1000.0]))
    assert torch.isfinite(huge) and huge.item() == pytest.approx(2000.0)
    a = bradley_terry_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.5, 3.0]))
    b = bradley_terry_loss(torch.tensor([11.0, 12.0]), torch.tensor([10.5, 13.0]))
    assert a.item() == pytest.approx(b.item(), rel=1e-6)


def test_loss_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="one score of each per pair"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(2))


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_char_tokenizer()
    recipe = TinyRecipe(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return build_tiny_model(tokenizer, recipe), tokenizer


def test_score_is_read_at_the_last_real_token(tiny):
    policy, tokenizer = tiny
    model = RewardModel.from_causal_lm(policy).eval()
    short = tokenizer(["ab"], return_tensors="pt", add_special_tokens=False)
    padded = tokenizer(["ab", "abcdef"], return_tensors="pt", padding=True, padding_side="right",
                       add_special_tokens=False)
    with torch.no_grad():
        alone = model(short["input_ids"], short["attention_mask"])
        in_batch = model(padded["input_ids"], padded["attention_mask"])
    torch.testing.assert_close(in_batch[0], alone[0], atol=1e-5, rtol=1e-5)
    assert in_batch.shape == (2,)


def test_reward_model_does_not_share_weights_with_the_policy(tiny):
    policy, _ = tiny
    model = RewardModel.from_causal_lm(policy)
    before = next(policy.parameters()).clone()
    for parameter in model.parameters():
        parameter.data.add_(1.0)
    torch.testing.assert_close(next(policy.parameters()), before)


def test_simulated_labeller_follows_bradley_terry():
    n = 4000
    pairs = simulated_preferences(["q"] * n, ["a"] * n, ["b"] * n, [1.0] * n, [0.0] * n, temperature=1.0, seed=0)
    share_a = sum(c == "a" for c in pairs.chosen) / n
    assert share_a == pytest.approx(1 / (1 + math.exp(-1.0)), abs=0.025)  # sigmoid(1) = 0.731
    sharp = simulated_preferences(["q"] * 200, ["a"] * 200, ["b"] * 200, [1.0] * 200, [0.0] * 200,
                                  temperature=0.01, seed=0)
    assert set(sharp.chosen) == {"a"}
    same = simulated_preferences(["q"], ["a"], ["a"], [1.0], [0.0])
    assert len(same) == 0
    with pytest.raises(ValueError, match="temperature"):
        simulated_preferences(["q"], ["a"], ["b"], [1.0], [0.0], temperature=0.0)


def test_training_learns_a_learnable_preference(tiny):
    # The labeller prefers completions with an "x": the model must learn it (held-out pairs).
    policy, tokenizer = tiny
    torch.manual_seed(0)
    words = ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"]
    prompts, chosen, rejected = [], [], []
    for i in range(64):
        prompts.append("q")
        chosen.append(words[i % 8] + "x")
        rejected.append(words[(i + 3) % 8] + "y")
    pairs = PreferencePairs(prompts, chosen, rejected)
    train, test = pairs.split(0.25, seed=0)
    model = RewardModel.from_causal_lm(policy)
    history = train_reward_model(model, tokenizer, train, epochs=30, batch_size=16, learning_rate=3e-3,
                                 test_pairs=test)
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["test_accuracy"] == 1.0
    reward = reward_model_function(model, tokenizer)
    scores = reward(prompts=["q", "q"], completions=["abx", "aby"])
    assert reward.__name__ == "reward_model" and scores[0] > scores[1]
    torch.testing.assert_close(torch.tensor(scores), score_texts(model, tokenizer, ["q", "q"], ["abx", "aby"]))


def test_training_without_train_accuracy_trains_the_same(tiny):
    """Leaving out the training pairs' accuracy skips a scoring pass, not a step of the training."""
    policy, tokenizer = tiny
    pairs = PreferencePairs(["q"] * 12, ["ab" + "x" * (i % 3) for i in range(12)], ["cd"] * 12)
    models = [RewardModel.from_causal_lm(policy, seed=1) for _ in range(2)]
    rows = [train_reward_model(model, tokenizer, pairs, epochs=2, batch_size=4, learning_rate=1e-3,
                               test_pairs=pairs, train_accuracy=flag) for model, flag in zip(models, (True, False))]
    assert "train_accuracy" in rows[0][-1] and "train_accuracy" not in rows[1][-1]
    assert [r["loss"] for r in rows[0]] == [r["loss"] for r in rows[1]]
    assert [r["test_accuracy"] for r in rows[0]] == [r["test_accuracy"] for r in rows[1]]
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_training_refuses_no_pairs(tiny):
    policy, tokenizer = tiny
    with pytest.raises(ValueError, match="pairs is empty"):
        train_reward_model(RewardModel.from_causal_lm(policy), tokenizer, PreferencePairs([], [], []))


def test_the_head_depends_on_the_seed_only_not_on_the_global_random_state(tiny):
    """Re-running a notebook cell must give the same reward model, whatever ran before it."""
    policy, _ = tiny
    torch.manual_seed(1)
    first = RewardModel.from_causal_lm(policy, seed=3).head.weight.detach().clone()
    after_first = torch.rand(1)
    torch.manual_seed(2)
    torch.rand(5)
    second = RewardModel.from_causal_lm(policy, seed=3).head.weight.detach()
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    assert not torch.equal(RewardModel.from_causal_lm(policy, seed=4).head.weight, first)
    torch.manual_seed(1)
    RewardModel.from_causal_lm(policy, seed=3)
    assert torch.equal(torch.rand(1), after_first), "drawing the head changed the global random state"
