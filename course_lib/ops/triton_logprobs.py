"""LM head + log-softmax gather + entropy as Triton kernels: the `(N, V)` logits never exist.

For `N` token positions with final hidden states `hidden` `(N, H)`, the LM-head weight
`weight` `(V, H)` and the sampled tokens `targets` `(N,)`, this module returns, per
position, the log-probability of the target and the entropy of the next-token
distribution, both differentiable with respect to `hidden` and `weight`:

    x = hidden @ weight.T                                  (N, V), never stored
    a = x * logit_scale                                    Cohere-style head multiplier
    b = softcap * tanh(a / softcap)   if softcap else a    Gemma-2 final-logit soft-capping
    z = b / temperature                                    the sampler's temperature
    logprob_i = z[i, y_i] - logsumexp(z[i])
    entropy_i = -sum_j p_ij log p_ij,   p = softmax(z)

The order is the one the models and TRL use: transformers' Gemma-2 soft-caps the head's
output inside `forward` (`logits / cap`, `tanh`, `* cap`), Cohere multiplies the head's
output by `logit_scale` before returning it, and TRL divides the returned logits by the
temperature afterwards. (Granite divides by `logits_scaling`: pass its inverse.)
`course_lib.ops.logprobs.lm_head` reads these fields from a model config.

Forward (one kernel). Each program owns `BLOCK_N` rows and a range of the vocabulary. It
walks that range in `BLOCK_V`-wide tiles; each tile of logits is a `tl.dot` over `H`
accumulated in float32 in registers, transformed as above, and folded into three
running per-row statistics with the online log-sum-exp update (Milakov & Gimelshein
2018, "Online normalizer calculation for softmax"):

    m = running max,  s = sum_j exp(z_j - m),  u = sum_j exp(z_j - m) (z_j - m)

so that `logsumexp = m + log s` and `entropy = log s - u / s` (entropy = log Z - E_p[z]),
computed from shifted logits so that no large number is subtracted from another. When
there are too few row blocks to fill the GPU, the vocabulary is split across programs and
the per-split statistics are merged afterwards (a few `(splits, N)` tensors).

Backward. With upstream gradients `g` (of the log-probs) and `e` (of the entropies),

    dL/dz_ij = g_i [j = y_i] - p_ij (g_i + e_i (z_ij - E_p[z]_i))

(`d entropy / dz_j = -p_j (z_j - E_p[z])`), times `dz/dx = logit_scale / temperature`,
and by `1 - tanh^2(a / softcap)` more with a cap. A second kernel recomputes each logits tile on chip from
the saved `logsumexp` and `E_p[z]` (two floats per row), forms `dL/dx` there, and writes
it, in the input dtype, for one block of rows or columns at a time (`chunk_bytes`); the
two products `dL/dx @ weight` and `dL/dx.T @ hidden` then run in cuBLAS. The block runs
along the vocabulary when `N <= V` (the float32 accumulator is then `grad_hidden`,
`(N, H)`) and along the rows otherwise (accumulator `grad_weight`, `(V, H)`), so the
accumulator is the smaller of the two. The forward is the blockwise log-sum-exp of Cut
Cross-Entropy (Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language
Models") with the entropy added; the backward recomputes the logits like it but skips
its gradient filtering (the gradients are exact up to float rounding) and, as Liger
Kernel does (Hsu et al. 2024), leaves the two large products to cuBLAS.

Precision: products accumulate in float32 (`tl.dot` with `input_precision="ieee"` for
float32 inputs, so no TF32); statistics and outputs are float32 whatever the input dtype
(bfloat16 log-probs would make importance ratios `exp(logp - logp_old)` too coarse).

Runs on CUDA, or anywhere under Triton's interpreter (`TRITON_INTERPRET=1` set before
`triton` is first imported), which the tests use on CPU. `triton_available` says which.
"""

from __future__ import annotations

import math
import os

import torch

Tensor = torch.Tensor

