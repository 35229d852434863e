"""Checks for lesson 05's hand-written GRPO loop: the learner's loop against the reference loop
and ``Trainer`` on the same batches, the first step's ``grad_norm`` compared first, so that
different update mistakes get different hints.
"""

import math

import torch

from ..algos.grpo import group_advantages as library_group_advantages

from ..feedback import Hint


def _first_number_is_correct(completions, answer, **kwargs):
    from ..rewards import completion_text, extract_first_number, same_answer

    return [1.0 if same_answer(extract_first_number(completion_text(c)), a) else 0.0
            for c, a in zip(completions, answer)]


_LOOP_SETTINGS = dict(prompts_per_batch=4, num_generations=8, max_tokens=6, seed=0)


def _loop_task():
    from ..data import get_task

    return get_task("arithmetic", split="train", n=64, seed=0)


def _variant_loss(logps, old_logps, advantages, mask, epsilon, mistake: str | None) -> torch.Tensor:
    """Exercise 2's loss ('grpo'), or the loss as a typical mistake writes it."""
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)
    mask = mask.to(per_token.dtype)
    if mistake == "token_mean":
        return (per_token * mask).sum() / mask.sum()
    if mistake == "divided_by_T":
        return ((per_token * mask).sum(1) / mask.shape[1]).mean()
    if mistake == "no_mask":
        return per_token.mean()
    if mistake == "token_sum":
        return (per_token * mask).sum(1).mean()
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()


def _variant_advantages(rewards, num_generations, mistake: str | None) -> torch.Tensor:
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(1, keepdim=True)
    if mistake == "no_std":
        return (grouped - mean).view(-1)
    if mistake == "population_std":
        return ((grouped - mean) / (grouped.std(1, unbiased=False, keepdim=True) + 1e-4)).view(-1)
    if mistake == "batch_std":
        return ((grouped - mean) / (rewards.std() + 1e-4)).view(-1)
    return library_group_advantages(rewards, num_generations, scale_rewards="group")


def _reference_loop(model, sample_batch, reward_fn, steps, num_iterations=1, mistake: str | None = None,
                    learning_rate=3e-5, epsilon=0.2) -> list[dict]:
    """The loop as the exercise asks for it, or with one typical mistake (to name that mistake)."""
    from ..policy import completion_forward

    make_optimizer = lambda: torch.optim.AdamW(  # noqa: E731
        model.parameters(), lr=learning_rate, weight_decay=0.01 if mistake == "weight_decay" else 0.0)
    optimizer, log, k = make_optimizer(), [], 0
    while len(log) < steps:
        batch = sample_batch(k)
        k += 1
        inputs = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
        rewards = torch.tensor(reward_fn(batch.texts, batch.answers), dtype=torch.float32)
        advantages = _variant_advantages(rewards, _LOOP_SETTINGS["num_generations"], mistake)
        old_logps = None
        if num_iterations > 1 and mistake != "old_logps_each_pass":
            with torch.no_grad():
                old_logps = completion_forward(model, *inputs)[0]
        for _ in range(min(num_iterations, steps - len(log))):
            if mistake == "optimizer_each_step":
                optimizer = make_optimizer()
            logps = completion_forward(model, *inputs)[0]
            loss = _variant_loss(logps, old_logps, advantages, batch.completion_mask, epsilon, mistake)
            if mistake == "sign":
                loss = -loss
            if mistake != "no_zero_grad":
                optimizer.zero_grad()
            loss.backward()
            if mistake == "no_clip":
                grad_norm = torch.linalg.vector_norm(torch.stack(
                    [p.grad.norm() for p in model.parameters() if p.grad is not None]))
            else:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            log.append({"step": len(log) + 1, "reward": rewards.mean().item(), "grad_norm": grad_norm.item()})
    return log


