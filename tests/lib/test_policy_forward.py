"""completion_forward with a shared prompt pass equals the single pass and the plain model.

Every check compares the default path (each distinct prompt run once, its KV cache shared)
with the forced single pass over prompt + completion, and with the model's own forward
(``model(...).logits`` and ``.hidden_states[-1]``, log-probs by ``log_softmax`` +
gather), which shares no code with ``completion_forward``: log-probs, values and the
gradients of every trainable parameter. Batches are
prompt-major like the trainer's micro-batches: repeated prompts, partial groups at both
ends, left-padded prompts of different lengths, completions padded after their eos.
An embedding hook counts the tokens the body saw, so each test also knows which path ran.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import course_lib.policy as policy
from course_lib.models import load_policy
from course_lib.models import unwrap_peft as base_model
from course_lib.policy import completion_forward
from course_lib.algos.ppo import make_value_head

# float32. Shared vs single pass: measured up to 3e-6 (log-probs) and 3e-6 of the largest
# gradient. Against the plain forward the fused log-softmax's own rounding adds ~8e-6.
TOL = 1e-5
REFERENCE_TOL = 3e-5
PAD = 0
TEMPERATURE = 0.7


def _random_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, pad_token_id=PAD)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def embedded_tiny():
    model, _ = load_policy("tiny")
    return model


def _batch(group_sizes, prompt_lengths, completion_lengths, width_t, vocab=100, seed=1):
    """A prompt-major micro-batch: ``group_sizes[g]`` rows hold prompt g (left-padded)."""
    generator = torch.Generator().manual_seed(seed)
    P, B = max(prompt_lengths), sum(group_sizes)
    prompt_ids = torch.full((B, P), PAD, dtype=torch.long)
    prompt_mask = torch.zeros(B, P, dtype=torch.long)
    row = 0
    for size, length in zip(group_sizes, prompt_lengths):
        tokens = torch.randint(4, vocab, (length,), generator=generator)
        for _ in range(size):
            prompt_ids[row, P - length:], prompt_mask[row, P - length:] = tokens, 1
            row += 1
    completion_ids = torch.randint(4, vocab, (B, width_t), generator=generator)
    completion_mask = torch.zeros(B, width_t, dtype=torch.long)
    for row, length in enumerate(completion_lengths):
        completion_mask[row, :length] = 1
        completion_ids[row, length:] = PAD  # padding after the eos
    return prompt_ids, prompt_mask, completion_ids, completion_mask


# Partial groups at both ends (the tail of one prompt's group, the head of the next), prompt
# lengths that need left padding, one row whose completion is a single token.
LAYOUTS = {
    "partial_groups": ([2, 4, 3], [9, 4, 6], [5, 1, 3, 5, 5, 2, 4, 5, 5], 5),
    "one_repeat_among_singletons": ([1, 2, 1], [3, 7, 5], [4, 4, 2, 1], 4),
    "single_completion_token": ([3, 3], [6, 8], [1, 1, 1, 0, 1, 1], 1),
}


def _reference(model, value_head, batch):
    """Log-probs, values, entropies ``(B, T)`` from the model's own logits over prompt + completion."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=mask,
                position_ids=positions, output_hidden_states=True, use_cache=False)
    log_p = torch.log_softmax(out.logits[:, P - 1: P - 1 + T].float() / TEMPERATURE, dim=-1)
    logps = log_p.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropies = -(log_p.exp() * log_p).sum(-1)
    values = value_head(out.hidden_states[-1][:, P - 1: P - 1 + T]) if value_head is not None else None
    return logps, values, entropies


def _forward_and_grads(compute, model, value_head, batch):
    """Outputs and every trainable parameter's gradient of a loss mixing log-probs and values."""
    completion_mask = batch[3].float()
    weights = torch.linspace(-1.0, 1.0, completion_mask.numel()).view_as(completion_mask)
    parameters = [p for p in model.parameters() if p.requires_grad]
    if value_head is not None:
        parameters += list(value_head.parameters())
    for parameter in parameters:
        parameter.grad = None
    logps, values, entropies = compute()
    loss = (logps * weights * completion_mask).sum()
    if values is not None:
        loss = loss + (values * weights.flip(0) * completion_mask).sum()
    loss.backward()
    return (logps.detach(), None if values is None else values.detach(), entropies,
            [p.grad.clone() for p in parameters])


