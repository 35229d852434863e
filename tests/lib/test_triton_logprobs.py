"""The Triton log-prob/entropy kernels, run on CPU through Triton's interpreter.

Every result is compared with the naive float32 path that materialises the logits
(`softcap * tanh(hidden @ weight.T * scale / softcap) / T`, log-softmax, gather, entropy),
values and gradients for `hidden` and `weight`, at shapes that are not multiples of the
tiles (16 rows x 32 columns x 16 hidden units under the interpreter).

Triton decides on the interpreter when it is imported (its own reduction helpers are
decorated then), so `TRITON_INTERPRET=1` must be set before anything imports it. The
first test therefore runs this file again in a child process with the variable set,
where the other tests run; in the parent they are skipped. The environment of the other
tests is left as it is.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
TOL = dict(rtol=1e-5, atol=1e-5)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in the interpreter's child process "
                                 "(test_kernels_under_the_triton_interpreter)")
tlp = importlib.import_module("course_lib.ops.triton_logprobs") if INTERPRETED else None


@pytest.mark.skipif(INTERPRETED, reason="this is the child process")
def test_kernels_under_the_triton_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
                            "-p", "no:xdist"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    report = child.stdout[-6000:] + child.stderr[-3000:]
    assert child.returncode == 0, report
    assert " passed" in child.stdout and " failed" not in child.stdout, report


def _naive(hidden, weight, targets, temperature=1.0, softcap=None, logit_scale=1.0):
    """The head the kernel must equal, in float32, with the full logits."""
    logits = hidden.float() @ weight.float().t() * logit_scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _inputs(n, h, v, seed=0, dtype=torch.float32, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen).to(dtype).requires_grad_(True)
    weight = (torch.randn(v, h, generator=gen) * spread / h**0.5).to(dtype).requires_grad_(True)
    targets = torch.randint(0, v, (n,), generator=gen)
    upstream = torch.randn(2, n, generator=gen)
    return hidden, weight, targets, upstream


def _values_and_grads(fn, hidden, weight, upstream, use=("logp", "entropy")):
    hidden.grad = weight.grad = None
    logp, entropy = fn()
    loss = 0.0
    if "logp" in use:
        loss = loss + (logp * upstream[0]).sum()
    if "entropy" in use:
        loss = loss + (entropy * upstream[1]).sum()
    loss.backward()
    return logp.detach(), entropy.detach(), hidden.grad.clone(), weight.grad.clone()


CASES = {
    # name: (N, H, V, temperature, softcap, logit_scale, chunk_bytes)
    "plain": (37, 40, 101, 1.0, None, 1.0, 2**20),
    "temperature": (37, 40, 101, 0.7, None, 1.0, 2**20),
    "softcap_scale_temperature": (37, 40, 101, 1.3, 2.0, 1.7, 2**20),
    "column_blocks": (37, 24, 101, 0.9, 4.0, 1.0, 1),  # N <= V: several vocabulary blocks
    "row_blocks": (150, 24, 70, 1.2, None, 1.0, 1),  # N > V: several row blocks
    "row_blocks_softcap": (150, 24, 70, 1.0, 1.5, 0.5, 1),
    "single_row": (1, 16, 33, 1.0, None, 1.0, 2**20),
}


@interpreted
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_logprobs_entropy_and_gradients_match_the_naive_path(case):
    n, h, v, temperature, softcap, scale, chunk_bytes = CASES[case]
    hidden, weight, targets, upstream = _inputs(n, h, v)
    head = dict(temperature=temperature, softcap=softcap, logit_scale=scale)
    ours = _values_and_grads(lambda: tlp.triton_linear_logprobs(hidden, weight, targets, chunk_bytes=chunk_bytes,
                                                                **head), hidden, weight, upstream)
    ref = _values_and_grads(lambda: _naive(hidden, weight, targets, **head), hidden, weight, upstream)
    for name, a, b in zip(("logp", "entropy", "grad_hidden", "grad_weight"), ours, ref):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, name=name: f"{name}: {m}")


@interpreted
@pytest.mark.parametrize("use", [("logp",), ("entropy",)])
def test_gradient_through_one_output_alone(use):
    """Only the log-probs (the entropy's gradient is None) or only the entropies."""
    hidden, weight, targets, upstream = _inputs(20, 16, 50, seed=1)
    ours = _values_and_grads(lambda: tlp.triton_linear_logprobs(hidden, weight, targets, temperature=0.8),
                             hidden, weight, upstream, use)
    ref = _values_and_grads(lambda: _naive(hidden, weight, targets, temperature=0.8), hidden, weight, upstream, use)
    for a, b in zip(ours[2:], ref[2:]):
        torch.testing.assert_close(a, b, **TOL)


@interpreted
def test_vocabulary_splits_merge_to_the_same_statistics():
    """The forward's per-split (max, sum, shifted sum) merge is exact: 1 split == 4 splits."""
    hidden, weight, targets, _ = _inputs(19, 16, 128 + 5, seed=2)
    with torch.no_grad():
        one = tlp.triton_linear_logprobs(hidden, weight, targets, softcap=3.0, _splits=1)
        four = tlp.triton_linear_logprobs(hidden, weight, targets, softcap=3.0, _splits=4)
        ref = _naive(hidden, weight, targets, softcap=3.0)
    for a, b, c in zip(one, four, ref):
        torch.testing.assert_close(a, c, **TOL)
        torch.testing.assert_close(b, c, **TOL)


@interpreted
def test_hand_worked_uniform_head():
    """A zero head gives uniform next-token distributions: log p = -log V, entropy = log V."""
    vocab = 45
    hidden = torch.randn(5, 16)
    weight = torch.zeros(vocab, 16)
    logp, entropy = tlp.triton_linear_logprobs(hidden, weight, torch.tensor([0, 1, 2, 43, 44]), temperature=0.5)
    torch.testing.assert_close(logp, torch.full((5,), -math.log(vocab)), **TOL)
    torch.testing.assert_close(entropy, torch.full((5,), math.log(vocab)), **TOL)


@interpreted
def test_huge_logits_stay_finite_and_soft_capping_bounds_them():
    """Logits in the thousands: the online log-sum-exp does not overflow; with a cap of 5
    every logit lies in (-5, 5), so each log-prob is at least -10 - log V."""
    hidden, weight, targets, upstream = _inputs(17, 16, 40, seed=3, spread=400.0)
    plain = _values_and_grads(lambda: tlp.triton_linear_logprobs(hidden, weight, targets), hidden, weight, upstream)
    ref = _values_and_grads(lambda: _naive(hidden, weight, targets), hidden, weight, upstream)
    assert all(torch.isfinite(t).all() for t in plain)
    torch.testing.assert_close(plain[0], ref[0], rtol=1e-5, atol=1e-3)  # logits ~1e3: float32 spacing 6e-5
    capped, _ = tlp.triton_linear_logprobs(hidden, weight, targets, softcap=5.0)
    assert (capped >= -10 - math.log(40)).all() and (capped < 0).all()


@interpreted
def test_half_precision_inputs_accumulate_in_float32():
    """bfloat16/float16 inputs: float32 outputs equal to the float32 path on the same
    (rounded) values; gradients in the input dtype, to that dtype's precision."""
    for dtype, chunk_bytes in ((torch.bfloat16, 1), (torch.float16, 2**20)):  # several blocks, one block
        hidden, weight, targets, upstream = _inputs(33, 32, 70, seed=4, dtype=dtype)
        ours = _values_and_grads(lambda: tlp.triton_linear_logprobs(hidden, weight, targets, temperature=0.9,
                                                                    chunk_bytes=chunk_bytes),
                                 hidden, weight, upstream)
        ref = _values_and_grads(lambda: _naive(hidden, weight, targets, temperature=0.9), hidden, weight, upstream)
        assert ours[0].dtype == torch.float32 and ours[2].dtype == dtype and ours[3].dtype == dtype
        torch.testing.assert_close(ours[0], ref[0], **TOL)
        torch.testing.assert_close(ours[1], ref[1], **TOL)
        for a, b in zip(ours[2:], ref[2:]):
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2 * b.float().abs().max().item())


