"""Checks for lesson 10 (fast inference and memory): chunked selective log-softmax, the
memory arithmetic of logits and KV cache, the truncated importance-sampling weight, and the
four correction modes of TRL 1.16 (`course_lib.ops.importance.importance_sampling_ratio`).

Expected values: `course_lib.ops.logprobs.selective_log_softmax`, `course_lib.ops.kl.
truncated_is_ratio`, the memory figures of lesson 10's source notes (78.3 GB of logits, 2.5 GB of KV cache per
sequence, 20 GB at batch 8, with GB = 2^30 bytes and 20K = 20,480 tokens) and hand-worked
cases. The chunked exercise is also checked for what it is for: while it runs, a
`TorchDispatchMode` records every tensor the computation's operators return, and the
largest must be about one `(chunk_size, V)` block, not the whole `(B, T, V)` logits.
(Scratch memory inside a single operator, such as `logsumexp`'s, is not visible there.)
"""

from __future__ import annotations

import math

import torch

from ..ops.importance import IS_MODES, importance_sampling_ratio, truncated_is_ratio
from ..ops.logprobs import selective_log_softmax
from ..feedback import Hint, assert_close

GIB = 2**30


# Operators that normalise over the vocabulary: their input is what one "block" holds.
_NORMALISERS = ("aten.logsumexp", "aten._log_softmax", "aten._softmax", "aten.log_softmax", "aten.softmax")


class _AllocationRecorder:
    """Largest tensor storage created while active (views of existing tensors excluded), and
    the largest input (shape) given to a logsumexp / log_softmax / softmax operator."""

    def __init__(self, existing: list[torch.Tensor]):
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.largest = 0
        self.widest_input: tuple[int, ...] = ()
        self.mode = None

    def __enter__(self):
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
            from torch.utils._pytree import tree_flatten
        except ImportError:  # an unusual PyTorch build: skip the memory part of the check
            return self
        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if str(func.overloadpacket).startswith(_NORMALISERS) and args and isinstance(args[0], torch.Tensor):
                    if args[0].numel() > math.prod(recorder.widest_input or (0,)):
                        recorder.widest_input = tuple(args[0].shape)
                out = func(*args, **(kwargs or {}))
                for tensor in tree_flatten(out)[0]:
                    if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                        storage = tensor.untyped_storage()
                        if storage.data_ptr() not in recorder.existing:
                            recorder.largest = max(recorder.largest, storage.nbytes())
                return out

        self.mode = _Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)
        return False


def _logprob_mistakes(logits: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    picked = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return {
        "these are the raw logits of the chosen tokens: subtract the row's logsumexp, "
        "log p = logit - logsumexp(logits).": picked,
        "these are probabilities, not log-probabilities: take the log (or use logit - logsumexp).":
            torch.softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1),
        "the sign is flipped: log p = logit - logsumexp(logits), a number <= 0.":
            torch.logsumexp(logits, dim=-1) - picked,
    }


def check_chunked_selective_log_softmax(fn) -> None:
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    got = fn(logits, torch.tensor([[1, 0]]), 1)
    if not isinstance(got, torch.Tensor) or got.shape != (1, 2):
        raise Hint(f"return one log-prob per token, shape (B, T) = (1, 2); got {got!r}.")
    assert_close(got, [[-math.log(2.0), -math.log(1 + math.exp(-2.0))]], name="the docstring's example",
                 hints=_logprob_mistakes(logits, torch.tensor([[1, 0]])))

    generator = torch.Generator().manual_seed(10)
    batch, tokens, vocab = 4, 16, 1000
    logits = torch.randn(batch, tokens, vocab, generator=generator) * 3
    ids = torch.randint(0, vocab, (batch, tokens), generator=generator)
    expected = selective_log_softmax(logits, ids)
    hints = _logprob_mistakes(logits, ids)
    for chunk_size in (1, 7, 8, 64, 1000):
        with _AllocationRecorder([logits, ids]) as recorder:
            got = fn(logits, ids, chunk_size)
        assert_close(got, expected, name=f"log-probs with chunk_size={chunk_size}", atol=1e-4, hints=hints)
        full_bytes = logits.numel() * logits.element_size()
        block_bytes = min(chunk_size, batch * tokens) * vocab * logits.element_size()
        widest = recorder.widest_input
        rows = math.prod(widest[:-1]) if widest else 0
        if recorder.mode is not None and rows > chunk_size:
            if len(widest) == 3 and widest[0] <= chunk_size:
                raise Hint(f"with chunk_size={chunk_size}, logsumexp / log_softmax received a block of shape "
                           f"{widest}: you chunked over the batch axis, so each block holds chunk_size whole "
                           f"sequences of T={tokens} rows ({rows} rows of V). A row is one token position: "
                           "flatten to logits.reshape(-1, V) (B*T rows) and take chunk_size rows at a time.")
            raise Hint(f"with chunk_size={chunk_size}, logsumexp / log_softmax received {rows} rows at once "
                       f"(shape {widest}); each block must hold at most chunk_size rows of V values: work on "
                       "logits.reshape(-1, V)[start:start + chunk_size].")
        if recorder.mode is not None and chunk_size < batch * tokens and recorder.largest > 2 * block_bytes:
            raise Hint(f"with chunk_size={chunk_size}, a temporary of {recorder.largest / 2**10:.0f} KiB was created; "
                       f"one (chunk_size, V) block is {block_bytes / 2**10:.0f} KiB and the whole logits "
                       f"{full_bytes / 2**10:.0f} KiB. Did you call log_softmax (or softmax) on the whole tensor, "
                       "or copy it? Work on logits.reshape(-1, V)[start:start + chunk_size] only.")