class TokenCounter:
    """Shapes of the token batches the decoder body embeds (one entry per body pass)."""

    def __init__(self, model):
        self.shapes = []
        embeddings = base_model(model).get_input_embeddings()
        self._handle = embeddings.register_forward_hook(lambda module, args, out: self.shapes.append(
            tuple(args[0].shape)))

    def take(self):
        shapes, self.shapes = self.shapes, []
        return shapes

    def close(self):
        self._handle.remove()


def _run(model, batch, *, share: bool, value_head=None, with_entropy=False):
    """completion_forward's outputs and gradients, and the token batches its body passes saw."""
    counter = TokenCounter(model)
    try:
        out = _forward_and_grads(lambda: completion_forward(model, *batch, temperature=TEMPERATURE,
                                                            value_head=value_head, with_entropy=with_entropy,
                                                            share_prompt=share),
                                 model, value_head, batch)
    finally:
        counter.close()
    return out, counter.take()


def _assert_close(ours, expected, valid, tol, what):
    """Outputs at the valid tokens: absolute ``tol``. Gradients: ``tol`` times the tensor's largest gradient."""
    for name, mine, theirs in zip(("log-probs", "values", "entropies"), ours[:3], expected[:3]):
        if mine is not None:
            assert (mine - theirs.detach())[valid].abs().max() <= tol, f"{name} differ ({what})"
    assert len(ours[3]) == len(expected[3]) > 0
    for index, (grad, expected_grad) in enumerate(zip(ours[3], expected[3])):
        error = (grad - expected_grad).abs().max()
        assert error <= tol * expected_grad.abs().max(), f"gradient of parameter {index} differs by {error} ({what})"


def _assert_matches_reference(model, batch, *, value_head=None, with_entropy=False, expect_shared=True):
    """The default path equals the forced single pass (to TOL) and the plain forward (to REFERENCE_TOL)."""
    shared, shared_passes = _run(model, batch, share=True, value_head=value_head, with_entropy=with_entropy)
    single, single_passes = _run(model, batch, share=False, value_head=value_head, with_entropy=with_entropy)
    reference = _forward_and_grads(lambda: _reference(model, value_head, batch), model, value_head, batch)
    B, P, T = batch[0].shape[0], batch[0].shape[1], batch[2].shape[1]
    assert single_passes == [(B, P + T)]
    if expect_shared:
        unique = len({(tuple(i.tolist()), tuple(m.tolist())) for i, m in zip(batch[0], batch[1])})
        assert shared_passes == [(unique, P)] + ([(B, T - 1)] if T > 1 else []), "prompts were not shared"
    else:
        assert shared_passes == single_passes, "expected the single-pass fallback"
    valid = batch[3].bool()
    _assert_close(shared, single, valid, TOL, "shared prompt vs single pass")
    _assert_close(shared, reference, valid, REFERENCE_TOL, "shared prompt vs the model's logits")
    return shared


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_shared_prompt_pass_matches_one_plain_forward(layout):
    model = _random_llama()
    value_head = make_value_head(model, separate=False)
    torch.nn.init.normal_(value_head.summary.weight)  # the zero init would hide value-path errors
    groups, prompt_lengths, completion_lengths, width = LAYOUTS[layout]
    _assert_matches_reference(model, _batch(groups, prompt_lengths, completion_lengths, width),
                              value_head=value_head)


def test_shared_prompt_pass_with_entropy_and_logits_path():
    model = _random_llama(seed=2)
    _assert_matches_reference(model, _batch(*LAYOUTS["partial_groups"]), with_entropy=True)


def test_embedded_tiny_model_gives_the_same_log_probs_values_and_gradients(embedded_tiny):
    value_head = make_value_head(embedded_tiny, separate=False)
    torch.nn.init.normal_(value_head.summary.weight, std=0.1)
    batch = _batch([3, 8, 5], [14, 9, 11], [6, 6, 2, 6, 1, 6, 6, 3, 6, 6, 6, 4, 6, 6, 5, 6], 6)
    _assert_matches_reference(embedded_tiny, batch, value_head=value_head)


def test_distinct_prompts_use_the_single_pass():
    model = _random_llama(seed=4)
    _assert_matches_reference(model, _batch([1, 1, 1], [5, 3, 6], [3, 2, 3], 3), expect_shared=False)