@interpreted
def test_batched_shapes_and_agreement_with_the_chunked_pytorch_path():
    from course_lib.ops.logprobs import fused_linear_logprobs

    gen = torch.Generator().manual_seed(5)
    hidden = torch.randn(3, 7, 24, generator=gen, requires_grad=True)
    weight = torch.randn(60, 24, generator=gen, requires_grad=True)
    targets = torch.randint(0, 60, (3, 7), generator=gen)
    logp, entropy = tlp.triton_linear_logprobs(hidden, weight, targets, temperature=1.4)
    assert logp.shape == entropy.shape == (3, 7)
    chunked, chunked_entropy = fused_linear_logprobs(hidden, weight, targets, temperature=1.4, chunk_size=8,
                                                     return_entropy=True)
    torch.testing.assert_close(logp, chunked, **TOL)
    torch.testing.assert_close(entropy, chunked_entropy, **TOL)
    grads = torch.autograd.grad(logp.sum(), (hidden, weight))
    chunked_grads = torch.autograd.grad(chunked.sum(), (hidden, weight))
    for a, b in zip(grads, chunked_grads):
        torch.testing.assert_close(a, b, **TOL)


@interpreted
def test_no_tokens_gives_empty_outputs_connected_to_the_graph():
    hidden = torch.randn(0, 8, requires_grad=True)
    weight = torch.randn(10, 8, requires_grad=True)
    logp, entropy = tlp.triton_linear_logprobs(hidden, weight, torch.zeros(0, dtype=torch.long))
    assert logp.shape == entropy.shape == (0,)
    logp.sum().backward()
    assert torch.equal(weight.grad, torch.zeros_like(weight))


