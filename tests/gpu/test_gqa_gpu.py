"""GQA on the GPU: the AOT kernels against exact references, every dtype, odd shapes and layouts,
gradients, torch.compile, and sizes past 2**31 elements."""

import pytest
import torch
from torch.library import opcheck

from helpers import poison_allocator, rel_error
from neuralops import _library
from neuralops.core.suitability import check_triton_suitability
from neuralops.core.triton_kernels import gqa

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
SHAPES = [  # B, Hkv, N, D, n_rep
    (1, 1, 1, 1, 2),
    (2, 2, 5, 17, 3),
    (3, 4, 1000, 80, 4),
    (2, 8, 4096, 128, 4),
    (1, 2, 333, 256, 2),
    (1, 1, 7, 300, 8),
    (2, 3, 129, 64, 5),
    (4, 1, 64, 96, 32),
]
LAYOUTS = ["contiguous", "bnhd_view", "d_strided", "misaligned"]


def make(b, h, n, d, dtype, layout):
    if layout == "bnhd_view":
        return torch.randn(b, n, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    if layout == "d_strided":
        return torch.randn(b, h, n, 2 * d, device="cuda", dtype=dtype)[..., ::2]
    if layout == "misaligned":  # a storage offset of one element: no 16-byte alignment
        flat = torch.randn(b * h * n * d + 1, device="cuda", dtype=dtype)
        return flat[1:].view(b, h, n, d)
    return torch.randn(b, h, n, d, device="cuda", dtype=dtype)


def reference_reduce(g, n_rep):
    b, h, n, d = g.shape
    return g.double().reshape(b, h // n_rep, n_rep, n, d).sum(2)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,hkv,n,d,n_rep", SHAPES)
def test_expand_is_bit_exact(b, hkv, n, d, n_rep, dtype, layout):
    k = make(b, hkv, n, d, dtype, layout)
    v = make(b, hkv, n, d + 8, dtype, "contiguous")
    assert gqa.is_supported(k, v, hkv, hkv * n_rep)
    poison_allocator()
    ek, ev = gqa.fwd(k, v, hkv, hkv * n_rep)
    assert ek.is_contiguous() and ek.shape == (b, hkv * n_rep, n, d)
    assert torch.equal(ek, torch.repeat_interleave(k, n_rep, dim=1))
    assert torch.equal(ev, torch.repeat_interleave(v, n_rep, dim=1))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,hkv,n,d,n_rep", SHAPES)
def test_reduce_matches_float64(b, hkv, n, d, n_rep, dtype, layout):
    gk = make(b, hkv * n_rep, n, d, dtype, layout)
    gv = make(b, hkv * n_rep, n, d, dtype, "contiguous")
    poison_allocator()
    rk, rv = gqa.bwd(gk, gv, hkv, hkv * n_rep)
    assert rk.dtype == dtype and rk.shape == (b, hkv, n, d)
    # fp32 accumulation then one rounding: within the output dtype's half-ulp of the exact sum.
    tol = {torch.float32: 1e-6, torch.float16: 6e-4, torch.bfloat16: 4e-3}[dtype]
    assert rel_error(rk, reference_reduce(gk, n_rep)) <= tol
    assert rel_error(rv, reference_reduce(gv, n_rep)) <= tol


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_reach_k_and_v_through_the_kernels(dtype):
    k = make(2, 2, 77, 64, dtype, "bnhd_view").detach().requires_grad_()
    v = make(2, 2, 77, 40, dtype, "contiguous").requires_grad_()
    ek, ev = gqa.fwd(k, v, 2, 8)
    wk, wv = torch.randn_like(ek), torch.randn_like(ev)
    ((ek * wk).sum() + (ev * wv).sum()).backward()
    tol = {torch.float32: 1e-6, torch.float16: 6e-4, torch.bfloat16: 4e-3}[dtype]
    assert rel_error(k.grad, reference_reduce(wk, 4)) <= tol
    assert rel_error(v.grad, reference_reduce(wv, 4)) <= tol


def test_empty_tensors():
    k = torch.randn(0, 2, 5, 8, device="cuda")
    v = torch.randn(2, 2, 0, 8, device="cuda")
    ek, ev = gqa.fwd(k, v, 2, 4)
    assert ek.shape == (0, 4, 5, 8) and ev.shape == (2, 4, 0, 8)
    gk, gv = gqa.bwd(ek, ev, 2, 4)
    assert gk.shape == (0, 2, 5, 8) and gv.shape == (2, 2, 0, 8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_opcheck_cuda(dtype):
    k = torch.randn(2, 2, 33, 64, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 33, 64, device="cuda", dtype=dtype, requires_grad=True)
    opcheck(torch.ops.neuralops.gqa_fwd.default, (k, v, 2, 8))
    opcheck(torch.ops.neuralops.gqa_bwd.default, (torch.randn(2, 8, 33, 64, device="cuda", dtype=dtype), v.repeat(1, 4, 1, 1), 2, 8))


def test_torch_compile_without_graph_breaks():
    torch._dynamo.reset()

    def layer(q, k, v):
        ek, ev = gqa.fwd(k, v, 2, 8)
        return torch.nn.functional.scaled_dot_product_attention(q, ek, ev, is_causal=True)

    q = torch.randn(2, 8, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True)
    out = compiled(q, k, v)
    out.float().square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = layer(q, k, v)
    ref.float().square().sum().backward()
    torch.testing.assert_close(out, ref)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad)


def test_offsets_beyond_int32():
    # 2**31 + 2**21 elements per tensor: addresses past 2**31 elements need 64-bit offsets.
    n, d = 2**20 + 2**10, 1024
    k = torch.randn(1, 2, n, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 1, 8, device="cuda", dtype=torch.bfloat16)
    ek, _ = gqa.fwd(k, v, 2, 4)
    assert torch.equal(ek[:, 3, -8:], k[:, 1, -8:]) and torch.equal(ek[:, 2, :8], k[:, 1, :8])
    assert torch.equal(ek, torch.repeat_interleave(k, 2, dim=1))
    del ek
    rk, _ = gqa.bwd(k, v, 1, 2)
    assert torch.equal(rk[0, 0], (k[0, 0].float() + k[0, 1].float()).bfloat16())


def test_sequence_beyond_int32_is_refused_or_falls_back():
    n = 2**31
    k = torch.empty(1, 1, n, 1, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="does not fit the kernel's 32-bit argument"):
        torch.ops.neuralops.gqa_fwd(k, k[:, :, :1], 1, 2)
    assert not gqa.is_supported(k, k, 1, 2)


def test_no_cubin_for_device_says_how_to_rebuild(monkeypatch):
    monkeypatch.setattr(_library, "BUILT_ARCHS", (75,))
    ok, reason = check_triton_suitability(torch.empty(1, device="cuda"), "gqa")
    major, minor = torch.cuda.get_device_capability()
    assert not ok and f'NEURALOPS_CUDA_ARCHS="{major}{minor}"' in reason
