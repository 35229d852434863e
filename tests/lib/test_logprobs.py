"""Log-probs: selective log-softmax, entropy, the fused head and the model helper.

Every fused result is compared with the naive path that materialises the full logits
(`log_softmax(hidden @ weight.T / T)` then gather), values and gradients.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.ops.logprobs import default_chunk_size, entropy_from_logits, fused_linear_logprobs, model_logprobs, selective_log_softmax

TOL = dict(rtol=1e-5, atol=1e-5)


def _naive(hidden, weight, ids, temperature=1.0):
    logits = hidden @ weight.t() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def _values_and_grads(fn, hidden, weight, upstream):
    hidden = hidden.detach().clone().requires_grad_(True)
    weight = weight.detach().clone().requires_grad_(True)
    out = fn(hidden, weight)
    (out * upstream).sum().backward()
    return out.detach(), hidden.grad, weight.grad


# ------------------------------------------------------------ small exact references


def test_selective_log_softmax_by_hand():
    # logits [0, ln 3] -> probabilities [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0]]])
    ids = torch.tensor([[1, 0]])
    torch.testing.assert_close(selective_log_softmax(logits, ids), torch.tensor([[math.log(0.75), math.log(0.5)]]))
    # temperature 2 halves the logits: [0, ln 3 / 2] -> p(1) = sqrt(3) / (1 + sqrt(3))
    expected = math.log(math.sqrt(3) / (1 + math.sqrt(3)))
    assert selective_log_softmax(logits, ids, temperature=2.0)[0, 0].item() == pytest.approx(expected, rel=1e-6)


def test_selective_log_softmax_matches_torch_and_handles_bf16():
    gen = torch.Generator().manual_seed(0)
    logits = 5 * torch.randn(3, 7, 50, generator=gen)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    expected = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, ids), expected)
    half = selective_log_softmax(logits.bfloat16(), ids)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, expected, rtol=0, atol=0.1)


def test_entropy_by_hand_and_chunking():
    uniform = torch.zeros(2, 8)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2,), math.log(8)))
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.randn(3, 5, 11)
    full = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    for chunk in (1, 4, 7, 100):
        torch.testing.assert_close(entropy_from_logits(logits, chunk_size=chunk), full)


def test_default_chunk_size_respects_the_budget():
    rows = default_chunk_size(49_152)
    assert rows % 64 == 0 and rows * 49_152 * 4 <= 64 * 2**20
    assert default_chunk_size(10**9) == 64  # never below one aligned block


# ---------------------------------------------------------------- the fused head


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 16, 64, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fused_matches_naive_values_and_gradients(chunk_size, temperature):
    gen = torch.Generator().manual_seed(1)
    num_rows, hidden_size, vocab = 37, 24, 53  # 37 rows: no chunk size above divides it
    hidden = torch.randn(num_rows, hidden_size, generator=gen)
    weight = torch.randn(vocab, hidden_size, generator=gen) / 3
    ids = torch.randint(0, vocab, (num_rows,), generator=gen)
    upstream = torch.randn(num_rows, generator=gen)
    fused = _values_and_grads(
        lambda h, w: fused_linear_logprobs(h, w, ids, temperature=temperature, chunk_size=chunk_size),
        hidden, weight, upstream)
    naive = _values_and_grads(lambda h, w: _naive(h, w, ids, temperature), hidden, weight, upstream)
    for ours, reference in zip(fused, naive):
        torch.testing.assert_close(ours, reference, **TOL)


def test_fused_passes_gradcheck_in_float64():
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(9, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 13, (9,), generator=gen)
    assert torch.autograd.gradcheck(
        lambda h, w: fused_linear_logprobs(h, w, ids, temperature=0.6, chunk_size=4), (hidden, weight)
    )


def _naive_head(hidden, weight, ids, scale, softcap, temperature):
    """Log-probs of ``ids`` and entropies from the full logits, written out: the reference."""
    logits = scale * hidden @ weight.T
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    return log_p.gather(1, ids[:, None]).squeeze(1), -(log_p.exp() * log_p).sum(-1)


@pytest.mark.parametrize("scale, softcap, temperature", [(1.0, 5.0, 1.0), (0.5, 3.0, 0.7), (2.0, None, 0.8)])
def test_fused_with_scale_and_soft_cap_matches_naive(scale, softcap, temperature):
    """The head transforms of Gemma-2 (soft cap) and Cohere/Granite (scale), values and gradients."""
    gen = torch.Generator().manual_seed(4)
    hidden = torch.randn(11, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = (3 * torch.randn(17, 6, generator=gen, dtype=torch.float64)).requires_grad_()
    ids = torch.randint(0, 17, (11,), generator=gen)
    logps, entropy = fused_linear_logprobs(hidden, weight, ids, temperature=temperature, chunk_size=4,
                                           return_entropy=True, scale=scale, softcap=softcap)
    naive, naive_entropy = _naive_head(hidden, weight, ids, scale, softcap, temperature)
    assert torch.allclose(logps, naive, atol=1e-10)
    assert torch.allclose(entropy, naive_entropy, atol=1e-10)
    weights = torch.linspace(-1, 1, 11, dtype=torch.float64)
    grads = torch.autograd.grad((logps * weights).sum(), (hidden, weight))
    naive_grads = torch.autograd.grad((naive * weights).sum(), (hidden, weight))
    for ours, theirs in zip(grads, naive_grads):
        assert torch.allclose(ours, theirs, atol=1e-10)
    assert torch.autograd.gradcheck(
        lambda h, w: fused_linear_logprobs(h, w, ids, temperature=temperature, chunk_size=5, scale=scale,
                                           softcap=softcap), (hidden, weight))


@pytest.mark.parametrize("scale, softcap, temperature", [(1.0, None, 1.0), (1.0, None, 0.7), (0.5, 3.0, 0.8)])
def test_fused_entropy_gradient_matches_naive(scale, softcap, temperature):
    """An entropy bonus differentiates the fused entropies: same gradient as full logits (float32, 1e-5),
    alone and mixed with the log-probs' gradient; gradcheck in float64."""
    gen = torch.Generator().manual_seed(6)
    hidden = torch.randn(13, 8, generator=gen, requires_grad=True)
    weight = (2 * torch.randn(29, 8, generator=gen)).requires_grad_()
    ids = torch.randint(0, 29, (13,), generator=gen)
    logps, entropy = fused_linear_logprobs(hidden, weight, ids, temperature=temperature, chunk_size=4,
                                           return_entropy=True, scale=scale, softcap=softcap)
    naive_logps, naive_entropy = _naive_head(hidden, weight, ids, scale, softcap, temperature)
    a, b = torch.linspace(-1, 1, 13), torch.linspace(0.5, -2, 13)
    for objective in (lambda lp, h: (h * b).sum(), lambda lp, h: (lp * a).sum() - 0.3 * (h * b).sum()):
        ours = torch.autograd.grad(objective(logps, entropy), (hidden, weight), retain_graph=True)
        naive = torch.autograd.grad(objective(naive_logps, naive_entropy), (hidden, weight), retain_graph=True)
        for x, y in zip(ours, naive):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda h, w: fused_linear_logprobs(h, w, ids, temperature=temperature, chunk_size=5, return_entropy=True,
                                           scale=scale, softcap=softcap)[1], (h64, w64))