@interpreted
@pytest.mark.parametrize("kwargs, field", [
    (dict(temperature=0.0), "temperature"),
    (dict(softcap=-1.0), "softcap"),
    (dict(logit_scale=float("inf")), "logit_scale"),
    (dict(targets=torch.tensor([0, 10])), "target id 10"),
    (dict(targets=torch.tensor([0, 1, 2])), "targets"),
    (dict(weight=torch.zeros(10, 8, dtype=torch.float64)), "dtype"),
    (dict(weight=torch.zeros(10, 7)), "weight"),
])
def test_bad_input_is_rejected_naming_the_field(kwargs, field):
    args = dict(hidden=torch.randn(2, 8), weight=torch.randn(10, 8), targets=torch.tensor([0, 9]))
    for key in ("hidden", "weight", "targets"):
        if key in kwargs:
            args[key] = kwargs.pop(key)
    with pytest.raises(ValueError, match=field):
        tlp.triton_linear_logprobs(args["hidden"], args["weight"], args["targets"], **kwargs)


@interpreted
def test_interpreter_reports_available():
    assert tlp.triton_available("cpu") and tlp.triton_available()


@pytest.mark.skipif(INTERPRETED or torch.cuda.is_available(), reason="needs the compiled mode on a CPU-only machine")
def test_without_interpreter_or_gpu_the_kernel_is_unavailable_and_says_what_to_use():
    from course_lib.ops import triton_logprobs

    assert not triton_logprobs.triton_available("cpu")
    with pytest.raises(RuntimeError, match="fused_linear_logprobs"):
        triton_logprobs.triton_linear_logprobs(torch.randn(2, 8), torch.randn(10, 8), torch.tensor([0, 9]))


def _tiny_causal_lm(name: str, **extra):
    transformers = pytest.importorskip("transformers")
    config_cls = getattr(transformers, f"{name}Config")
    model_cls = getattr(transformers, f"{name}ForCausalLM")
    config = config_cls(vocab_size=70, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16, **extra)
    torch.manual_seed(0)
    return model_cls(config).eval()


