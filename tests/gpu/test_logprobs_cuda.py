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


def _plain_pytorch(hidden, weight, targets, temperature):
    """PyTorch's own head at the inputs' dtype: the logits in that dtype, the log-softmax in float32."""
    logits = (hidden @ weight.t()).float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def _assert_close_to_float32(result, hidden, weight, targets, upstream, temperature, tol):
    """In float32, within ``tol`` of the float32 head. In bfloat16, no further from it than PyTorch's
    own bfloat16 head is (plus a rounding step): the weight's gradient sums 1,000 tokens' bfloat16-rounded
    logits, and on an H200 the plain head's is 0.1-0.2 from float32 at its worst entry, so a fixed
    tolerance says nothing about the kernel."""
    reference = _reference_grads(hidden, weight, targets, upstream, temperature)
    if hidden.dtype == torch.float32:
        for ours, ref in zip(result, reference):
            torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
        return
    plain = _grads(lambda: _plain_pytorch(hidden, weight, targets, temperature), hidden, weight, upstream)
    for name, ours, base, ref in zip(("log-probs", "grad hidden", "grad weight"), result, plain, reference):
        ours_error, plain_error = (ours - ref).abs().max().item(), (base - ref).abs().max().item()
        assert ours_error <= 1.5 * plain_error + 1e-3, (
            f"{name}: {ours_error:.2e} from float32, PyTorch's bfloat16 head {plain_error:.2e}")


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-3), (torch.bfloat16, None)])
def test_compiled_triton_head_matches_the_float32_logits_on_cuda(dtype, tol):
    from course_lib.ops.triton_logprobs import triton_available, triton_linear_logprobs

    assert triton_available("cuda")
    hidden, weight, targets, upstream = _inputs(1000, dtype)  # not a multiple of any tile
    logp, grad_h, grad_w = _grads(lambda: triton_linear_logprobs(hidden, weight, targets, temperature=0.7)[0],
                                  hidden, weight, upstream)
    assert logp.dtype == torch.float32 and logp.device.type == "cuda"
    assert hidden.grad.dtype == dtype and weight.grad.dtype == dtype
    _assert_close_to_float32((logp, grad_h, grad_w), hidden, weight, targets, upstream, 0.7, tol)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-3), (torch.bfloat16, None)])
def test_chunked_head_matches_the_float32_logits_on_cuda(dtype, tol):
    from course_lib.ops.logprobs import fused_linear_logprobs

    hidden, weight, targets, upstream = _inputs(1000, dtype, seed=1)
    logp, grad_h, grad_w = _grads(lambda: fused_linear_logprobs(hidden, weight, targets, temperature=0.7,
                                                                chunk_size=256), hidden, weight, upstream)
    assert logp.dtype == torch.float32  # float32 out, whatever the head's dtype
    _assert_close_to_float32((logp, grad_h, grad_w), hidden, weight, targets, upstream, 0.7, tol)


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