def test_fused_accepts_batched_shapes_and_returns_entropy():
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 5, 8, generator=gen)
    weight = torch.randn(20, 8, generator=gen)
    ids = torch.randint(0, 20, (2, 5), generator=gen)
    logps, entropy = fused_linear_logprobs(hidden, weight, ids, temperature=0.9, chunk_size=3,
                                           return_entropy=True)
    logits = hidden @ weight.t() / 0.9
    torch.testing.assert_close(logps, _naive(hidden, weight, ids, 0.9), **TOL)
    torch.testing.assert_close(entropy, entropy_from_logits(logits), **TOL)
    assert not entropy.requires_grad


def test_fused_only_computes_the_gradients_asked_for():
    hidden = torch.randn(6, 4, requires_grad=True)
    weight = torch.randn(10, 4)  # frozen head, as with LoRA
    ids = torch.randint(0, 10, (6,))
    fused_linear_logprobs(hidden, weight, ids, chunk_size=4).sum().backward()
    assert hidden.grad is not None and weight.grad is None
    reference = hidden.detach().clone().requires_grad_(True)
    _naive(reference, weight, ids).sum().backward()
    torch.testing.assert_close(hidden.grad, reference.grad, **TOL)


def test_fused_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="weight must be"):
        fused_linear_logprobs(torch.randn(3, 4), torch.randn(10, 5), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        fused_linear_logprobs(torch.randn(3, 4), torch.randn(10, 4), torch.zeros(3, dtype=torch.long),
                              temperature=0.0)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), hidden_size=st.integers(1, 16), vocab=st.integers(2, 60),
       chunk=st.integers(1, 50), temperature=st.floats(0.3, 2.0), seed=st.integers(0, 1000))