_LOOP_MISTAKES = {
    "token_mean": "the loss averages over all the valid tokens of the batch at once (loss_type='bnpo' or "
                  "'dapo'); Exercise 2's 'grpo' loss averages each completion over its own tokens first.",
    "divided_by_T": "each completion's masked sum is divided by T, the padded width, not by its own number of "
                    "valid tokens (mask.sum(1)).",
    "no_mask": "the loss averages over the padding too: apply completion_mask.",
    "token_sum": "the loss sums each completion's tokens instead of averaging them.",
    "no_std": "the advantages are not divided by the group's std (+ 1e-4): use your Exercise 1.",
    "population_std": "the advantages use the population std (divide by G); use the sample std, as Exercise 1.",
    "batch_std": "the advantages are divided by the whole batch's std, not each group's: use your Exercise 1.",
    "sign": "the update goes the wrong way: minimise the LOSS (minus the objective), as Exercise 2 returns it.",
    "optimizer_each_step": "AdamW is created again at every step, which throws away its moment estimates: "
                           "create it once, before the loop.",
    "no_clip": "the gradient norm is not clipped: call torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) "
               "after backward() and before optimizer.step().",
    "weight_decay": "AdamW runs with its default weight_decay=0.01; TRL's default, and the exercise's, is 0.0.",
    "no_zero_grad": "the gradients are never zeroed, so each step adds the previous steps' gradients: call "
                    "optimizer.zero_grad() before backward().",
    "old_logps_each_pass": "the old log-probs are recomputed before each pass, so the ratio is 1 on every pass and "
                           "the clip never acts: compute them once per batch, right after sampling, under "
                           "torch.no_grad(), and reuse them for all num_iterations passes.",
}
_GRADIENT_MISTAKES = ("token_mean", "divided_by_T", "no_mask", "token_sum", "no_std", "population_std", "batch_std")
_UPDATE_MISTAKES = ("sign", "optimizer_each_step", "no_clip", "weight_decay", "no_zero_grad")


def _trainer_run(steps: int, num_iterations: int):
    import tempfile

    from ..algos import GRPOConfig
    from ..models import load_policy
    from ..trainer import Trainer

    with tempfile.TemporaryDirectory() as folder:
        reference, tokenizer = load_policy("tiny")
        config = GRPOConfig(output_dir=folder, overwrite_output_dir=True, loss_type="grpo", beta=0.0,
                            num_generations=8, per_device_train_batch_size=32, gradient_accumulation_steps=1,
                            num_iterations=num_iterations, learning_rate=3e-5, lr_scheduler_type="constant",
                            max_completion_length=6, temperature=1.0, max_steps=steps, logging_steps=1, save_steps=0,
                            seed=0)
        log = Trainer(config, [_first_number_is_correct], _loop_task(), reference, tokenizer, progress=False).train()
    return log, reference


def _run_mistakes(names, steps, num_iterations, reward_fn):
    """Each named mistake's log and final weights, from the reference loop with that one mistake."""
    from ..group_batches import group_batch_sampler
    from ..models import load_policy

    for name in names:
        model, tokenizer = load_policy("tiny")
        sample_batch = group_batch_sampler(model, tokenizer, _loop_task(), **_LOOP_SETTINGS)
        yield name, _reference_loop(model, sample_batch, reward_fn, steps, num_iterations, mistake=name), model


def _weight_gap(model, other) -> float:
    return max((p - q).abs().max().item() for p, q in zip(model.parameters(), other.parameters()))