try:  # Triton ships with CUDA builds of PyTorch; CPU builds may lack it.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    tl = None

# The interpreter is chosen when kernels are decorated, i.e. when this module is imported.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Memory for one block of `dL/dx` in the backward pass (bytes, in the input dtype).
DEFAULT_CHUNK_BYTES = 256 * 2**20

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_DTYPES = (*_HALF_DTYPES, torch.float32)


def triton_available(device: torch.device | str | None = None) -> bool:
    """Whether `triton_linear_logprobs` can run on `device` (default: CUDA if present).

    True when Triton imports and either the device is a CUDA device or the interpreter
    was switched on (`TRITON_INTERPRET=1` before this module was imported).
    """
    if triton is None:
        return False
    if _INTERPRET:
        return True
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def prefer_triton(device: torch.device | str) -> bool:
    """Whether callers should pick the Triton head on `device` by default: a CUDA device
    where Triton runs (`logprob_kernel="chunked"` compares with the PyTorch path). Never the
    interpreter: it is for tests."""
    return not _INTERPRET and torch.device(device).type == "cuda" and triton_available(device)


if triton is not None:

    @triton.jit
    def _tanh(x):
        # tanh from exp (portable across backends and the interpreter): odd, and formed
        # from exp(-2|x|) <= 1 so it never overflows.
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

    @triton.jit
    def _logits_tile(h_ptr, w_ptr, rows, cols, row_ok, col_ok, H, stride_h, stride_w,
                     in_mult, out_mult,
                     HAS_SOFTCAP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
                     BLOCK_H: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
        """Transformed logits z (BLOCK_N, BLOCK_V) in float32 and dz/dx for the tile."""
        acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
        h_rows = h_ptr + rows.to(tl.int64)[:, None] * stride_h  # 64-bit: N * H may pass 2^31
        w_rows = w_ptr + cols.to(tl.int64)[:, None] * stride_w
        for k0 in range(0, H, BLOCK_H):
            ks = k0 + tl.arange(0, BLOCK_H)
            k_ok = ks < H
            h = tl.load(h_rows + ks[None, :],
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_rows + ks[None, :],
                        mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            if UPCAST:  # the interpreter multiplies bfloat16 bit patterns; widen first
                h = h.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(h, tl.trans(w), acc, input_precision=PRECISION)
        if HAS_SOFTCAP:
            # in_mult = scale / cap, out_mult = cap / T:  z = cap * tanh(a / cap) / T
            t = _tanh(acc * in_mult)
            z = t * out_mult
            dz_dx = (1.0 - t * t) * (in_mult * out_mult)
        else:
            # in_mult = scale / T, out_mult unused
            z = acc * in_mult
            dz_dx = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32) + in_mult
        return z, dz_dx

    @triton.jit
    def _forward_kernel(h_ptr, w_ptr, y_ptr, max_ptr, sum_ptr, ent_ptr, tgt_ptr,
                        N, V, H, stride_h, stride_w, cols_per_split, in_mult, out_mult,
                        HAS_SOFTCAP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
                        BLOCK_H: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
        """Per (row block, vocabulary split): running max m, s = sum exp(z - m),
        u = sum exp(z - m)(z - m), and the target's logit if it lies in the split."""
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < N
        y = tl.load(y_ptr + rows, mask=row_ok, other=-1)
        m = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
        s = tl.zeros((BLOCK_N,), dtype=tl.float32)
        u = tl.zeros((BLOCK_N,), dtype=tl.float32)
        target = tl.zeros((BLOCK_N,), dtype=tl.float32)
        v_start = pid_s * cols_per_split
        v_stop = tl.minimum(v_start + cols_per_split, V)
        for v0 in range(v_start, v_stop, BLOCK_V):
            cols = v0 + tl.arange(0, BLOCK_V)
            col_ok = cols < v_stop
            z, _ = _logits_tile(h_ptr, w_ptr, rows, cols, row_ok, col_ok, H, stride_h, stride_w,
                                in_mult, out_mult, HAS_SOFTCAP, BLOCK_N, BLOCK_V, BLOCK_H,
                                UPCAST, PRECISION)
            z = tl.where(col_ok[None, :], z, float("-inf"))
            m_new = tl.maximum(m, tl.max(z, axis=1))
            alpha = tl.exp(m - m_new)  # 0 on the first tile (m = -inf)
            d = tl.where(col_ok[None, :], z - m_new[:, None], 0.0)  # masked columns: 0, not -inf
            p = tl.where(col_ok[None, :], tl.exp(d), 0.0)
            # u rebased to the new max: sum e^{z-m'}(z-m') = alpha (u + (m - m') s); s = 0 at first
            u = alpha * (u + tl.where(s > 0, m - m_new, 0.0) * s) + tl.sum(p * d, axis=1)
            s = alpha * s + tl.sum(p, axis=1)
            m = m_new
            target += tl.sum(tl.where(cols[None, :] == y[:, None], z, 0.0), axis=1)
        out = pid_s * N + rows
        tl.store(max_ptr + out, m, mask=row_ok)
        tl.store(sum_ptr + out, s, mask=row_ok)
        tl.store(ent_ptr + out, u, mask=row_ok)
        tl.store(tgt_ptr + out, target, mask=row_ok)

    @triton.jit
    def _grad_logits_kernel(h_ptr, w_ptr, y_ptr, lse_ptr, mean_ptr, g_ptr, e_ptr, out_ptr,
                            row0, num_rows, col0, num_cols, H, stride_h, stride_w, stride_out,
                            in_mult, out_mult,
                            HAS_SOFTCAP: tl.constexpr, HAS_ENTROPY_GRAD: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                            UPCAST: tl.constexpr, PRECISION: tl.constexpr):
        """dL/dx for rows [row0, row0+num_rows) x columns [col0, col0+num_cols), written
        to out[row - row0, col - col0] in out's dtype."""
        local_cols = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
        local_rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = local_rows < num_rows
        col_ok = local_cols < num_cols
        rows = row0 + local_rows
        cols = col0 + local_cols
        z, dz_dx = _logits_tile(h_ptr, w_ptr, rows, cols, row_ok, col_ok, H, stride_h, stride_w,
                                in_mult, out_mult, HAS_SOFTCAP, BLOCK_N, BLOCK_V, BLOCK_H,
                                UPCAST, PRECISION)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        g = tl.load(g_ptr + rows, mask=row_ok, other=0.0)
        y = tl.load(y_ptr + rows, mask=row_ok, other=-1)
        p = tl.exp(z - lse[:, None])
        if HAS_ENTROPY_GRAD:
            e = tl.load(e_ptr + rows, mask=row_ok, other=0.0)
            mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
            grad_z = -p * (g[:, None] + e[:, None] * (z - mean[:, None]))
        else:
            grad_z = -p * g[:, None]
        grad_z += tl.where(cols[None, :] == y[:, None], g[:, None], 0.0)
        grad_x = grad_z * dz_dx
        ptrs = out_ptr + local_rows.to(tl.int64)[:, None] * stride_out + local_cols[None, :]
        tl.store(ptrs, grad_x.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


# cuBLAS can write a float32 product of half-precision inputs (torch >= 2.8, CUDA only).
_MM_OUT_DTYPE = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 8)


def _add_product(acc: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """`acc += a @ b` for a float32 `acc`, without rounding `a @ b` to bfloat16 first:
    summing per-block products rounded to 8 mantissa bits would bias the gradient."""
    if a.dtype == torch.float32:
        return acc.addmm_(a, b)
    if _MM_OUT_DTYPE and acc.is_cuda:
        return torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    return acc.addmm_(a.float(), b.float())


def _launch_config(dtype: torch.dtype) -> dict:
    """Tile sizes and launch options. Small tiles under the interpreter (numpy is slow
    on big ones and they exercise the masking as well); on a GPU, 64 x 128 logits per
    program with 64-wide steps along H, in the range of common matmul configurations."""
    if _INTERPRET:
        return {"BLOCK_N": 16, "BLOCK_V": 32, "BLOCK_H": 16, "launch": {}}
    stages = 2 if dtype == torch.float32 else 3  # float32 tiles take twice the shared memory
    return {"BLOCK_N": 64, "BLOCK_V": 128, "BLOCK_H": 64, "launch": {"num_warps": 8, "num_stages": stages}}


def _kernel_flags(dtype: torch.dtype) -> dict:
    return {
        "UPCAST": _INTERPRET and dtype != torch.float32,
        "PRECISION": "ieee" if dtype == torch.float32 else "tf32",  # ignored for half inputs
    }


def _head_multipliers(temperature: float, softcap: float | None, logit_scale: float) -> tuple[float, float]:
    """(in_mult, out_mult) of the kernels: z = x * in_mult, or out_mult * tanh(x * in_mult)."""
    if softcap is None:
        return logit_scale / temperature, 1.0
    return logit_scale / softcap, softcap / temperature


def _vocab_splits(num_row_blocks: int, vocab: int, block_v: int, device: torch.device) -> int:
    """Vocabulary splits so that the forward launches about 4 programs per multiprocessor."""
    tiles = triton.cdiv(vocab, block_v)
    if device.type != "cuda":
        return min(2, tiles)  # the interpreter: exercise the merge of splits
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(tiles, triton.cdiv(4 * sms, num_row_blocks)))


def _forward_statistics(hidden, weight, targets, in_mult, out_mult, has_softcap, splits=None):
    """(target logit, logsumexp, entropy) per row, float32, from the forward kernel."""
    num_rows, width = hidden.shape
    vocab = weight.shape[0]
    cfg = _launch_config(hidden.dtype)
    row_blocks = triton.cdiv(num_rows, cfg["BLOCK_N"])
    splits = splits or _vocab_splits(row_blocks, vocab, cfg["BLOCK_V"], hidden.device)
    cols_per_split = triton.cdiv(triton.cdiv(vocab, splits), cfg["BLOCK_V"]) * cfg["BLOCK_V"]
    splits = triton.cdiv(vocab, cols_per_split)  # every split owns at least one column
    part = torch.empty((4, splits, num_rows), dtype=torch.float32, device=hidden.device)
    _forward_kernel[(row_blocks, splits)](
        hidden, weight, targets, part[0], part[1], part[2], part[3],
        num_rows, vocab, width, hidden.stride(0), weight.stride(0), cols_per_split,
        in_mult, out_mult, HAS_SOFTCAP=has_softcap, BLOCK_N=cfg["BLOCK_N"], BLOCK_V=cfg["BLOCK_V"],
        BLOCK_H=cfg["BLOCK_H"], **_kernel_flags(hidden.dtype), **cfg["launch"])
    m, s, u, target = part  # each (splits, N)
    # Merge the splits: rebase every split's sums to the global max M.
    big_m = m.amax(dim=0)
    rescale = torch.exp(m - big_m)
    total_s = (rescale * s).sum(0)
    total_u = (rescale * (u + (m - big_m) * s)).sum(0)
    logsumexp = big_m + total_s.log()
    entropy = total_s.log() - total_u / total_s
    return target.sum(0), logsumexp, entropy


def _grad_logits_block(out, hidden, weight, targets, lse, mean, g, e, row0, col0,
                       in_mult, out_mult, has_softcap):
    """Fill `out` (rows, cols) with dL/dx for the block starting at (row0, col0)."""
    num_rows, num_cols = out.shape
    cfg = _launch_config(hidden.dtype)
    grid = (triton.cdiv(num_cols, cfg["BLOCK_V"]), triton.cdiv(num_rows, cfg["BLOCK_N"]))
    _grad_logits_kernel[grid](
        hidden, weight, targets, lse, mean, g, e if e is not None else g, out,
        row0, num_rows, col0, num_cols, hidden.shape[1], hidden.stride(0), weight.stride(0),
        out.stride(0), in_mult, out_mult, HAS_SOFTCAP=has_softcap, HAS_ENTROPY_GRAD=e is not None,
        BLOCK_N=cfg["BLOCK_N"], BLOCK_V=cfg["BLOCK_V"], BLOCK_H=cfg["BLOCK_H"],
        **_kernel_flags(hidden.dtype), **cfg["launch"])
    return out


class _TritonLinearLogProbs(torch.autograd.Function):
    """Log-probs and entropies of `softcap(hidden @ weight.T * scale) / T`, fused."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, in_mult, out_mult, has_softcap, chunk_bytes, splits):
        target_logit, logsumexp, entropy = _forward_statistics(
            hidden, weight, targets, in_mult, out_mult, has_softcap, splits)
        ctx.save_for_backward(hidden, weight, targets, logsumexp, logsumexp - entropy)  # E_p[z] last
        ctx.head = (in_mult, out_mult, has_softcap)
        ctx.chunk_bytes = chunk_bytes
        ctx.set_materialize_grads(False)
        return target_logit - logsumexp, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        hidden, weight, targets, logsumexp, mean_logit = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        nothing = (None,) * 6
        if not (need_hidden or need_weight) or (grad_logps is None and grad_entropy is None):
            return (None, None, *nothing)
        num_rows, vocab = hidden.shape[0], weight.shape[0]
        g = (torch.zeros_like(logsumexp) if grad_logps is None
             else grad_logps.to(torch.float32).contiguous())
        e = None if grad_entropy is None else grad_entropy.to(torch.float32).contiguous()
        args = (hidden, weight, targets, logsumexp, mean_logit, g, e)
        head = ctx.head
        item = hidden.element_size()
        cfg = _launch_config(hidden.dtype)
        grad_hidden = grad_weight = None
        if num_rows <= vocab:
            # Blocks of columns: grad_weight[cols] is complete after one product; the
            # (N, H) grad_hidden accumulates in float32 across blocks.
            granule = cfg["BLOCK_V"]
            width = max(granule, ctx.chunk_bytes // (item * num_rows) // granule * granule)
            buffer = hidden.new_empty((num_rows, min(width, vocab)))
            if need_weight:
                grad_weight = torch.empty_like(weight)
            accumulate = need_hidden and width < vocab
            if accumulate:
                grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
            for col0 in range(0, vocab, width):
                cols = min(width, vocab - col0)
                block = _grad_logits_block(buffer[:, :cols], *args, 0, col0, *head)  # (N, cols)
                if need_weight:
                    torch.mm(block.t(), hidden, out=grad_weight[col0:col0 + cols])
                if accumulate:
                    _add_product(grad_hidden, block, weight[col0:col0 + cols])  # (N, H)
                elif need_hidden:
                    grad_hidden = block @ weight  # a single block: all columns
        else:
            # Blocks of rows: grad_hidden[rows] is complete after one product; the
            # (V, H) grad_weight accumulates in float32 across blocks.
            granule = cfg["BLOCK_N"]
            height = max(granule, ctx.chunk_bytes // (item * vocab) // granule * granule)
            buffer = hidden.new_empty((min(height, num_rows), vocab))
            if need_hidden:
                grad_hidden = torch.empty_like(hidden)
            accumulate = need_weight and height < num_rows
            if accumulate:
                grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            for row0 in range(0, num_rows, height):
                rows = min(height, num_rows - row0)
                block = _grad_logits_block(buffer[:rows], *args, row0, 0, *head)  # (rows, V)
                if need_hidden:
                    torch.mm(block, weight, out=grad_hidden[row0:row0 + rows])
                if accumulate:
                    _add_product(grad_weight, block.t(), hidden[row0:row0 + rows])  # (V, H)
                elif need_weight:
                    grad_weight = block.t() @ hidden  # a single block: all rows
        if grad_hidden is not None:
            grad_hidden = grad_hidden.to(hidden.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return (grad_hidden if need_hidden else None, grad_weight if need_weight else None, *nothing)


def triton_linear_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    softcap: float | None = None,
    logit_scale: float = 1.0,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    _splits: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Log-probs of `targets` and entropies under the LM head, never forming the logits.

    Equal, up to float rounding, to
    `z = softcap * tanh(hidden @ weight.T * logit_scale / softcap) / temperature`
    (without the tanh when `softcap` is None), `log_softmax(z)[targets]` and
    `-(softmax(z) * log_softmax(z)).sum(-1)`, with gradients for `hidden` and `weight`
    through both outputs (the entropy's gradient serves an entropy bonus in the loss).

    Args:
        hidden: `(N, H)` or `(B, T, H)` final hidden states (after the last norm);
            float32, bfloat16 or float16, the dtype of `weight`.
        weight: `(V, H)` LM-head weight (no bias).
        targets: `(N,)` or `(B, T)` token ids in `[0, V)`.
        temperature: sampling temperature > 0; the logits are divided by it last.
        softcap: final-logit soft-capping value (Gemma 2), or None.
        logit_scale: multiplies the head's output before the cap (Cohere's
            `logit_scale`; `1 / logits_scaling` for Granite).
        chunk_bytes: memory for one block of logit gradients in the backward pass.

    Returns:
        `(logprobs, entropy)`, each shaped like `targets`, float32.

    Raises:
        RuntimeError: Triton cannot run here (see `triton_available`).
        ValueError: shapes, dtypes, devices or head parameters that do not fit.
    """
    if not triton_available(hidden.device):
        raise RuntimeError(
            f"triton_linear_logprobs cannot run on {hidden.device}: it needs the triton package and "
            "a CUDA device, or TRITON_INTERPRET=1 set before import; use "
            "course_lib.logprobs.fused_linear_logprobs elsewhere")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap={softcap!r} must be > 0 (or None for no soft-capping)")
    if not (math.isfinite(logit_scale) and logit_scale != 0):
        raise ValueError(f"logit_scale={logit_scale!r} must be finite and nonzero")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} disagree; "
                         "weight must be (vocab, hidden) with hidden's last dimension")
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"targets {tuple(targets.shape)} must match hidden's leading shape "
                         f"{tuple(hidden.shape[:-1])}")
    if hidden.dtype != weight.dtype or hidden.dtype not in _DTYPES:
        raise ValueError(f"hidden ({hidden.dtype}) and weight ({weight.dtype}) must share one dtype of "
                         f"{[str(d) for d in _DTYPES]}; cast hidden to the head's dtype")
    if hidden.device != weight.device or targets.device != hidden.device:
        raise ValueError(f"hidden ({hidden.device}), weight ({weight.device}) and targets "
                         f"({targets.device}) must be on one device")
    if targets.dtype.is_floating_point:
        raise ValueError(f"targets must hold integer token ids, got {targets.dtype}")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes} must be >= 1")
    out_shape = targets.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    flat_targets = targets.reshape(-1).to(torch.int64).contiguous()
    vocab = weight.shape[0]
    if flat_targets.numel() == 0:
        zero = (hidden.sum() + weight.sum()).float() * 0  # keeps both inputs in the graph
        empty = zero.expand(out_shape).clone()
        return empty, empty.clone()
    if bool(((flat_targets < 0) | (flat_targets >= vocab)).any()):
        bad = flat_targets[(flat_targets < 0) | (flat_targets >= vocab)][0].item()
        raise ValueError(f"target id {bad} is outside the vocabulary [0, {vocab})")
    in_mult, out_mult = _head_multipliers(float(temperature), softcap and float(softcap), float(logit_scale))
    logps, entropy = _TritonLinearLogProbs.apply(
        flat_hidden, weight.contiguous(), flat_targets, in_mult, out_mult, softcap is not None,
        int(chunk_bytes), _splits)
    return logps.reshape(out_shape), entropy.reshape(out_shape)
