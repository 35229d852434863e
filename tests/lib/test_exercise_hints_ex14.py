"""Lesson 14's graders name the typical mistake (each wrong answer differs from the
reference by one mistake, written out as a learner would write it)."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import ex14
from course_lib.feedback import Hint


def _hint_of(check, wrong) -> str:
    with pytest.raises(Hint) as caught:
        check(wrong)
    return str(caught.value)


def causal_only(segment_ids):
    return torch.ones(len(segment_ids), len(segment_ids)).tril().bool()


def padding_reads_nothing(segment_ids):
    ids = torch.as_tensor(segment_ids)
    return torch.ones(len(ids), len(ids)).tril().bool() & (ids[:, None] == ids[None, :]) & (ids[:, None] > 0)


def dpo_mean_per_token(c, r, rc, rr, cm, rm, beta=0.1):
    def mean(x, m):
        return (x * m).sum(-1) / m.sum(-1)

    return -torch.nn.functional.logsigmoid(beta * ((mean(c, cm) - mean(rc, cm)) - (mean(r, rm) - mean(rr, rm)))).mean()


def dpo_unmasked(c, r, rc, rr, cm, rm, beta=0.1):
    return -torch.nn.functional.logsigmoid(beta * ((c.sum(-1) - rc.sum(-1)) - (r.sum(-1) - rr.sum(-1)))).mean()


def dpo_sign_swapped(c, r, rc, rr, cm, rm, beta=0.1):
    return -torch.nn.functional.logsigmoid(beta * (((r - rr) * rm).sum(-1) - ((c - rc) * cm).sum(-1))).mean()


def advantage_sign_swapped(student, teacher, mask):
    return (student.detach() - teacher) * mask


def advantage_not_detached(student, teacher, mask):
    return (teacher - student) * mask


def filter_keeps_nan(rewards, num_generations, threshold=1.0, max_per_prompt=None):
    return ~(rewards < threshold)


def filter_caps_the_batch(rewards, num_generations, threshold=1.0, max_per_prompt=None):
    accepted = torch.nan_to_num(rewards, nan=float("-inf")) >= threshold
    return accepted if max_per_prompt is None else accepted & (accepted.long().cumsum(0) <= max_per_prompt)


@pytest.mark.parametrize("check,wrong,words", [
    (ex14.check_packing_mask, causal_only, "must not see each other"),
    (ex14.check_packing_mask, padding_reads_nothing, "reads only itself"),
    (ex14.check_dpo_sigmoid_loss, dpo_mean_per_token, "SUM"),
    (ex14.check_dpo_sigmoid_loss, dpo_unmasked, "padding tokens were summed"),
    (ex14.check_dpo_sigmoid_loss, dpo_sign_swapped, "sign of delta is reversed"),
    (ex14.check_distillation_advantages, advantage_sign_swapped, "sign is reversed"),
    (ex14.check_distillation_advantages, advantage_not_detached, "detach"),
    (ex14.check_rejection_filter, filter_keeps_nan, "NaN"),
    (ex14.check_rejection_filter, filter_caps_the_batch, "whole batch"),
], ids=lambda x: getattr(x, "__name__", None))
def test_each_mistake_gets_its_hint(check, wrong, words):
    assert words in _hint_of(check, wrong)