def _check_loop_run(fn, steps: int, num_iterations: int) -> None:
    from ..group_batches import group_batch_sampler
    from ..models import load_policy

    label = "on-policy" if num_iterations == 1 else f"num_iterations={num_iterations}"
    reward_fn = lambda texts, answers: _first_number_is_correct(texts, answers)  # noqa: E731
    model, tokenizer = load_policy("tiny")
    start = [p.detach().clone() for p in model.parameters()]
    sampler = group_batch_sampler(model, tokenizer, _loop_task(), **_LOOP_SETTINGS)
    calls: list[int] = []

    def sample_batch(k):
        calls.append(k)
        return sampler(k)

    kwargs = {} if num_iterations == 1 else {"num_iterations": num_iterations}
    log = fn(model, sample_batch, reward_fn, steps=steps, **kwargs)
    if not isinstance(log, list) or len(log) != steps or not all(
            isinstance(row, dict) and {"reward", "grad_norm"} <= set(row) for row in log):
        raise Hint(f"{label}: return a list of {steps} dicts, one per optimizer step, each with at least 'reward' "
                   f"and 'grad_norm' (the norm clip_grad_norm_ returns); got {log!r}.")
    expected_calls = list(range(-(-steps // num_iterations)))
    if calls != expected_calls:
        raise Hint(f"{label}: sample_batch was called with {calls}; over {steps} optimizer steps with "
                   f"num_iterations={num_iterations} call it once per generation batch, with k = "
                   f"{expected_calls} in order (each batch serves num_iterations optimizer steps). sample_batch "
                   "holds ONE PromptSampler for the whole run, which advances at each call, and k sets the "
                   "sampling seed, as in Trainer.")
    expected, reference = _trainer_run(steps, num_iterations)
    if abs(log[0]["reward"] - expected[0]["reward"]) > 1e-6:  # batch 0 comes from the untouched model
        raise Hint(f"{label}, step 1: mean reward {log[0]['reward']:.4f}, Trainer's {expected[0]['reward']:.4f}: "
                   "report the mean of reward_fn(batch.texts, batch.answers) over the batch that step trained on.")
    if all(torch.equal(p, q) for p, q in zip(model.parameters(), start)):
        raise Hint(f"{label}: the weights did not change: call loss.backward() and optimizer.step() every step "
                   "(and create the optimizer on model.parameters()).")
    first_mine, first_theirs = log[0]["grad_norm"], expected[0]["grad_norm"]
    if not math.isclose(first_mine, first_theirs, rel_tol=1e-4, abs_tol=1e-7):
        for name, wrong, _ in _run_mistakes(_GRADIENT_MISTAKES, 1, num_iterations, reward_fn):
            if math.isclose(first_mine, wrong[0]["grad_norm"], rel_tol=1e-4, abs_tol=1e-7):
                raise Hint(f"{label}, step 1: gradient norm {first_mine:.5g}, Trainer's {first_theirs:.5g}: "
                           f"{_LOOP_MISTAKES[name]}")
        raise Hint(f"{label}, step 1: gradient norm {first_mine:.5g} before clipping, Trainer's {first_theirs:.5g}: "
                   "the gradient of the first step differs, so the advantages or the loss differ (the optimizer has not "
                   "acted yet). Check the z-score within each group (Exercise 1), the per-token log-probs "
                   "(completion_forward on the batch's four tensors) and the 'grpo' loss (Exercise 2). If you report "
                   "grad_norm yourself, report what clip_grad_norm_ returns (the norm before clipping).")
    later = next((theirs["step"] for mine, theirs in zip(log[1:], expected[1:])
                  if abs(mine["reward"] - theirs["reward"]) > 1e-6
                  or not math.isclose(mine["grad_norm"], theirs["grad_norm"], rel_tol=1e-3, abs_tol=1e-7)), None)
    gap = _weight_gap(model, reference)
    if gap <= 1e-6 and later is None:
        _check_clip_fractions(log, expected, label)
        return
    names = _UPDATE_MISTAKES + (("old_logps_each_pass",) if num_iterations > 1 else ())
    for name, _, wrong_model in _run_mistakes(names, steps, num_iterations, reward_fn):
        if _weight_gap(model, wrong_model) <= 1e-6:
            raise Hint(f"{label}: the first step's gradient matches Trainer's, the weights after {steps} steps do "
                       f"not (they differ by up to {gap:.1e}): {_LOOP_MISTAKES[name]}")
    off_policy = ("; old log-probs once per batch, before its first update, without gradient" if num_iterations > 1
                  else "")
    differs = (f"from step {later} on the rewards or gradients differ, " if later is not None else "") + (
        f"the weights after {steps} steps differ by up to {gap:.1e}")
    raise Hint(f"{label}: the first step's gradient matches Trainer's, {differs}: the update is wrong. One "
               "AdamW(model.parameters(), lr, weight_decay=0.0) created before the loop; each step zero_grad, "
               f"backward, clip_grad_norm_(..., 1.0), step{off_policy}.")


def _check_clip_fractions(log, expected, label) -> None:
    for mine, theirs in zip(log, expected):
        if "clip_fraction" not in mine:
            raise Hint(f"{label}: each row also needs 'clip_fraction', the share of valid tokens whose clip is "
                       "active (r < 1 - epsilon with A < 0, or r > 1 + epsilon with A > 0).")
        if abs(mine["clip_fraction"] - theirs["clip_ratio/region_mean"]) > 1e-6:
            raise Hint(f"{label}, step {theirs['step']}: clip_fraction {mine['clip_fraction']:.4f}, Trainer's "
                       f"clip_ratio/region_mean {theirs['clip_ratio/region_mean']:.4f}: count the valid tokens "
                       "(completion_mask) with r < 1 - epsilon and A < 0, or r > 1 + epsilon and A > 0, over all "
                       "valid tokens of the batch.")


def check_grpo_loop(fn, steps: int = 2) -> None:
    """The learner's loop against `Trainer` with the same settings: same rewards, same first gradient,
    same weights; on-policy, then with two optimizer steps on each batch (the clip acts)."""
    _check_loop_run(fn, steps, num_iterations=1)
    _check_loop_run(fn, steps, num_iterations=2)
