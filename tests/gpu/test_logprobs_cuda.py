"""The fused log-prob heads compiled and run on a CUDA GPU (skipped without one).

On a CPU the Triton kernels are tested through Triton's interpreter
(tests/lib/test_triton_logprobs.py); here the compiled kernels, the chunked PyTorch path
and the policy's forward run on the GPU, in float32 and bfloat16, at SmolLM2-135M's head
width and vocabulary (H 576, V 49,152), and are compared with the naive float32 head that
materialises the logits.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu  # skipped without a CUDA device (tests/conftest.py)

H, V = 576, 49152


def _inputs(n: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, H, generator=gen).to("cuda", dtype).requires_grad_(True)
    weight = (torch.randn(V, H, generator=gen) * 3 / H**0.5).to("cuda", dtype).requires_grad_(True)
    targets = torch.randint(0, V, (n,), generator=gen).cuda()
    upstream = torch.randn(n, generator=gen).cuda()
    return hidden, weight, targets, upstream


def _grads(fn, hidden, weight, upstream):
    hidden.grad = weight.grad = None
    logp = fn()
    (logp.float() * upstream).sum().backward()
    return logp.detach().float(), hidden.grad.float(), weight.grad.float()


def _reference_grads(hidden, weight, targets, upstream, temperature):
    h = hidden.detach().float().requires_grad_(True)
    w = weight.detach().float().requires_grad_(True)
    logp = torch.log_softmax(h @ w.t() / temperature, -1).gather(-1, targets[:, None]).squeeze(-1)
    (logp * upstream).sum().backward()
    return logp.detach(), h.grad, w.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-3), (torch.bfloat16, 5e-2)])
def test_compiled_triton_head_matches_the_float32_logits_on_cuda(dtype, tol):
    from course_lib.ops.triton_logprobs import triton_available, triton_linear_logprobs

    assert triton_available("cuda")
    hidden, weight, targets, upstream = _inputs(1000, dtype)  # not a multiple of any tile
    logp, grad_h, grad_w = _grads(lambda: triton_linear_logprobs(hidden, weight, targets, temperature=0.7)[0],
                                  hidden, weight, upstream)
    ref_logp, ref_h, ref_w = _reference_grads(hidden, weight, targets, upstream, 0.7)
    assert logp.dtype == torch.float32 and logp.device.type == "cuda"
    torch.testing.assert_close(logp, ref_logp, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_h, ref_h, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_w, ref_w, rtol=tol, atol=tol)
    assert hidden.grad.dtype == dtype and weight.grad.dtype == dtype


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-3), (torch.bfloat16, 5e-2)])
def test_chunked_head_matches_the_float32_logits_on_cuda(dtype, tol):
    from course_lib.ops.logprobs import fused_linear_logprobs

    hidden, weight, targets, upstream = _inputs(1000, dtype, seed=1)
    logp, grad_h, grad_w = _grads(lambda: fused_linear_logprobs(hidden, weight, targets, temperature=0.7,
                                                                chunk_size=256), hidden, weight, upstream)
    ref_logp, ref_h, ref_w = _reference_grads(hidden, weight, targets, upstream, 0.7)
    torch.testing.assert_close(logp, ref_logp, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_h, ref_h, rtol=tol, atol=tol)
    torch.testing.assert_close(grad_w, ref_w, rtol=tol, atol=tol)


def test_triton_is_the_default_head_on_cuda_and_the_cpu_keeps_the_chunked_path():
    from course_lib.ops.triton_logprobs import prefer_triton

    assert prefer_triton("cuda") and not prefer_triton("cpu")


def test_the_triton_head_holds_less_than_one_logits_tensor_at_16k_tokens():
    """Peak extra memory of a bfloat16 forward + backward at 16,384 tokens stays below the
    size of one float32 (N, V) logits tensor (3 GiB here), which the naive path holds several of."""
    from course_lib.ops.triton_logprobs import triton_linear_logprobs

    hidden, weight, targets, upstream = _inputs(16384, torch.bfloat16, seed=2)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    _grads(lambda: triton_linear_logprobs(hidden, weight, targets)[0], hidden, weight, upstream)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    assert extra < 16384 * V * 4, f"peak extra {extra / 2**30:.2f} GiB"
