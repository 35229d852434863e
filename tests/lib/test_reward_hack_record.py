"""The stored reward-hack runs (benchmarks/reward_hack.py): the hack took, the fix learned, the doctor tells them apart."""

from course_lib.doctor import diagnose
from course_lib.reward_hack import load_reward_hack
from course_lib.rewards.probe import probe_rewards
from course_lib.rewards.flawed import closeness_reward


def _curve(history, key):
    return [row[key] for row in history if key in row]


def test_the_hack_took_and_the_fix_learned():
    record = load_reward_hack()
    flawed, fixed = record["flawed"], record["fixed"]
    reward = _curve(flawed["history"], "reward")
    assert sum(reward[-10:]) / 10 > 10 * sum(reward[:10]) / 10      # training reward up by more than 10x
    accuracy = _curve(flawed["history"], "eval/greedy_accuracy")
    assert accuracy[-1] <= accuracy[0] and flawed["greedy_accuracy_200_after"] < record["settings"][
        "greedy_accuracy_200_before"]
    # the exploiting completions: numbers far above the reference
    sample = flawed["samples"][0]
    assert all(int(c) > 10 * int(sample["answer"]) for c in sample["completions"] if c.isdigit())
    assert fixed["greedy_accuracy_200_after"] >= record["settings"]["greedy_accuracy_200_before"] + 0.10


def test_the_doctor_names_the_hack_and_not_the_fix():
    record = load_reward_hack()
    assert "reward_hacking" in [f.rule for f in diagnose(record["flawed"]["history"])]
    assert "reward_hacking" not in [f.rule for f in diagnose(record["fixed"]["history"])]


def test_the_probe_flags_the_flawed_reward_before_training():
    rows = [{"prompt": [{"role": "user", "content": "What is 47 + 46?"}], "answer": "93"}]
    assert "huge_number" in probe_rewards(closeness_reward, rows, n_prompts=1).hacks