def check_logits_memory_bytes(fn) -> None:
    got = fn(8, 20 * 1024, 128_256)
    if not isinstance(got, int) or isinstance(got, bool):
        raise Hint(f"return a whole number of bytes (an int), got {type(got).__name__} {got!r}.")
    gib = got / GIB
    mistakes = {39.140625: "you counted one logits tensor; multiply by copies (2 by default: the loss holds "
                            "two logits tensors at once).",
                156.5625: "you used 4 bytes per value (fp32); the default is 2 (bf16 / fp16): use bytes_per_value.",
                84.05385216: "that is 84.05 in units of 10^9 bytes; return bytes, not GB."}
    for wrong, message in mistakes.items():
        if math.isclose(gib, wrong, rel_tol=1e-9) or math.isclose(got, wrong, rel_tol=1e-9):
            raise Hint(f"logits_memory_bytes(8, 20480, 128256) = {gib:.2f} GiB: {message}")
    if got == 2 * 2 * 8 * 20_000 * 128_256:
        raise Hint("logits_memory_bytes(8, 20480, 128256) gave the bytes of a 20,000-token context: 20K here is "
                   "20 x 1024 = 20,480 tokens, and seq_len already holds it. Use the arguments as given.")
    if got != 84_053_852_160:
        raise Hint(f"logits_memory_bytes(8, 20480, 128256): expected 84,053,852,160 bytes (78.3 GiB), got {got:,}.")
    cases = [((1, 1, 1), {}, 4), ((3, 5, 7), {"bytes_per_value": 4, "copies": 1}, 420),
             ((2, 100, 50_000), {"copies": 3}, 60_000_000)]
    for args, kwargs, expected in cases:
        got = fn(*args, **kwargs)
        if got != expected:
            raise Hint(f"logits_memory_bytes{args} with {kwargs}: expected {expected:,}, got {got!r}. "
                       "Use every argument: copies x bytes_per_value x batch x seq_len x vocab.")


def check_kv_cache_bytes(fn) -> None:
    got = fn(32, 1024, 20 * 1024)
    if not isinstance(got, int) or isinstance(got, bool):
        raise Hint(f"return a whole number of bytes (an int), got {type(got).__name__} {got!r}.")
    if got == 1_342_177_280:
        raise Hint("1.25 GiB for Llama 3.1 8B at 20K: a factor 2 is missing; the cache holds keys AND values "
                   "(and each value takes bytes_per_value = 2 bytes).")
    if got == 4 * 2_684_354_560:
        raise Hint("10 GiB for Llama 3.1 8B at 20K: 4 times too much. kv_dim is the width of the keys, 8 KV heads x "
                   "128 = 1024 (grouped-query attention: 32 query heads share 8 KV heads), not 32 x 128 = 4096. "
                   "Use the kv_dim argument as given.")
    if got == 2 * 2 * 32 * 20_000 * 1024:
        raise Hint("kv_cache_bytes(32, 1024, 20480) gave the bytes of a 20,000-token context: 20K here is "
                   "20 x 1024 = 20,480 tokens, and context already holds it. Use the arguments as given.")
    if got != 2_684_354_560:
        raise Hint(f"kv_cache_bytes(32, 1024, 20480): expected 2,684,354,560 bytes (2.5 GiB), got {got:,}.")
    batched = fn(32, 1024, 20 * 1024, batch=8)
    if batched != 8 * 2_684_354_560:
        raise Hint(f"a vLLM batch of 8 sequences needs 8 caches (20 GiB); got {batched / GIB:.2f} GiB. "
                   "Multiply by batch.")
    if fn(2, 64, 10, batch=3, bytes_per_value=4) != 2 * 4 * 2 * 10 * 64 * 3:
        raise Hint("kv_cache_bytes(2, 64, 10, batch=3, bytes_per_value=4) is wrong: use every argument, "
                   "2 x bytes_per_value x layers x context x kv_dim x batch.")


