"""The low-rank Triton kernels themselves, run on CPU tensors by the Triton interpreter
(TRITON_INTERPRET=1, set in conftest.py), on small odd shapes, with the grids, splits and arguments
csrc/ops/low_rank.cpp computes (the launchers below mirror it, the SM count being a parameter).

bfloat16 is left to the GPU tests: this Triton's interpreter computes tl.dot on bfloat16 wrongly
(its float16 and float32 dots are right).
"""

import pytest
import torch

from helpers import rel_error, requires_interpreter
from triton_src.low_rank import kernels
from triton_src.low_rank.spec import KERNELS

triton = pytest.importorskip("triton")
import interpreter_bounds  # noqa: E402

interpreter_bounds.install()  # every launch below: an access past its tensors raises
pytestmark = requires_interpreter

CONSTEXPRS = {spec.name: spec.constexprs for spec in KERNELS}
DT = {torch.float32: "fp32", torch.float16: "fp16"}
TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def cdiv(a, b):
    return -(-a // b)


def rows_of(t):
    """(tensor, inner, s_outer, s_inner) as rows_of() in csrc/ops/low_rank.cpp."""
    levels = []
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            continue
        if levels and t.stride(i) == levels[-1][0] * levels[-1][1]:
            levels[-1][0] *= t.shape[i]
        else:
            levels.append([t.shape[i], t.stride(i)])
    if t.stride(-1) == 1 or t.shape[-1] <= 1:
        if not levels:
            return t, 1, 0, 0
        if len(levels) == 1:
            return t, levels[0][0], 0, levels[0][1]
        if len(levels) == 2:
            return t, levels[0][0], levels[1][1], levels[0][1]
    c = t.contiguous()
    return c, max(c.numel() // max(c.shape[-1], 1), 1), 0, c.shape[-1]


def kstride(t, dim=0):
    return 0 if t.shape[dim] == 1 else t.stride(dim)


def nan(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def fused_n_split(m_blocks, k, n, sms):
    best, best_cost = 1, 0.0
    for s in range(1, 9):
        cost = cdiv(m_blocks * s, sms) * (k + n / s)
        if s == 1 or cost < best_cost * 0.97:
            best, best_cost = s, cost
    return best


def run_fused(a, w1, w2, bias, hidden, sms):
    a, inner, s_outer, s_inner = rows_of(a)
    M = a.numel() // a.shape[-1]
    K, R, N = w1.shape[1], w1.shape[0], w2.shape[0]
    cx = CONSTEXPRS["low_rank_fused"]({"dtype": DT[a.dtype], "BLOCK_R": 128 if R <= 128 else 256})
    m_blocks = cdiv(M, cx["BLOCK_M"])
    split = fused_n_split(m_blocks, K, N, sms)
    per_prog = cdiv(cdiv(N, split), cx["BLOCK_N"]) * cx["BLOCK_N"]
    split = 1 if per_prog == 0 else cdiv(N, per_prog)
    out = nan(M, N, dtype=a.dtype)
    h = nan(M, R, dtype=a.dtype) if hidden else out
    kernels.low_rank_fused_kernel[(m_blocks, split)](
        a, w1, w2, bias if bias is not None else out, out, h, M, K, R, N, per_prog,
        int(bias is not None), int(hidden), inner, s_outer, s_inner, kstride(w1), kstride(w2),
        kstride(out), kstride(h) if hidden else 0, **cx)
    return out, (h if hidden else None), split


def decode_k_split(k, r, block_r, block_k, sms, reduced):
    """(parts, K elements per part) as decode_k_split() in csrc/ops/low_rank.cpp."""
    k_tiles = cdiv(k, block_k)
    r_blocks = cdiv(r, block_r)
    wanted = (sms + r_blocks // 2) // r_blocks if reduced else max(4, cdiv(k_tiles, 4))
    parts = min(max(wanted, 1), k_tiles)
    length = cdiv(cdiv(k, parts), block_k) * block_k
    return cdiv(k, length), length


REDUCED_BLOCK_M = next(spec for spec in KERNELS if spec.name == "low_rank_decode_reduce").keys["BLOCK_M"]
OUT_BLOCKS: dict = {}   # (dtype, BLOCK_M) -> the output kernel's BLOCK_N values built
for variant in next(spec for spec in KERNELS if spec.name == "low_rank_decode_out").variants():
    vkey = variant.key_dict
    OUT_BLOCKS.setdefault((vkey["dtype"], vkey["BLOCK_M"]), set()).add(vkey["BLOCK_N"])


def decode_out_block(dtype, block_m, n, sms):
    """BLOCK_N as decode_out_block() in csrc/ops/low_rank.cpp."""
    blocks = sorted(OUT_BLOCKS[(dtype, block_m)])
    return next((b for b in blocks if cdiv(n, b) <= sms), blocks[-1])


def run_decode(a, w1, w2, bias, sms, hidden=True, reduced=None, split=None):
    """The decode kernels as the op chains them; reduced (default: where spec.py builds the reduce
    kernel for the rows' BLOCK_M) runs the reduce kernel between the two; split, (parts, K elements
    per part), replaces the op's rule."""
    a, inner, s_outer, s_inner = rows_of(a)
    M = a.numel() // a.shape[-1]
    K, R, N = w1.shape[1], w1.shape[0], w2.shape[0]
    key = {"dtype": DT[a.dtype], "BLOCK_M": 16 if M <= 16 else 64}
    if reduced is None:
        reduced = key["BLOCK_M"] in REDUCED_BLOCK_M
    pcx = CONSTEXPRS["low_rank_decode_partial"](key)
    ocx = CONSTEXPRS["low_rank_decode_out"]({**key, "BLOCK_N": decode_out_block(key["dtype"], key["BLOCK_M"], N, sms)})
    ksplit, k_len = split or decode_k_split(K, R, pcx["BLOCK_R"], pcx["BLOCK_K"], sms, reduced)
    part = nan(ksplit, M, R, dtype=torch.float32)   # NaN: a partial read before it is written shows
    kernels.low_rank_decode_partial_kernel[(cdiv(R, pcx["BLOCK_R"]), ksplit)](
        a, w1, w2, part, M, K, R, N, k_len, inner, s_outer, s_inner, kstride(w1), kstride(w2), **pcx)
    n_parts = ksplit
    if reduced:
        rcx = CONSTEXPRS["low_rank_decode_reduce"]({"BLOCK_M": key["BLOCK_M"]})
        summed = nan(M, R, dtype=torch.float32)
        kernels.low_rank_decode_reduce_kernel[(cdiv(M * R, rcx["BLOCK"]),)](part, summed, M * R, ksplit, **rcx)
        part, n_parts = summed, 1
    out = nan(M, N, dtype=a.dtype)
    h = nan(M, R, dtype=a.dtype) if hidden else out
    kernels.low_rank_decode_out_kernel[(max(1, cdiv(N, ocx["BLOCK_N"])),)](
        part, w2, bias if bias is not None else out, out, h, M, R, N, n_parts, int(bias is not None),
        int(hidden), kstride(w2), 0 if N == 0 else kstride(out), kstride(h) if hidden else 0, **ocx)
    return out, (h if hidden else None), ksplit


def run_gemm_nt(a, b, bias):
    a, inner, s_outer, s_inner = rows_of(a)
    M = a.numel() // a.shape[-1]
    N, K = b.shape
    cx = CONSTEXPRS["low_rank_gemm_nt"]({"dtype": DT[a.dtype]})
    c = nan(M, N, dtype=a.dtype)
    grid = cdiv(M, cx["BLOCK_M"]) * cdiv(N, cx["BLOCK_N"])
    kernels.gemm_nt_kernel[(grid,)](a, b, bias if bias is not None else c, c, M, N, K, int(bias is not None),
                                    inner, s_outer, s_inner, kstride(b), kstride(c), **cx)
    return c


def run_wgrad(g, h, dh, x, with_bias):
    g, g_inner, sg_outer, sg_inner = rows_of(g)
    h, h_inner, sh_outer, sh_inner = rows_of(h)
    x, x_inner, sx_outer, sx_inner = rows_of(x)
    M, N, R, K = dh.shape[0], g.shape[-1], dh.shape[1], x.shape[-1]
    cx = CONSTEXPRS["low_rank_wgrad"]({"dtype": DT[g.dtype]})
    dU, dV = nan(N, R, dtype=g.dtype), nan(R, K, dtype=g.dtype)
    db = nan(N, dtype=g.dtype) if with_bias else None
    tiles = cdiv(N, cx["BLOCK_P"]) * cdiv(R, cx["BLOCK_Q"]) + cdiv(R, cx["BLOCK_P"]) * cdiv(K, cx["BLOCK_Q"])
    kernels.low_rank_wgrad_kernel[(tiles,)](
        g, h, dh, x, dU, dV, db if with_bias else dU, M, N, R, K, int(with_bias), g_inner, sg_outer,
        sg_inner, h_inner, sh_outer, sh_inner, kstride(dh), x_inner, sx_outer, sx_inner, kstride(dU),
        kstride(dV), **cx)
    return dU, dV, db


def make(lead, k, r, n, dtype, layout="contiguous"):
    if layout == "transposed":   # [T, B, K] storage seen as [B, T, K]: two row levels
        x = torch.randn(lead[1], lead[0], k).transpose(0, 1)
    elif layout == "padded":     # rows longer than K: one level, row stride K + 3
        x = torch.randn(*lead, k + 3)[..., :k]
    else:
        x = torch.randn(*lead, k)
    V = torch.randn(r, k) / k**0.5
    U = torch.randn(n, r) / r**0.5
    b = torch.randn(n)
    return x.to(dtype), U.to(dtype), V.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead,k,r,n,sms,layout", [
    ((70,), 48, 20, 300, 132, "contiguous"),    # N split across programs (few row blocks)
    ((130,), 33, 100, 17, 1, "padded"),         # three row blocks, odd sizes, one program per SM
    ((5, 30), 40, 144, 24, 132, "transposed"),  # BLOCK_R 256 (fp16), rows from two strided levels
])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_kernel(dtype, lead, k, r, n, sms, layout, bias):
    if dtype == torch.float32:
        r = min(r, 128)   # the fp32 fused kernel is built for R <= 128 only
    x, U, V, b = make(lead, k, r, n, dtype, layout)
    b = b if bias else None
    y, h, split = run_fused(x, V, U, b, hidden=True, sms=sms)
    y_ref, h_ref = kernels.low_rank_reference(x, U, V, b)
    assert rel_error(y, y_ref) <= TOL[dtype] and rel_error(h, h_ref) <= TOL[dtype]
    if sms == 132 and lead == (70,):
        assert split > 1
    y2, none, _ = run_fused(x, V, U, b, hidden=False, sms=sms)
    assert none is None and torch.equal(y2, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead,k,r,n,sms,layout", [
    ((1,), 300, 48, 80, 132, "contiguous"),     # K split, two R blocks (the second masked)
    ((16,), 40, 30, 33, 1, "padded"),           # one K range; odd N
    ((5, 8), 520, 64, 20, 132, "transposed"),   # BLOCK_M 64, two row levels, K split
    ((3,), 520, 300, 70, 132, "contiguous"),    # R > the output kernel's BLOCK_R: it loops over R
])
@pytest.mark.parametrize("bias", [True, False])
def test_decode_kernel(dtype, lead, k, r, n, sms, layout, bias):
    x, U, V, b = make(lead, k, r, n, dtype, layout)
    b = b if bias else None
    y, h, ksplit = run_decode(x, V, U, b, sms)
    y_ref, h_ref = kernels.low_rank_reference(x, U, V, b)
    assert rel_error(y, y_ref) <= TOL[dtype] and rel_error(h, h_ref) <= TOL[dtype]
    assert (ksplit > 1) == (lead != (16,))
    y2, none, _ = run_decode(x, V, U, b, sms, hidden=False)
    assert none is None and torch.equal(y2, y)


@pytest.mark.parametrize("lead,parts", [((40,), 17), ((64,), 2), ((3, 7), 5)])
def test_decode_reduce_kernel_changes_no_bit(lead, parts):
    """The reduce kernel adds the partials in the output kernel's order: with it or without it, the
    same split gives the same y and h bit for bit."""
    x, U, V, b = make(lead, 520, 72, 48, torch.float32)
    split = (parts, cdiv(cdiv(520, parts), 32) * 32)   # BLOCK_K 32 (fp32, BLOCK_M 64)
    assert cdiv(520, split[1]) == parts
    with_reduce = run_decode(x, V, U, b, 132, reduced=True, split=split)
    without = run_decode(x, V, U, b, 132, reduced=False, split=split)
    assert with_reduce[2] == without[2] == parts
    assert torch.equal(with_reduce[0], without[0]) and torch.equal(with_reduce[1], without[1])
    assert rel_error(with_reduce[0], kernels.low_rank_reference(x, U, V, b)[0]) <= 1e-5


@pytest.mark.parametrize("sms,block_n", [(10, 32), (5, 64), (3, 128), (1, 128)])
def test_decode_out_block_by_grid(sms, block_n):
    """Each BLOCK_N built for the output kernel at BLOCK_M 64 (fp16): the smallest whose grid of
    cdiv(300, BLOCK_N) programs fits in `sms`, else the largest."""
    assert decode_out_block("fp16", 64, 300, sms) == block_n
    x, U, V, b = make((40,), 200, 48, 300, torch.float16)
    y, h, _ = run_decode(x, V, U, b, sms)
    y_ref, h_ref = kernels.low_rank_reference(x, U, V, b)
    assert rel_error(y, y_ref) <= TOL[torch.float16] and rel_error(h, h_ref) <= TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("lead", [(7,), (40,)])
def test_decode_kernel_hidden_only(dtype, lead):
    """N = 0, as the backward asks for h alone: the output kernel runs one program, with the reduce
    kernel before it at BLOCK_M 64 (40 rows)."""
    x, U, V, _ = make(lead, 300, 40, 0, dtype)
    y, h, ksplit = run_decode(x, V, U, None, 132)
    assert y.shape == (*lead, 0) and ksplit > 1
    assert rel_error(h, kernels.low_rank_reference(x, U, V)[1]) <= (1e-6 if dtype == torch.float32 else TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_gemm_nt_kernel(dtype, layout):
    x, _, V, _ = make((3, 50), 70, 150, 9, dtype, layout)
    for bias in (None, torch.randn(150).to(dtype)):
        c = run_gemm_nt(x, V, bias)
        assert rel_error(c, kernels.gemm_nt_reference(x, V, bias)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_bias", [True, False])
def test_wgrad_kernel(dtype, with_bias):
    x, U, V, _ = make((9, 15), 70, 20, 150, dtype, "transposed")   # M = 135: three M steps of 64
    g = torch.randn(15, 9, 150).to(dtype).transpose(0, 1)
    h = kernels.low_rank_reference(x, U, V)[1]
    dh = (g.reshape(-1, 150).float() @ U.float()).to(dtype)
    dU, dV, db = run_wgrad(g, h, dh, x, with_bias)
    ref = kernels.wgrad_reference(g, h, dh, x, with_bias)
    assert rel_error(dU, ref[0]) <= TOL[dtype] and rel_error(dV, ref[1]) <= TOL[dtype]
    if with_bias:
        assert rel_error(db, ref[2]) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [12, 100])
def test_backward_chain(dtype, m):
    """dx and dh as the op computes them: the forward kernels on contiguous transposed weights,
    decode for m <= 64 and fused above; then the weight gradients, against the reference."""
    x, U, V, _ = make((m,), 48, 32, 40, dtype)
    g = torch.randn(m, 40).to(dtype)
    h = kernels.low_rank_reference(x, U, V)[1]
    Ut, Vt = U.T.contiguous(), V.T.contiguous()
    if m <= 64:
        dx, dh, _ = run_decode(g, Ut, Vt, None, 132)
    else:
        dx, dh, _ = run_fused(g, Ut, Vt, None, hidden=True, sms=132)
    dU, dV, db = run_wgrad(g, h, dh, x, True)
    want = kernels.low_rank_bwd_reference(x, U, V, g, h)
    for got, ref in zip((dx, dh, dU, dV, db), want):
        assert rel_error(got, ref) <= TOL[dtype]
