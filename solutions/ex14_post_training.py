"""Lesson 14 exercises: the four pieces that make SFT, DPO, distillation and rejection sampling.

Each function is a few lines; each hides one classic mistake that trains without an error
and quietly learns the wrong thing. The tests compare your functions with values worked out
by hand and with `course_lib.algos` (whose losses match TRL 1.16).
"""

import torch


def packing_mask(segment_ids: list[int]) -> torch.Tensor:
    """Which tokens of a packed row may attend to which: a (L, L) bool matrix.

    Several examples share one row of length L; `segment_ids[t]` says which example token t
    belongs to (1, 2, ...), 0 for padding. Entry `[i, j]` is True when token i may read
    token j: j is not after i (causal) AND both tokens belong to the same example. A padding
    token may read only itself (so no row of the attention softmax is empty).
    """
    # BEGIN SOLUTION
    # HINT: start from the causal mask torch.ones(L, L).tril().bool(), then AND it with
    # HINT: "same example" (ids[:, None] == ids[None, :]); without the second part the second
    # HINT: example of a row reads the first one: packing then changes what the model learns.
    ids = torch.as_tensor(segment_ids)
    length = len(segment_ids)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    same = ids[:, None] == ids[None, :]
    return (causal & same) | torch.eye(length, dtype=torch.bool)
    # END SOLUTION


def dpo_sigmoid_loss(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor, ref_chosen_logps: torch.Tensor,
                     ref_rejected_logps: torch.Tensor, chosen_mask: torch.Tensor, rejected_mask: torch.Tensor,
                     beta: float = 0.1) -> torch.Tensor:
    """DPO's loss (Rafailov et al. 2023, eq. 7), averaged over P pairs, from per-token log-probs.

    All log-prob tensors are (P, T): the log-prob of each completion token under the policy
    (`chosen_logps`, `rejected_logps`) or the frozen reference (`ref_*`); the masks (P, T) are 1
    on completion tokens. A completion's log-probability is the SUM of its tokens' log-probs.
    With `delta = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))` the loss of a
    pair is `-log sigmoid(beta * delta)`. Return the mean over pairs (a 0-dim tensor).
    """
    # BEGIN SOLUTION
    # HINT: sum over tokens with the mask, (x * mask).sum(-1), not a mean: a mean per token is a
    # HINT: different objective (length-normalised). Then torch.nn.functional.logsigmoid.
    def total(logps, mask):
        return (logps * mask).sum(-1)

    chosen = total(chosen_logps, chosen_mask) - total(ref_chosen_logps, chosen_mask)
    rejected = total(rejected_logps, rejected_mask) - total(ref_rejected_logps, rejected_mask)
    return -torch.nn.functional.logsigmoid(beta * (chosen - rejected)).mean()
    # END SOLUTION


def distillation_advantages(student_logps: torch.Tensor, teacher_logps: torch.Tensor,
                            mask: torch.Tensor) -> torch.Tensor:
    """On-policy distillation's per-token advantage, (B, T).

    The student sampled the tokens; `student_logps` and `teacher_logps` are the log-probs of
    those tokens under each model (B, T). The per-token reward is minus the one-sample estimate
    of the reverse KL, `log p_teacher(y_t) - log p_student(y_t)`: positive where the teacher
    likes the token more than the student does. It is a constant for the policy gradient: no
    gradient may flow through it. 0 where `mask` is 0.
    """
    # BEGIN SOLUTION
    # HINT: teacher minus student (the sign decides whether the student moves towards the
    # HINT: teacher or away), .detach() the student's log-probs, multiply by the mask.
    return (teacher_logps - student_logps.detach()) * mask
    # END SOLUTION


def rejection_filter(rewards: torch.Tensor, num_generations: int, threshold: float = 1.0,
                     max_per_prompt: int | None = None) -> torch.Tensor:
    """Which samples a rejection-sampling round keeps: a (B,) bool tensor.

    `rewards` is (B,), prompt-major: the `num_generations` samples of a prompt are contiguous.
    A sample is accepted when its reward is >= `threshold`; NaN (unscorable) is never accepted.
    With `max_per_prompt`, keep only the FIRST `max_per_prompt` accepted samples of each prompt
    (ReST-EM's cap: easy prompts, solved by every sample, would otherwise fill the SFT data).
    """
    # BEGIN SOLUTION
    # HINT: the cap is per prompt: view the accepted mask as (prompts, num_generations) and
    # HINT: count with a cumulative sum along each row; a cap over the whole batch keeps only
    # HINT: the first prompts' samples.
    accepted = torch.nan_to_num(rewards, nan=float("-inf")) >= threshold
    if max_per_prompt is None:
        return accepted
    grouped = accepted.view(-1, num_generations)
    rank = grouped.long().cumsum(dim=1)  # 1 for the first accepted sample of a prompt, 2 for the second...
    return (grouped & (rank <= max_per_prompt)).view(-1)
    # END SOLUTION