def check_truncated_is_weight(fn) -> None:
    old = torch.tensor([[0.0, -1.0]])
    sampling = torch.tensor([[-1.0, 0.0]])
    got = fn(old, sampling, torch.ones(1, 2), 2.0)
    assert_close(got, [[2.0, math.exp(-1.0)]], name="the docstring's example",
                 hints={"the ratio is inverted: the trainer's probability over the sampler's, exp(old - sampling).":
                        [[math.exp(-1.0), 2.0]],
                        "the weight was not truncated: min(ratio, cap).": [[math.e, math.exp(-1.0)]],
                        "the weight was also clipped from below; truncated IS only caps it from above.":
                        [[2.0, 0.5]],
                        "the second weight is above 1 although the trainer finds that token LESS likely than the "
                        "sampler did: the sign of the log-ratio matters, exp(old - sampling) without abs().":
                        [[2.0, 2.0]]})

    generator = torch.Generator().manual_seed(11)
    old = -torch.rand(5, 7, generator=generator) * 3
    sampling = old + torch.randn(5, 7, generator=generator) * 0.6
    mask = (torch.arange(7).unsqueeze(0) < torch.tensor([7, 3, 5, 1, 6]).unsqueeze(1)).float()
    sampling = torch.where(mask.bool(), sampling, torch.full_like(sampling, -20.0))  # padding holds garbage
    for cap in (2.0, 1.5, 3.0):
        expected = truncated_is_ratio(old, sampling, mask, cap=cap)
        ratio = torch.exp(old - sampling)
        got = fn(old.clone(), sampling.clone(), mask.clone(), cap)
        assert_close(got, expected, name=f"weights of a padded batch (cap={cap})", atol=1e-6, hints={
            "masked positions must hold weight 1 (they are dropped by the mask later; 1 keeps them harmless).":
                torch.where(mask.bool(), torch.clamp(ratio, max=cap), torch.zeros_like(ratio)),
            "padded positions were not masked: set their log-ratio to 0 (weight 1).": torch.clamp(ratio, max=cap),
            "the ratio is inverted: exp(old - sampling).": torch.where(mask.bool(), torch.clamp(1 / ratio, max=cap),
                                                                       torch.ones_like(ratio)),
        })
    needs_grad = old.clone().requires_grad_(True)
    got = fn(needs_grad, sampling, mask, 2.0)
    if got.requires_grad:
        raise Hint("the weight carries a gradient: it is a constant of the loss, detach it (or compute it under "
                   "torch.no_grad()).")


def _bound(weight: torch.Tensor, mode: str, clip_min: float | None, clip_max: float | None,
           fill: float = 0.0) -> torch.Tensor:
    """Truncate or mask `weight` to [clip_min, clip_max] as `mode` says (for the hints); a mask
    mode writes `fill` outside the range (0 is right; 1 is a typical mistake)."""
    if mode.endswith("truncate"):
        return torch.clamp(weight, min=clip_min, max=clip_max)
    outside = (weight < (clip_min or 0.0)) | (weight > (math.inf if clip_max is None else clip_max))
    return weight.masked_fill(outside, fill)