def test_fused_equals_naive_for_random_shapes(rows, hidden_size, vocab, chunk, temperature, seed):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, hidden_size, generator=gen)
    weight = torch.randn(vocab, hidden_size, generator=gen)
    ids = torch.randint(0, vocab, (rows,), generator=gen)
    upstream = torch.randn(rows, generator=gen)
    fused = _values_and_grads(
        lambda h, w: fused_linear_logprobs(h, w, ids, temperature=temperature, chunk_size=chunk),
        hidden, weight, upstream)
    naive = _values_and_grads(lambda h, w: _naive(h, w, ids, temperature), hidden, weight, upstream)
    for ours, reference in zip(fused, naive):
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------- model_logprobs


def _tiny_llama(tie: bool = False, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                         max_position_embeddings=64, tie_word_embeddings=tie)
    return LlamaForCausalLM(config).eval()


def _batch():
    gen = torch.Generator().manual_seed(4)
    input_ids = torch.randint(0, 100, (3, 12), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0   # left-padded prompt
    attention_mask[1, -4:] = 0  # completion shorter than the longest one
    return input_ids, attention_mask


def _param_grads(model, fn):
    model.zero_grad()
    fn().sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("tie", [False, True])
def test_model_logprobs_matches_the_full_forward(tie):
    model = _tiny_llama(tie)
    input_ids, attention_mask = _batch()
    keep = 5
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    # Independent reference: position t-1 scores token t, logits / temperature.
    expected = torch.log_softmax(logits[:, -keep - 1 : -1] / 0.8, -1).gather(
        -1, input_ids[:, -keep:, None]).squeeze(-1)
    expected = expected.masked_fill(attention_mask[:, -keep:] == 0, 0.0)
    fused = model_logprobs(model, input_ids, attention_mask, keep, temperature=0.8, chunk_size=4)
    torch.testing.assert_close(fused.detach(), expected, **TOL)
    assert (fused[1, -4:] == 0).all()

    grads_fused = _param_grads(model, lambda: model_logprobs(model, input_ids, attention_mask, keep,
                                                               temperature=0.8, chunk_size=4))
    grads_naive = _param_grads(model, lambda: model_logprobs(model, input_ids, attention_mask, keep,
                                                               temperature=0.8, fused=False))
    assert grads_fused.keys() == grads_naive.keys()
    for name in grads_naive:
        torch.testing.assert_close(grads_fused[name], grads_naive[name], **TOL)


def test_model_logprobs_entropy_matches_naive():
    model = _tiny_llama()
    input_ids, attention_mask = _batch()
    with torch.no_grad():
        fused = model_logprobs(model, input_ids, attention_mask, 6, return_entropy=True)
        naive = model_logprobs(model, input_ids, attention_mask, 6, fused=False, return_entropy=True)
    for ours, reference in zip(fused, naive):
        torch.testing.assert_close(ours, reference, **TOL)


def test_model_logprobs_with_lora_and_with_a_head_bias():
    peft = pytest.importorskip("peft")
    model = _tiny_llama()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    input_ids, attention_mask = _batch()
    grads_fused = _param_grads(lora, lambda: model_logprobs(lora, input_ids, attention_mask, 5))
    grads_naive = _param_grads(lora, lambda: model_logprobs(lora, input_ids, attention_mask, 5, fused=False))
    assert any("lora_" in name for name in grads_fused)
    for name in grads_naive:
        torch.testing.assert_close(grads_fused[name], grads_naive[name], **TOL)

    biased = _tiny_llama(seed=1)
    biased.lm_head = torch.nn.Linear(64, 100, bias=True)  # not fusable: falls back
    with torch.no_grad():
        logits = biased(input_ids=input_ids, attention_mask=attention_mask).logits
        expected = torch.log_softmax(logits[:, -6:-1], -1).gather(-1, input_ids[:, -5:, None]).squeeze(-1)
        got = model_logprobs(biased, input_ids, attention_mask, 5)
    torch.testing.assert_close(got, expected.masked_fill(attention_mask[:, -5:] == 0, 0.0), **TOL)


def test_model_logprobs_matches_trl_fused_head():
    """TRL 1.16 scores completions with its own fused head; same convention, same numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trl_utils = pytest.importorskip("trl.trainer.utils")
    model = _tiny_llama()
    trl_model = copy.deepcopy(model)
    trl_utils.add_fused_lm_head(trl_model, temperature=0.7)
    input_ids, attention_mask = _batch()
    keep = 5
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-keep] = -100
    with torch.no_grad():
        expected = trl_model(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                             fused_lm_head=True).log_probs[:, -keep:]
        ours = model_logprobs(model, input_ids, attention_mask, keep, temperature=0.7)
    torch.testing.assert_close(ours, expected, **TOL)


def test_model_logprobs_rejects_bad_logits_to_keep():
    model = _tiny_llama()
    input_ids, attention_mask = _batch()
    with pytest.raises(ValueError, match="logits_to_keep"):
        model_logprobs(model, input_ids, attention_mask, 12)
