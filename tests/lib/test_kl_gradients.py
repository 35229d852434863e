"""The gradient of a KL estimator used as a loss is not the gradient of the KL it estimates.

Setting: a categorical policy `pi = softmax(theta)` over V tokens, a fixed reference `ref`,
tokens sampled from `pi` and held fixed (no gradient flows through the sampling), the
estimator's value added to the loss, as GRPO does with `beta * k3`. The expected gradient
is `sum_x pi(x) * grad k(x)` with the weights `pi(x)` detached. Closed forms, with
`d(x) = log pi(x) - log ref(x)` and `grad_theta log pi(x) = e_x - pi`:

    grad KL(pi || ref) = pi * (d - E_pi[d])      (reverse KL, the one k1/k3 estimate)
    grad KL(ref || pi) = pi - ref                (forward KL)
    E[grad k1] = E_pi[grad log pi] = 0
    E[grad k2] = E_pi[d * grad log pi] = grad KL(pi || ref)
    E[grad k3] = E_pi[(1 - ref/pi) * grad log pi] = pi - ref = grad KL(ref || pi)

(Schulman 2020 for the estimators; the gradient identities follow from the score-function
identity E_pi[grad log pi] = 0.) The expected values are checked too: k1 and k3 average to
KL(pi || ref), so a correct value does not imply a correct gradient.
"""

import pytest
import torch

from course_lib.ops.kl import kl_k1, kl_k2, kl_k3

def _setting(seed: int, vocab: int = 6):
    generator = torch.Generator().manual_seed(seed)
    theta = torch.randn(vocab, generator=generator, dtype=torch.float64)
    ref = torch.softmax(torch.randn(vocab, generator=generator, dtype=torch.float64), dim=0)
    return theta, ref


def _expected_gradient(estimator, theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Exact E_{x~pi}[grad_theta k(x)] by enumerating the V tokens, sampling weights detached."""
    theta = theta.clone().requires_grad_(True)
    logps = torch.log_softmax(theta, dim=0)
    weights = logps.exp().detach()
    per_token = estimator(logps.unsqueeze(0), ref.log().unsqueeze(0)).squeeze(0)  # (V,)
    (weights * per_token).sum().backward()
    return theta.grad


def _closed_forms(theta: torch.Tensor, ref: torch.Tensor):
    pi = torch.softmax(theta, dim=0)
    d = pi.log() - ref.log()
    reverse = pi * (d - (pi * d).sum())
    forward = pi - ref
    return reverse, forward


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k1_as_a_loss_has_zero_expected_gradient(seed):
    theta, ref = _setting(seed)
    reverse, _ = _closed_forms(theta, ref)
    assert reverse.abs().max() > 1e-2  # the true gradient is not zero here
    assert torch.allclose(_expected_gradient(kl_k1, theta, ref), torch.zeros_like(theta), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k2_as_a_loss_follows_the_reverse_kl(seed):
    theta, ref = _setting(seed)
    reverse, _ = _closed_forms(theta, ref)
    assert torch.allclose(_expected_gradient(kl_k2, theta, ref), reverse, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k3_as_a_loss_follows_the_forward_kl(seed):
    theta, ref = _setting(seed)
    reverse, forward = _closed_forms(theta, ref)
    got = _expected_gradient(kl_k3, theta, ref)
    assert torch.allclose(got, forward, atol=1e-12)
    assert not torch.allclose(got, reverse, atol=1e-3)


def test_closed_forms_match_autograd_of_the_exact_divergences():
    """The two closed forms above, against autograd through the exact sums over tokens."""
    theta, ref = _setting(3)
    reverse, forward = _closed_forms(theta, ref)
    t = theta.clone().requires_grad_(True)
    pi = torch.softmax(t, dim=0)
    (grad_reverse,) = torch.autograd.grad((pi * (pi.log() - ref.log())).sum(), t)
    t = theta.clone().requires_grad_(True)
    pi = torch.softmax(t, dim=0)
    (grad_forward,) = torch.autograd.grad((ref * (ref.log() - pi.log())).sum(), t)
    assert torch.allclose(grad_reverse, reverse, atol=1e-12)
    assert torch.allclose(grad_forward, forward, atol=1e-12)


def test_k1_and_k3_values_are_unbiased_although_their_gradients_differ():
    theta, ref = _setting(4)
    pi = torch.softmax(theta, dim=0)
    true_kl = (pi * (pi.log() - ref.log())).sum()
    for estimator in (kl_k1, kl_k3):
        value = (pi * estimator(pi.log().unsqueeze(0), ref.log().unsqueeze(0)).squeeze(0)).sum()
        assert value.item() == pytest.approx(true_kl.item(), rel=1e-12)


def test_both_directions_agree_to_first_order_near_the_reference():
    """Why k3 in the loss works in practice: close to ref, grad KL(ref||pi) ~ grad KL(pi||ref)."""
    theta, ref = _setting(5)
    near = ref.log() + 1e-3 * theta  # logits of a policy 1e-3 away from ref
    reverse, forward = _closed_forms(near, ref)
    assert (forward - reverse).norm() < 1e-2 * forward.norm()
    far_reverse, far_forward = _closed_forms(theta, ref)
    assert (far_forward - far_reverse).norm() > 0.1 * far_forward.norm()