def check_correction_weight(fn) -> None:
    old, sampling, ones = torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, 0.0]]), torch.ones(1, 2)
    assert_close(fn(old, sampling, ones, "token_truncate", None, 2.0), [[2.0, math.exp(-1.0)]],
                 name="token_truncate, clip_max=2 (the docstring's example)",
                 hints={"the second weight is above 1 although the trainer finds that token LESS likely than the "
                        "sampler did: the sign of the log-ratio matters, exp(old - sampling) without abs().":
                        [[2.0, 2.0]],
                        "the ratio is inverted: the trainer's probability over the sampler's, exp(old - sampling).":
                        [[math.exp(-1.0), 2.0]]})
    assert_close(fn(old, sampling, ones, "token_mask", None, 2.0), [[0.0, math.exp(-1.0)]],
                 name="token_mask, clip_max=2", hints={"a *_mask mode sets weights outside the range to 0; you "
                                                      "clamped them (that is *_truncate).": [[2.0, math.exp(-1.0)]],
                                                      "a *_mask mode sets weights outside the range to 0, not 1: the "
                                                      "token drops out of the loss (a 1 would keep it at full "
                                                      "weight, as if uncorrected).": [[1.0, math.exp(-1.0)]]})
    got = fn(old, sampling, ones, "sequence_mask", None, 3.0)
    assert_close(got, [[1.0]], name="sequence_mask of two cancelling tokens", hints={
        "sequence modes give one weight per completion, shape (B, 1): sum the log-ratios, then exponentiate.":
            [[math.e, math.exp(-1.0)]]})

    generator = torch.Generator().manual_seed(5)
    old = -torch.rand(6, 8, generator=generator) * 3
    sampling = old + torch.randn(6, 8, generator=generator) * 0.4
    mask = (torch.arange(8).unsqueeze(0) < torch.tensor([8, 3, 5, 0, 6, 2]).unsqueeze(1)).float()
    sampling = torch.where(mask.bool(), sampling, torch.full_like(sampling, -30.0))  # padding holds garbage
    for mode in IS_MODES:
        for clip_min, clip_max in ((None, 3.0), (0.5, 1.5)):
            expected = importance_sampling_ratio(old, sampling, mask, mode=mode, clip_min=clip_min, clip_max=clip_max)
            log_ratio = (old - sampling) * mask
            hints = {}
            if mode.startswith("sequence"):
                mean = torch.exp(log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1))
                hints["the sequence weight is the product of the token ratios, exp(sum d_t); you used the mean of "
                      "the log-ratios (that is GSPO's ratio, a different quantity)."] = _bound(mean, mode, clip_min,
                                                                                              clip_max)
            else:
                hints["masked positions must hold weight 1: zero their log-ratio before the exponential."] = _bound(
                    torch.exp(old - sampling), mode, clip_min, clip_max)
            if mode.endswith("mask"):
                weight = torch.exp(log_ratio.sum(-1, keepdim=True)) if mode.startswith("sequence") \
                    else torch.exp(log_ratio)
                hints[f"{mode} sets weights outside [clip_min, clip_max] to 0, not 1: the token or completion drops "
                      "out of the loss (a 1 would keep it at full weight, as if uncorrected)."] = _bound(
                    weight, mode, clip_min, clip_max, fill=1.0)
            if clip_min is not None:
                token_or_sequence = torch.exp(log_ratio.sum(-1, keepdim=True)) if mode.startswith("sequence") \
                    else torch.exp(log_ratio)
                hints[f"clip_min={clip_min} was ignored: {mode} bounds the weight from below too "
                      f"({'clamp' if mode.endswith('truncate') else 'zero'} weights under clip_min)."] = _bound(
                    token_or_sequence, mode, None, clip_max)
            assert_close(fn(old, sampling, mask, mode, clip_min, clip_max), expected, atol=1e-6, hints=hints,
                         name=f"{mode}, clip_min={clip_min}, clip_max={clip_max}, padded batch")
    needs_grad = old.clone().requires_grad_(True)
    if fn(needs_grad, sampling, mask, "token_truncate", None, 2.0).requires_grad:
        raise Hint("the weight carries a gradient: it is a constant of the loss, detach it.")


def check_sampling_version(fn) -> None:
    """Against a search over every version the worker could hold: the oldest sent one within the bound."""
    for bound, every in ((0, 1), (1, 1), (2, 1), (1, 2), (3, 2), (5, 3)):
        for step in range(13):
            sent = [v for v in range(step + 1) if v % every == 0]
            expected = min(v for v in sent if v >= step - bound)
            got = fn(step, bound, every)
            if got == expected:
                continue
            if isinstance(got, int) and got < 0:
                raise Hint(f"step {step}, max_staleness={bound}, weight_sync_steps={every}: version {got} does not "
                           f"exist; the first weights are those of step 0. Clamp at 0: max(0, s - max_staleness), "
                           f"then round up ({expected}).")
            if every == 1 and got == expected - 1:
                raise Hint(f"step {step}, max_staleness={bound}: version {got} is {step - got} steps old, one past the "
                           f"bound. The bound is inclusive: s - max_staleness <= v, so the oldest version is "
                           f"s - max_staleness = {expected}, not s - max_staleness - 1.")
            if got == max(0, step - bound) and got % every:
                raise Hint(f"step {step}, max_staleness={bound}, weight_sync_steps={every}: version {got} was never "
                           f"sent to the worker; round up to a multiple of weight_sync_steps ({expected}).")
            if got < expected:
                raise Hint(f"step {step}, max_staleness={bound}, weight_sync_steps={every}: version {got} is "
                           f"{step - got} steps stale, past the bound; round up, not down ({expected}).")
            raise Hint(f"step {step}, max_staleness={bound}, weight_sync_steps={every}: expected version {expected} "
                       f"(the oldest sent one within the bound), got {got}.")