def test_lora_model_and_its_disabled_adapter_reference():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_random_llama(seed=5), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # zero at init: the adapters would change nothing and get no lora_A gradient
            torch.nn.init.normal_(parameter, std=0.1)
    batch = _batch(*LAYOUTS["partial_groups"])
    _assert_matches_reference(model, batch)
    with torch.no_grad():
        adapted, _, _ = completion_forward(model, *batch, temperature=TEMPERATURE)
        with model.disable_adapter():
            counter = TokenCounter(model)
            without_adapter, _, _ = completion_forward(model, *batch, temperature=TEMPERATURE)
            assert len(counter.take()) == 2  # shared prompt pass under no_grad too
            counter.close()
            reference, _, _ = _reference(model, None, batch)
    valid = batch[3].bool()
    assert not without_adapter.requires_grad
    assert (without_adapter - reference)[valid].abs().max() <= REFERENCE_TOL
    assert (adapted - without_adapter)[valid].abs().max() > 1e-3  # the adapters really were off


def test_gradient_checkpointing_in_training_falls_back_to_the_single_pass():
    model = _random_llama(seed=6)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # the checkpointed layers drop any KV cache in training mode
    batch = _batch(*LAYOUTS["partial_groups"])
    _assert_matches_reference(model, batch, expect_shared=False)
    model.eval()  # no checkpointing outside training: the cache works again
    _assert_matches_reference(model, batch)


def test_separate_value_model_keeps_its_own_full_pass():
    model = _random_llama(seed=7)
    value_head = make_value_head(model, separate=True)
    torch.nn.init.normal_(value_head.summary.weight)
    with torch.no_grad():
        for parameter in value_head.backbone.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))  # a critic trunk unlike the policy's
    batch = _batch(*LAYOUTS["partial_groups"])
    _, values, _ = completion_forward(model, *batch, temperature=TEMPERATURE, value_head=value_head)
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    hidden = value_head.backbone(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=mask,
                                 position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state
    expected = value_head(hidden[:, P - 1: P - 1 + T])
    valid = completion_mask.bool()
    assert (values - expected)[valid].abs().max() <= TOL


def test_unique_prompt_rows_ignores_ids_under_the_padding():
    prompt_ids = torch.tensor([[9, 5, 6], [7, 5, 6], [0, 5, 6], [5, 6, 6], [9, 5, 6]])
    prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, inverse = policy._unique_prompt_rows(prompt_ids, prompt_mask)
    # rows 0, 1, 4 hold the prompt "5 6" (different pad ids); row 2 is "0 5 6", row 3 "5 6 6".
    assert sorted(first.tolist()) == [0, 2, 3]
    assert first[inverse].tolist() == [0, 0, 2, 3, 0]


# --------------------------------------------------------------------------------------
# The model's own head: soft-capped (Gemma-2), scaled (Cohere), or plain (Llama)
# --------------------------------------------------------------------------------------
def _random_gemma2(seed: int = 0):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(seed)
    config = Gemma2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=100, max_position_embeddings=64,
                          pad_token_id=PAD, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                          sliding_window=32, query_pre_attn_scalar=16)
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad():  # large logits, so that the soft cap changes them visibly
        model.lm_head.weight.mul_(40.0)
    return model


@pytest.mark.parametrize("make_model", [_random_gemma2, _random_llama], ids=["gemma2", "llama"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "full_logits"])
def test_log_probs_and_entropies_use_the_models_own_head(make_model, fused):
    """Before the one-head rule, a Gemma-2's soft cap was skipped: log-probs off by tens of nats."""
    model = make_model()
    batch = _batch(*LAYOUTS["partial_groups"])
    ref_logps, _, ref_entropies = _reference(model, None, batch)
    with torch.no_grad():
        logps, _, entropies = completion_forward(model, *batch, temperature=TEMPERATURE, fused=fused,
                                                 with_entropy=True)
    valid = batch[3].bool()
    assert (logps - ref_logps)[valid].abs().max() < REFERENCE_TOL
    assert (entropies - ref_entropies)[valid].abs().max() < REFERENCE_TOL


def test_the_gemma2_soft_cap_matters_here():
    """The check above is not vacuous: without the cap the log-probs differ by nats."""
    from course_lib.ops.logprobs import LMHead, head_logprobs, lm_head

    model = _random_gemma2()
    head = lm_head(model)
    assert head.softcap == 30.0
    hidden = torch.randn(7, 64)
    ids = torch.randint(0, 100, (7,))
    capped, _ = head_logprobs(head, hidden, ids)
    uncapped, _ = head_logprobs(LMHead(weight=head.weight), hidden, ids)
    assert (capped - uncapped).abs().max() > 1.0