@interpreted
@pytest.mark.parametrize("name, extra", [
    ("Gemma2", dict(final_logit_softcapping=3.0)),  # soft-capped head
    ("Cohere", dict(logit_scale=0.25, tie_word_embeddings=True)),  # multiplied head
    ("Granite", dict(logits_scaling=4.0)),  # divided head
])
def test_head_logit_params_reproduce_the_models_own_logits(name, extra):
    """The head's order (scale, cap, then temperature) against transformers' models."""
    model = _tiny_causal_lm(name, **extra)
    ids = torch.randint(0, 70, (2, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]  # (2, 5, V), position t-1 scores token t
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
    temperature = 0.7
    ref_logp = torch.log_softmax(logits.float() / temperature, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    from course_lib.ops.logprobs import lm_head

    head = lm_head(model)  # the one head rule of the library
    params = {"logit_scale": head.scale, "softcap": head.softcap}
    logp, _ = tlp.triton_linear_logprobs(hidden, model.get_output_embeddings().weight, ids[:, 1:],
                                         temperature=temperature, **params)
    torch.testing.assert_close(logp, ref_logp, **TOL)
    if name == "Gemma2":
        assert params == {"logit_scale": 1.0, "softcap": 3.0}


@pytest.mark.skipif(INTERPRETED, reason="plain Python; runs in the parent")
def test_default_selection(monkeypatch):
    from course_lib.ops import triton_logprobs

    assert not triton_logprobs.prefer_triton("cpu")  # the chunked PyTorch path stays the CPU default
    if torch.cuda.is_available():
        assert triton_logprobs.prefer_triton("cuda")


@pytest.mark.skipif(INTERPRETED, reason="plain Python; runs in the parent")
def test_logprob_kernel_triton_where_triton_cannot_run_is_refused_with_the_fix():
    from course_lib.ops.logprobs import LMHead, head_logprobs

    head = LMHead(weight=torch.randn(11, 4), bias=None, scale=1.0, softcap=None)
    hidden, ids = torch.randn(3, 4), torch.tensor([1, 5, 7])
    with pytest.raises(ValueError, match=r"logprob_kernel='triton' needs Triton on a CUDA device.*Fix: set "
                                         r"logprob_kernel='auto'"):
        head_logprobs(head, hidden, ids, triton=True)
    chunked, _ = head_logprobs(head, hidden, ids, triton=False, chunk_size=2)
    full, _ = head_logprobs(head, hidden, ids, fused=False)
    torch.testing.assert_close(chunked, full)


@interpreted
def test_policy_forward_uses_the_kernel_where_preferred(monkeypatch):
    """`completion_forward` with the Triton head (forced on, as on a GPU) gives the log-probs,
    entropies and head gradient of its full-logits path."""
    import course_lib.ops.logprobs as head_module
    import course_lib.policy as policy
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, vocab_size=90,
                                         max_position_embeddings=32, pad_token_id=0)).eval()
    gen = torch.Generator().manual_seed(7)
    prompt_ids, completion_ids = torch.randint(1, 90, (3, 4), generator=gen), torch.randint(1, 90, (3, 5), generator=gen)
    prompt_mask = torch.ones_like(prompt_ids)
    completion_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])

    calls = []
    monkeypatch.setattr(head_module, "triton_linear_logprobs",
                        lambda *a, **k: calls.append(k) or tlp.triton_linear_logprobs(*a, **k))

    def run(use_kernel):
        monkeypatch.setattr(head_module, "prefer_triton", lambda device: use_kernel)
        model.zero_grad()
        logps, _, entropies = policy.completion_forward(model, prompt_ids, prompt_mask, completion_ids,
                                                        completion_mask, temperature=0.7, fused=True,
                                                        with_entropy=True)
        (logps * completion_mask).sum().backward()
        return logps.detach(), entropies, model.lm_head.weight.grad.clone()

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b, **TOL)
    assert calls == [{"temperature": 0.7, "logit_scale": 1.0, "softcap": None}]  # once, with the head's params


@pytest.mark.skipif(INTERPRETED, reason="compiles the real kernels; runs in the parent")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_kernels_compile_for_a_hopper_gpu_without_one(dtype):
    """Lowering to PTX and a cubin (Triton's bundled ptxas) needs no device: this catches
    what the interpreter lets through (types, layouts, register spills into errors)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as error:
        pytest.skip(f"this triton has no ASTSource/GPUTarget: {error}")
    from course_lib.ops import triton_logprobs

    flags = dict(HAS_SOFTCAP=True, BLOCK_N=64, BLOCK_V=128, BLOCK_H=64, UPCAST=False,
                 PRECISION="ieee" if dtype == "fp32" else "tf32")
    floats = {"in_mult", "out_mult"}
    half_pointers = {"h_ptr", "w_ptr", "out_ptr"}
    for kernel, extra in ((triton_logprobs._forward_kernel, {}),
                          (triton_logprobs._grad_logits_kernel, {"HAS_ENTROPY_GRAD": True})):
        constexprs = {**flags, **extra}
        signature = {}
        for name in kernel.arg_names:
            if name in constexprs:
                signature[name] = "constexpr"
            elif name == "y_ptr":
                signature[name] = "*i64"
            elif name.endswith("_ptr"):
                signature[name] = f"*{dtype}" if name in half_pointers else "*fp32"
            else:
                signature[name] = "fp32" if name in floats else "i32"
        try:
            compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs),
                                      target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 2})
        except FileNotFoundError as error:  # no ptxas in this triton wheel
            pytest.skip(str(error))
        assert compiled.asm["cubin"], kernel.__name__
