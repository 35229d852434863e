"""Rewards as TRL 1.16 has them: a learned reward model, async reward functions, and the two
multi-objective aggregations, each checked against TRL's own code on the same inputs."""

from __future__ import annotations

import asyncio
import inspect
import textwrap
import time
import warnings
from types import SimpleNamespace

import pytest
import torch

from course_lib.algos.grpo import group_advantages, multi_objective_advantages
from course_lib.rewards import RewardFunctionError, RewardModel, compute_rewards

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
Trainer = trl_grpo.GRPOTrainer


@pytest.fixture(scope="module")
def reward_model_folder(tmp_path_factory):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from course_lib.models import load_policy

    policy, tokenizer = load_policy("tiny")
    config = AutoConfig.for_model(**policy.config.to_dict())
    config.num_labels = 1
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    model.config.pad_token_id = tokenizer.pad_token_id
    folder = tmp_path_factory.mktemp("reward_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, config


def _trl_scores(reward_model: RewardModel, prompts, completions) -> torch.Tensor:
    """TRL's `_calculate_rewards` on a bare GRPOTrainer carrying only what it reads."""
    fake = object.__new__(Trainer)
    device = torch.device("cpu")
    fake.__dict__.update(
        reward_funcs=[reward_model.model], reward_processing_classes=[reward_model.tokenizer],
        reward_func_names=["rm"], environments=None, chat_template_kwargs={}, _log_completion_extra=None,
        _log_metric=None, state=SimpleNamespace(global_step=0), is_deepspeed_enabled=False, is_fsdp_enabled=False,
        args=SimpleNamespace(device=device, past_index=-1, report_to=[]),
        accelerator=SimpleNamespace(device=device, process_index=0, num_processes=1, is_main_process=True,
                                    gather=lambda t: t))
    return Trainer._calculate_rewards(fake, [{"prompt": p} for p in prompts], prompts, completions, None)[:, 0]


@pytest.mark.parametrize("conversational", [True, False])
def test_reward_model_scores_as_trl(reward_model_folder, conversational):
    folder, _ = reward_model_folder
    reward_model = RewardModel(folder, batch_size=3)
    if conversational:
        prompts = [[{"role": "user", "content": "What is 2+2?"}]] * 2 + [[{"role": "user", "content": "Hi"}]] * 2
        completions = [[{"role": "assistant", "content": c}] for c in ["4", "The answer is 5", "Hello there", "?"]]
    else:
        prompts, completions = ["2+2=", "2+2=", "Say hi:", "Say hi:"], ["4", " five", " hello there", "?"]
    ours = torch.tensor(reward_model(prompts, completions))
    torch.testing.assert_close(ours, _trl_scores(reward_model, prompts, completions), rtol=1e-5, atol=1e-6)
    assert ours.std() > 0  # the completions really get different scores
    # and it is an ordinary reward function: named by its folder, weighted with others
    per_func, total = compute_rewards([reward_model, lambda prompts, completions, **_: [1.0] * 4], prompts,
                                      completions, weights=[2.0, 1.0])
    torch.testing.assert_close(total, 2.0 * ours + 1.0)


def test_reward_model_rejects_a_classifier_head_and_missing_folders(reward_model_folder, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder, config = reward_model_folder
    config = type(config).from_dict({**config.to_dict(), "num_labels": 3})
    classifier = AutoModelForSequenceClassification.from_config(config)
    with pytest.raises(ValueError, match="num_labels=3.*Fix: use a reward model with a single output"):
        RewardModel(classifier, AutoTokenizer.from_pretrained(folder))
    with pytest.raises(ValueError, match="is not a local folder"):
        RewardModel(tmp_path / "missing")


def test_async_reward_functions_run_concurrently_and_fail_clearly():
    async def slow_length(prompts, completions, **_):
        await asyncio.sleep(0.3)
        return [float(len(c)) for c in completions]

    async def slow_one(prompts, completions, **_):
        await asyncio.sleep(0.3)
        return [1.0] * len(completions)

    start = time.perf_counter()
    per_func, total = compute_rewards([slow_length, slow_one, lambda prompts, completions, **_: [0.5, 0.5]],
                                      ["p", "q"], ["ab", "abcd"])
    assert time.perf_counter() - start < 0.55  # two 0.3 s functions overlapped
    torch.testing.assert_close(per_func, torch.tensor([[2.0, 1.0, 0.5], [4.0, 1.0, 0.5]]))

    async def broken(prompts, completions, **_):
        raise KeyError("judge offline")

    with pytest.raises(RewardFunctionError, match="'broken' raised KeyError"):
        compute_rewards([broken], ["p"], ["a"])


def _trl_advantages(per_func, weights, G, aggregation, scale_rewards="group"):
    """The lines of TRL's `_generate_and_score_completions` that turn rewards into advantages."""
    source = inspect.getsource(Trainer._generate_and_score_completions)
    start = source.rindex("\n", 0, source.index('if self.multi_objective_aggregation == "sum_then_normalize"')) + 1
    stop = source.index("advantages = torch.nan_to_num(advantages, nan=0.0)", start)
    stop = source.index("\n", stop)
    namespace = dict(self=SimpleNamespace(multi_objective_aggregation=aggregation, scale_rewards=scale_rewards,
                                          reward_weights=torch.tensor(weights), reward_funcs=[None] * len(weights)),
                     rewards_per_func=per_func, num_generations=G, device="cpu", torch=torch,
                     nanstd=trl_grpo.nanstd, unscorable_mask=torch.isnan(per_func).all(dim=1))
    exec(compile(textwrap.dedent(source[start:stop]), "trl_advantages", "exec"), namespace)
    return namespace["advantages"]


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("G", [2, 4])
def test_multi_objective_aggregation_matches_trl(aggregation, G):
    gen = torch.Generator().manual_seed(G)
    per_func = torch.stack([torch.randint(0, 2, (8,), generator=gen).float(),   # a 0/1 correctness reward
                            100 * torch.rand(8, generator=gen)], dim=1)          # a reward on a 0..100 scale
    per_func[3, 0] = float("nan")                                                # one function skipped a sample
    per_func[5] = float("nan")                                                   # an unscorable sample
    weights = [1.0, 0.5]
    theirs = _trl_advantages(per_func, weights, G, aggregation)
    if aggregation == "normalize_then_sum":
        ours, _ = multi_objective_advantages(per_func, torch.tensor(weights), G)
    else:
        total = (per_func * torch.tensor(weights)).nansum(dim=1)
        total[torch.isnan(per_func).all(dim=1)] = float("nan")
        ours = group_advantages(total, G, "group")
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert ours[5] == 0.0


def test_normalize_then_sum_is_blind_to_each_rewards_scale():
    """Rescaling one reward by 100 leaves normalize_then_sum's advantages unchanged, while under
    sum_then_normalize the rescaled reward takes over the ranking."""
    per_func = torch.tensor([[1.0, 0.4], [0.0, 0.5], [1.0, 0.1], [0.0, 0.7]])
    rescaled = per_func * torch.tensor([1.0, 100.0])
    weights = torch.tensor([1.0, 0.5])
    # equal up to the 1e-4 added to each std (relative 1.4e-3 for the small scale's std of 0.07)
    torch.testing.assert_close(multi_objective_advantages(per_func, weights, 2)[0],
                               multi_objective_advantages(rescaled, weights, 2)[0], rtol=5e-3, atol=5e-3)
    before = group_advantages((per_func * weights).sum(1), 2, "group")
    after = group_advantages((rescaled * weights).sum(1), 2, "group")
    assert before[0] > 0 > after[0]  # correct but shorter on the big reward: now pushed down
