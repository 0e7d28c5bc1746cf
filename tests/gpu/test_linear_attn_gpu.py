"""Linear attention on the GPU: the AOT kernels against float64 references for every phi x causal x
Cosformer x GQA x dtype on odd shapes, layouts that need no copy and ones that do, streaming and
decode steps, gradients (states included), long fp16 sequences, torch.compile and opcheck.

Tolerances are the issue's norm-wise relative errors: bf16 1e-2, fp16 5e-3, fp32 1e-4."""

import math

import pytest
import torch
from torch.library import opcheck

from helpers import assert_compiled_matches_eager, poison_allocator, rel_error
from neuralops.core.triton_kernels import linear_attn as la

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-4}
PHIS = ["elu+1", "relu", "identity", "softmax_free"]


def make(b, h, hkv, n, d, dv, dtype, layout="contiguous", phi="elu+1", seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def one(heads, width):
        if layout == "bnhd_view":  # what a projection produces, viewed as [B, H, N, D]: no copy needed
            return torch.randn(b, n, heads, width, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
        if layout == "misaligned":  # one element of storage offset: not 16-byte aligned, copied
            flat = torch.randn(b * heads * n * width + 1, device="cuda", dtype=dtype, generator=g)
            return flat[1:].view(b, heads, n, width)
        return torch.randn(b, heads, n, width, device="cuda", dtype=dtype, generator=g)

    q, k, v = one(h, d), one(hkv, d), one(hkv, dv)
    if phi == "identity":  # a normalizer of identity features must stay away from zero
        q, k = q.abs(), k.abs()
    return q, k, v


def weights(n, b=None):
    cos, sin = la.cosformer_weights(n, device="cuda")
    return (cos, sin) if b is None else (cos.expand(b, n).contiguous(), sin.expand(b, n).contiguous())


def reference(q, k, v, phi, causal, cos, sin, scale, s0=None, z0=None, grad_out=None, grad_state=None):
    """float64 forward (and gradients) through the chunked fallback, which the CPU tests pin to the
    O(N^2) definition."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    state = None
    if s0 is not None:
        leaves += [s0.detach().double().requires_grad_(), z0.detach().double().requires_grad_()]
        state = (leaves[3], leaves[4])
    c, s = (None, None) if cos is None else (cos.double(), sin.double())
    out, st = la.linear_attn_pytorch_fallback(*leaves[:3], causal, phi, 1e-6, c, s, scale=scale, initial_state=state,
                                              return_state=True)
    if grad_out is None:
        return out, st, None
    loss = (out * grad_out.double()).sum()
    if grad_state is not None:
        loss = loss + (st.S * grad_state[0].double()).sum() + (st.z * grad_state[1].double()).sum()
    return out, st, torch.autograd.grad(loss, leaves)


def assert_close(name, got, ref, dtype):
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    err = rel_error(got, ref)
    assert err <= TOL[dtype], f"{name}: norm-wise relative error {err:.3e} > {TOL[dtype]:.0e}"


def check_mode(phi, causal, cosformer, dtype, h, hkv, d, dv):
    """fwd and its backward at B2 N333 and scale 0.37 against the float64 reference."""
    b, n = 2, 333
    q, k, v = make(b, h, hkv, n, d, dv, dtype, phi=phi)
    cos, sin = weights(n, b) if cosformer else (None, None)
    assert la.is_supported(q, k, v, cos_weight=cos)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    poison_allocator()
    out = la.fwd(*leaves, causal, phi, 1e-6, cos, sin, scale=0.37)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref, _, grads = reference(q, k, v, phi, causal, cos, sin, 0.37, grad_out=grad_out)
    assert out.shape == (b, h, n, dv) and out.dtype == dtype
    assert_close("out", out, ref, dtype)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert leaf.grad.shape == leaf.shape, name
        assert_close(name, leaf.grad, g, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("phi", PHIS)
def test_every_mode_forward_and_backward(phi, causal, cosformer, gqa, dtype):
    check_mode(phi, causal, cosformer, dtype, 6, 2 if gqa else 6, 48, 80)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("phi", PHIS)
def test_fused_backward_every_mode(phi, causal, cosformer, gqa, dtype):
    """Where one dq program holds all features and value columns (64: spec.dq_stats_built, and
    for bf16 dk with dv, spec.dk_dv_built; on sm_90 bf16 takes the Gluon kernels), which the
    48 x 80 shape above leaves to the separate passes: every mode, odd N and padded D and Dv."""
    check_mode(phi, causal, cosformer, dtype, 4, 2 if gqa else 4, 24 if cosformer else 40, 56)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,h,hkv,n,d,dv,cosformer", [
    (1, 1, 1, 1, 16, 16, False),      # one row
    (3, 4, 1, 100, 17, 40, False),    # D not a multiple of 16: padded copy; multi-query
    (1, 2, 2, 4099, 128, 128, False),  # several segments (the scan)
    (2, 8, 2, 1000, 64, 96, True),
    (1, 2, 1, 777, 256, 256, False),  # the largest head dims
    (1, 2, 2, 513, 128, 24, True),    # Cosformer at the 256 block
    (1, 3, 1, 1100, 128, 130, True),  # Cosformer at 256 features, Dv one column past a tile
    (2, 4, 2, 64, 80, 72, False),
])
def test_odd_shapes(b, h, hkv, n, d, dv, cosformer, dtype):
    check_odd_shape(b, h, hkv, n, d, dv, cosformer, dtype)


def check_odd_shape(b, h, hkv, n, d, dv, cosformer, dtype):
    """Causal fwd and bwd against float64, from a poisoned allocator."""
    q, k, v = make(b, h, hkv, n, d, dv, dtype)
    cos, sin = weights(n) if cosformer else (None, None)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    # With one row the normalized output is v * s / (s + eps): dq and dk are O(eps), the difference
    # of two O(1) terms, which no fp32 evaluation resolves. The unnormalized map is well conditioned.
    phi = "softmax_free" if n == 1 else "elu+1"
    poison_allocator()
    out = la.fwd(*leaves, True, phi, 1e-6, cos, sin)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref, _, grads = reference(q, k, v, phi, True, cos, sin, 1.0, grad_out=grad_out)
    assert_close("out", out, ref, dtype)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, g, dtype)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("phi", PHIS)
def test_every_map_at_256_features(phi, gqa, causal):
    """bf16's forward at 256 features (on sm_90 the Gluon walks: the causal one in Dv tiles of 32,
    spec.py WGMMA_FWD_TILES, the bidirectional one in tiles of 128, WGMMA_BIDIR_FWD_TILES): padded
    D, a Dv whose last tile is partly masked, and its backward."""
    check_mode(phi, causal, False, torch.bfloat16, 4, 2 if gqa else 4, 200, 72)


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("b,h,hkv,n", [(4, 16, 4, 2100), (1, 2, 1, 4099)])
def test_bidirectional_segments_at_256_features(b, h, hkv, n, phi):
    """The bidirectional forward at 256 features over one segment, whose sums the forward reads
    without a scan (B4 H16 on the H200: one wave of one program per multiprocessor), and over many
    (B1 H2), every program reading the total; D and Dv past a tile, GQA."""
    q, k, v = make(b, h, hkv, n, 250, 130, torch.bfloat16, phi=phi)
    poison_allocator()
    out = la.fwd(q, k, v, False, phi, 1e-6, scale=0.37)
    ref, _, _ = reference(q, k, v, phi, False, None, None, 0.37)
    assert_close("out", out, ref, torch.bfloat16)


@pytest.mark.parametrize("dtype", la.COSFORMER_WIDE_DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("phi", PHIS)
def test_cosformer_above_128_features(phi, gqa, causal, dtype):
    """Cosformer at D 200: 400 features, the 512 block that only the run-time map builds
    (spec.COSFORMER_BLOCK), forward and backward in every mode and each dtype that builds it."""
    check_mode(phi, causal, True, dtype, 4, 2 if gqa else 4, 200, 72)


@pytest.mark.parametrize("b,h,hkv,n,d,dv", [(1, 2, 1, 1100, 256, 256), (2, 4, 2, 300, 136, 40), (3, 2, 2, 5, 256, 24)])
def test_cosformer_512_features_odd_shapes(b, h, hkv, n, d, dv):
    """The 512 block at the largest head dims, with padded features (2 x 144) and a few rows."""
    check_odd_shape(b, h, hkv, n, d, dv, True, torch.bfloat16)


@pytest.mark.parametrize("dtype", la.COSFORMER_WIDE_DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_cosformer_512_walks_one_part_per_launch(causal, dtype):
    """At the 512 block the forward, the backward's stats pass and dv each take two launches, one per
    Cosformer part (spec.walks_by_part), part 1 adding part 0's sums; several segments, GQA, N off
    the chunk, against float64."""
    b, h, hkv, n, d, dv = 2, 4, 2, 2 * 4096 + 33, 200, 72
    q, k, v = make(b, h, hkv, n, d, dv, dtype, phi="elu+1")
    cos, sin = weights(n, b)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    poison_allocator()
    outs = []
    names = _cuda_kernels(lambda: outs.append(la.fwd(*leaves, causal, "elu+1", 1e-6, cos, sin, scale=0.37)))
    assert names.count("la_fwd_kernel") == 2, names
    grad_out = torch.randn_like(outs[0])
    names = _cuda_kernels(lambda: outs[0].backward(grad_out))
    assert names.count("la_fwd_kernel") == 2 and names.count("la_bwd_dv_kernel") == 2, names  # stats pass, dv
    ref, _, grads = reference(q, k, v, "elu+1", causal, cos, sin, 0.37, grad_out=grad_out)
    assert_close("out", outs[0], ref, dtype)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, g, dtype)


@pytest.mark.parametrize("cosformer", [False, True])
def test_states_at_256_features(cosformer):
    """The walk at 256 features starts from a given state and writes the final one (write_final),
    over several segments. Cosformer reaches 256 features from 128 (a cos and a sin part), in the
    run-time-map forward with its own sm_90 tile (spec.ARCH_TILES)."""
    b, h, hkv, n, d, dv = 2, 4, 2, 3000, 128 if cosformer else 256, 40
    q, k, v = make(b, h, hkv, n, d, dv, torch.bfloat16)
    cos, sin = weights(n) if cosformer else (None, None)
    parts = (2,) if cosformer else ()
    g = torch.Generator(device="cuda").manual_seed(5)
    s0 = torch.randn(b, hkv, *parts, d, dv, device="cuda", generator=g)
    z0 = torch.rand(b, hkv, *parts, d, device="cuda", generator=g) * 5
    poison_allocator()
    out, st = la.fwd(q, k, v, True, "elu+1", 1e-6, cos, sin, initial_state=(s0, z0), return_state=True)
    ref, ref_st, _ = reference(q, k, v, "elu+1", True, cos, sin, 1.0, s0, z0)
    assert_close("out", out, ref, torch.bfloat16)
    assert_close("S", st.S, ref_st.S, torch.bfloat16)
    assert_close("z", st.z, ref_st.z, torch.bfloat16)


@pytest.mark.parametrize("layout", ["bnhd_view", "misaligned"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_layouts(layout, dtype):
    q, k, v = make(2, 4, 2, 300, 64, 64, dtype, layout=layout)
    if layout == "bnhd_view":
        assert not q.is_contiguous()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = la.fwd(*leaves, True, "relu", 1e-6)
    grad_out = torch.randn(out.shape, device="cuda", dtype=dtype).transpose(1, 2).contiguous().transpose(1, 2)
    out.backward(grad_out)
    ref, _, grads = reference(q, k, v, "relu", True, None, None, 1.0, grad_out=grad_out)
    assert out.is_contiguous()
    assert_close("out", out, ref, dtype)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, g, dtype)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_bnhd_view_is_read_without_a_copy(causal, dtype):
    """fwd and bwd on [B, N, H, D] projections viewed as [B, H, N, D] (grad_out too) launch exactly
    the kernels that contiguous inputs launch: the kernels read the view through its strides. The
    misaligned layout, which the op copies, launches more, so the comparison does see a copy.
    (bwd, not autograd: AccumulateGrad would copy a contiguous gradient into a view leaf's layout.)"""
    b, h, hkv, n, d, dv = 2, 4, 2, 300, 64, 64

    def launches(layout):
        q, k, v = make(b, h, hkv, n, d, dv, dtype, layout=layout)
        grad_out = torch.randn(b, n, h, dv, device="cuda", dtype=dtype).transpose(1, 2)
        if layout == "contiguous":
            grad_out = grad_out.contiguous()

        def call():
            la.fwd(q, k, v, causal, "relu", 1e-6)
            la.bwd(q, k, v, grad_out, causal, "relu", 1e-6)

        call()  # the first call loads the cubins
        return _cuda_kernels(call)

    plain = launches("contiguous")
    assert plain
    assert launches("bnhd_view") == plain
    assert len(launches("misaligned")) > len(plain)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
def test_states_and_their_gradients(dtype, causal, cosformer):
    b, h, hkv, n, d, dv = 2, 4, 2, 500, 32, 48
    q, k, v = make(b, h, hkv, n, d, dv, dtype)
    cos, sin = weights(n) if cosformer else (None, None)
    parts = (2,) if cosformer else ()
    g = torch.Generator(device="cuda").manual_seed(3)
    s0 = torch.randn(b, hkv, *parts, d, dv, device="cuda", generator=g).requires_grad_()
    z0 = (torch.rand(b, hkv, *parts, d, device="cuda", generator=g) * 5).requires_grad_()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, st = la.fwd(*leaves, causal, "elu+1", 1e-6, cos, sin, initial_state=(s0, z0), return_state=True)
    assert st.S.dtype == torch.float32 and st.S.shape == s0.shape and st.z.shape == z0.shape
    grad_out = torch.randn_like(out)
    grad_state = (torch.randn_like(st.S), torch.randn_like(st.z))
    (out * grad_out).sum().backward(retain_graph=True)
    torch.autograd.backward([st.S, st.z], list(grad_state))
    ref, ref_st, grads = reference(q, k, v, "elu+1", causal, cos, sin, 1.0, s0, z0, grad_out, grad_state)
    assert_close("out", out, ref, dtype)
    assert_close("S", st.S, ref_st.S, dtype)
    assert_close("z", st.z, ref_st.z, dtype)
    for name, leaf, r in zip(("dq", "dk", "dv", "dS0", "dz0"), (*leaves, s0, z0), grads):
        assert_close(name, leaf.grad, r, dtype)


@pytest.mark.parametrize("dtype,cosformer,d", [*((t, c, 64) for t in DTYPES for c in (False, True)),
                                               (torch.bfloat16, True, 192)])  # 192: the 512 block
def test_streaming_and_decode_match_one_call(dtype, cosformer, d):
    b, h, hkv, n, dv = 2, 8, 2, 2100, 64
    q, k, v = make(b, h, hkv, n, d, dv, dtype)
    cos, sin = weights(n) if cosformer else (None, None)
    full, full_st = la.fwd(q, k, v, True, "elu+1", 1e-6, cos, sin, return_state=True)
    state, pieces = None, []
    cuts = [0, 1000, 1001, 1002, 2100]  # a prefill, two decode steps, the rest
    for a, e in zip(cuts, cuts[1:]):
        c = s = None
        if cosformer:
            c, s = la.cosformer_weights(e - a, n, start=a, device="cuda")
        out, state = la.fwd(q[:, :, a:e], k[:, :, a:e], v[:, :, a:e], True, "elu+1", 1e-6, c, s,
                            initial_state=state, return_state=True)
        pieces.append(out)
    assert rel_error(torch.cat(pieces, 2), full) <= TOL[dtype], "streamed output differs from one call"
    assert rel_error(state.S, full_st.S) <= 1e-4 and rel_error(state.z, full_st.z) <= 1e-4, "final states differ"


def test_decode_step_many_heads():
    b, h, hkv, d, dv = 64, 32, 8, 128, 128
    q, k, v = make(b, h, hkv, 1, d, dv, torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(4)
    s0 = torch.randn(b, hkv, d, dv, device="cuda", generator=g)
    z0 = torch.rand(b, hkv, d, device="cuda", generator=g) * 100
    out, st = la.fwd(q, k, v, True, "elu+1", initial_state=(s0, z0), return_state=True)
    ref, ref_st, _ = reference(q, k, v, "elu+1", True, None, None, 1.0, s0, z0)
    assert_close("out", out, ref, torch.bfloat16)
    # The state of a bf16 call: its features enter the tensor cores rounded to tf32 (2**-11).
    assert_close("S", st.S, ref_st.S, torch.bfloat16)


@pytest.mark.parametrize("cosformer", [False, True])
def test_decode_step_is_one_launch(cosformer):
    """N = 1 with a state (a view of the last row, as a decode loop slices it) is one kernel launch:
    no copy of the inputs, weights or state around it."""
    b, h, hkv, n, d, dv = 2, 8, 2, 101, 64, 64
    q, k, v = make(b, h, hkv, n, d, dv, torch.bfloat16)
    cos, sin = weights(n) if cosformer else (None, None)
    head = (cos[:-1], sin[:-1]) if cosformer else (None, None)
    _, state = la.fwd(q[:, :, :-1], k[:, :, :-1], v[:, :, :-1], True, "elu+1", 1e-6, *head, return_state=True)
    last = (cos[-1:], sin[-1:]) if cosformer else (None, None)

    def step():
        return la.fwd(q[:, :, -1:], k[:, :, -1:], v[:, :, -1:], True, "elu+1", 1e-6, *last, initial_state=state,
                      return_state=True)

    step()  # the first call loads the cubin
    assert _cuda_kernels(step) == ["la_decode_kernel"]
    out, st = step()
    ref, ref_st, _ = reference(q, k, v, "elu+1", True, cos, sin, 1.0)
    assert_close("out", out, ref[:, :, -1:], torch.bfloat16)
    assert_close("S", st.S, ref_st.S, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_long_sequence_stays_finite_and_accurate(dtype):
    q, k, v = make(1, 2, 2, 65536, 64, 64, dtype)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = la.fwd(*leaves, True, "elu+1")
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref, _, grads = reference(q, k, v, "elu+1", True, None, None, 1.0, grad_out=grad_out)
    assert_close("out", out, ref, dtype)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, g, dtype)


def test_outside_the_kernels_limits_uses_the_fallback():
    q, k, v = make(1, 2, 2, 10, 272, 16, torch.bfloat16)
    assert not la.is_supported(q, k, v)
    out = la.fwd(q, k, v, is_causal=True)
    assert_close("out", out, reference(q, k, v, "elu+1", True, None, None, 1.0)[0], torch.bfloat16)
    with pytest.raises(ValueError, match=r"take D and Dv up to 256, got D=272"):
        torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, None, None, "elu+1", True, 1e-6, 1.0, False)
    # Cosformer above D 128 has kernels in bf16 and fp16 (spec.COSFORMER_BLOCK_DTYPES); fp32 falls back
    cos, sin = weights(10)
    for dtype in la.COSFORMER_WIDE_DTYPES:
        assert la.is_supported(*make(1, 2, 2, 10, 256, 16, dtype), cos_weight=cos)
    q, k, v = make(1, 2, 2, 10, 136, 16, torch.float32)
    assert la.is_supported(q, k, v) and not la.is_supported(q, k, v, cos_weight=cos)
    out = la.fwd(q, k, v, True, "elu+1", 1e-6, cos, sin)
    assert_close("out", out, reference(q, k, v, "elu+1", True, cos, sin, 1.0)[0], torch.float32)
    with pytest.raises(ValueError, match=r"no kernel block that holds 288 features"):
        torch.ops.neuralops.linear_attn_fwd(q, k, v, cos, sin, None, None, "elu+1", True, 1e-6, 1.0, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_opcheck_cuda(dtype):
    q, k, v = make(2, 4, 2, 70, 32, 16, dtype)
    cos, sin = weights(70)
    s0 = torch.rand(2, 2, 2, 32, 16, device="cuda")
    z0 = torch.rand(2, 2, 2, 32, device="cuda")
    opcheck(torch.ops.neuralops.linear_attn_fwd.default,
            (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), cos, sin, s0.requires_grad_(),
             z0.requires_grad_(), "elu+1", True, 1e-6, 0.5, True))
    dout = torch.randn(2, 4, 70, 16, device="cuda", dtype=dtype)
    opcheck(torch.ops.neuralops.linear_attn_bwd.default,
            (dout, q.detach(), k.detach(), v.detach(), cos, sin, s0.detach(), z0.detach(), None, None, "elu+1", False,
             1e-6, 0.5, True))
    args = (q.detach(), k.detach(), v.detach(), None, None, None, None, "relu", True, 1e-6, 1.0, False)
    opcheck(torch.ops.neuralops.linear_attn_fwd_train.default, args)
    q, k, v = make(2, 4, 2, 3000, 64, 32, dtype)
    args = (q, k, v, None, None, None, None, "relu", True, 1e-6, 1.0, False)
    states = torch.ops.neuralops.linear_attn_fwd_train(*args)[3]
    assert states.numel() > 0
    opcheck(torch.ops.neuralops.linear_attn_fwd_train.default, args)
    opcheck(torch.ops.neuralops.linear_attn_bwd.default,
            (torch.randn(2, 4, 3000, 32, device="cuda", dtype=dtype), q, k, v, None, None, None, None, None, None,
             "relu", True, 1e-6, 1.0, False, states))


# (B, H, Hkv, N, D, Dv, causal, cosformer, initial state, states saved): folded (D64 bf16, few
# segments) and scanned states, one segment (B16 H32 N100), decode steps, bidirectional totals, GQA,
# Cosformer; and the last four, causal calls whose state pass is split (SPLIT_CASES).
SAVED_CASES = [(2, 8, 8, 1000, 64, 64, True, False, False, True), (1, 4, 2, 4100, 128, 96, True, False, False, True),
               (2, 4, 4, 3000, 48, 40, True, True, True, True), (1, 2, 1, 300, 64, 64, True, False, False, True),
               (16, 32, 32, 100, 64, 64, True, False, False, False), (1, 4, 2, 1, 64, 64, True, False, True, False),
               (3, 4, 2, 777, 64, 32, False, False, False, True), (2, 4, 4, 2500, 32, 16, False, True, True, True),
               (4, 16, 16, 2048, 64, 64, True, False, False, True), (4, 16, 8, 2000, 64, 48, True, False, False, True),
               (4, 16, 16, 2048, 128, 128, True, False, False, True),
               (4, 32, 8, 2048, 64, 64, True, False, False, True)]
# (B, H, Hkv, N, D, R on a 132-multiprocessor GPU): csrc's state_split at work: R sums per segment
# folded (64 features, GQA) and every R-th scanned state read (128 features, two segments).
SPLIT_CASES = [(4, 16, 16, 2048, 64, 2), (4, 16, 8, 2000, 64, 2), (4, 16, 16, 2048, 128, 2), (4, 32, 8, 2048, 64, 2)]


@pytest.mark.parametrize("case", SPLIT_CASES, ids=[str(i) for i in range(len(SPLIT_CASES))])
def test_split_state_pass_matches_the_driver(case):
    """The op's saved states hold the state pass's G * R sub-segment sums, as
    tests/linear_attn_driver.py (which the interpreter tests run) splits them; the split applies
    where the GPU has the H200's 132 multiprocessors (the accuracy runs in SAVED_CASES)."""
    import linear_attn_driver as drv

    b, h, hkv, n, d, r = case
    q, k, v = make(b, h, hkv, n, d, d, torch.bfloat16)
    st = drv._Setup(q, k, v, "elu+1", True, None, None, None)
    want = torch.ops.neuralops.linear_attn_states_shape(b, h, hkv, n, d, d, torch.bfloat16, "elu+1", True, False,
                                                        q.device.index)
    assert want == [b, hkv, st.g * st.r, st.ep]
    if torch.cuda.get_device_properties(q.device).multi_processor_count == 132:
        assert st.r == r


@pytest.mark.parametrize("case", SAVED_CASES, ids=[str(i) for i in range(len(SAVED_CASES))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_backward_from_saved_forward_states(case, dtype):
    """linear_attn_fwd_train's states, read by linear_attn_bwd, give the gradients of the recomputing
    backward, within the reference's tolerance; their shape is linear_attn_states_shape's. Bitwise
    the same where both compute the states alike: causal calls that return no state (one that does
    scans the last segment's sum too, which rounds the state before it differently, (a + b) - b)."""
    b, h, hkv, n, d, dv, causal, cosformer, with_state, saves = case
    q, k, v = make(b, h, hkv, n, d, dv, dtype, seed=n)
    cos, sin = weights(n) if cosformer else (None, None)
    parts = (2,) if cosformer else ()
    s0 = torch.rand(b, hkv, *parts, d, dv, device="cuda") if with_state else None
    z0 = torch.rand(b, hkv, *parts, d, device="cuda") if with_state else None
    args = (q, k, v, cos, sin, s0, z0, "elu+1", causal, 1e-6, 0.5, with_state)
    out, s, z, states = torch.ops.neuralops.linear_attn_fwd_train(*args)
    plain = torch.ops.neuralops.linear_attn_fwd(*args)
    for name, a, ref in zip(("out", "S", "z"), (out, s, z), plain):
        assert (a is None) == (ref is None), name
        if a is not None:
            assert torch.equal(a, ref), name
    want = torch.ops.neuralops.linear_attn_states_shape(b, h, hkv, n, d, dv, dtype, "elu+1", causal, cosformer,
                                                        q.device.index)
    assert list(states.shape) == want and states.dtype == torch.float32
    assert (states.numel() > 0) == saves
    dout = torch.randn(b, h, n, dv, device="cuda", dtype=dtype)
    bwd_args = (dout, q, k, v, cos, sin, s0, z0, None, None, "elu+1", causal, 1e-6, 0.5, with_state)
    poison_allocator()
    saved = torch.ops.neuralops.linear_attn_bwd(*bwd_args, states)
    recomputed = torch.ops.neuralops.linear_attn_bwd(*bwd_args)
    _, _, ref = reference(q, k, v, "elu+1", causal, cos, sin, 0.5, s0, z0, grad_out=dout)
    for name, a, r, g in zip(("dq", "dk", "dv", "dS0", "dz0"), saved, recomputed, ref[:3] + ref[3:5]):
        if a is None:
            continue
        assert rel_error(a, g) <= TOL[dtype], name
        if causal and not with_state:
            assert torch.equal(a, r), name


def test_saved_forward_states_from_other_inputs_are_refused():
    q, k, v = make(1, 4, 4, 3000, 64, 64, torch.bfloat16)
    states = torch.ops.neuralops.linear_attn_fwd_train(q, k, v, None, None, None, None, "relu", True, 1e-6, 1.0,
                                                      False)[3]
    assert states.numel() > 0
    # The op checks the states' shape (batch, kv heads, segments, state size), not where they came
    # from: a second batch row is refused.
    q2, k2, v2 = make(2, 4, 4, 3000, 64, 64, torch.bfloat16)
    dout = torch.randn_like(q2)
    with pytest.raises(ValueError, match=r"fwd_states must be the fourth output of linear_attn_fwd_train.*got"):
        torch.ops.neuralops.linear_attn_bwd(dout, q2, k2, v2, None, None, None, None, None, None, "relu", True,
                                            1e-6, 1.0, False, states)


def _state_passes(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.name == "la_state_kernel" for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def test_autograd_saves_the_forward_states():
    """The autograd forward keeps the states for its backward: that backward runs one state pass (the
    reverse one) where the seed's bwd, which recomputes the forward's, runs two; same gradients."""
    q, k, v = make(2, 8, 8, 2048, 64, 64, torch.bfloat16)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = la.fwd(*leaves, is_causal=True)
    dout = torch.randn_like(out)
    assert _state_passes(lambda: out.backward(dout)) == 1
    grads = []
    assert _state_passes(lambda: grads.extend(la.bwd(q, k, v, dout, is_causal=True))) == 2
    for name, a, b in zip(("dq", "dk", "dv"), (l.grad for l in leaves), grads):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
def test_double_backward(causal, cosformer):
    """A gradient penalty (create_graph=True): the first derivatives come from the kernels, the
    second from the ATen form of the backward that autograd records; both against float64."""
    q, k, v = make(2, 4, 2, 300, 64, 48, torch.float32)
    cos, sin = weights(300) if cosformer else (None, None)

    def penalty_grads(*tensors):  # CUDA tensors take the kernels, the CPU reference the fallback
        args = [t.detach().requires_grad_() for t in tensors]
        c, s = (None, None) if cos is None else (cos.to(args[0]), sin.to(args[0]))
        out = la.fwd(*args, causal, "elu+1", 1e-6, c, s)
        grads = torch.autograd.grad((out ** 2).sum(), args, create_graph=True)
        return torch.autograd.grad(sum((g ** 2).sum() for g in grads), args)

    got = penalty_grads(q, k, v)
    ref = penalty_grads(*(t.double().cpu() for t in (q, k, v)))
    for name, a, b in zip(("q", "k", "v"), got, ref):
        assert_close(f"second derivative for {name}", a.cpu(), b, torch.float32)


def test_torch_compile_without_graph_breaks():
    torch._dynamo.reset()

    def layer(q, k, v):
        return la.fwd(q, k, v, True, "elu+1", scale=0.5).float().square().mean()

    q, k, v = (t.requires_grad_() for t in make(2, 8, 2, 256, 64, 64, torch.bfloat16))
    assert_compiled_matches_eager(layer, (q, k, v))


def test_segments_do_not_change_results():
    """One batch x head (many segments: the scan) against the same rows inside a large batch (one
    segment per program): the decomposition must not change the result beyond rounding."""
    q, k, v = make(1, 1, 1, 8192, 64, 64, torch.float32)
    alone = la.fwd(q, k, v, True)
    many = la.fwd(q.expand(64, 8, -1, -1).contiguous(), k.expand(64, 1, -1, -1).contiguous(),
                  v.expand(64, 1, -1, -1).contiguous(), True)
    assert rel_error(many[7:8, 5:6], alone) < 1e-5


def test_state_dtype_is_checked():
    q, k, v = make(1, 2, 2, 8, 16, 16, torch.bfloat16)
    s0, z0 = torch.zeros(1, 2, 16, 16, device="cuda", dtype=torch.bfloat16), torch.zeros(1, 2, 16, device="cuda")
    with pytest.raises(TypeError, match="initial_S must be Float"):
        torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, s0, z0, "elu+1", True, 1e-6, 1.0, False)
    out = la.fwd(q, k, v, True, initial_state=(s0, z0))  # the API converts
    assert out.shape == (1, 2, 8, 16) and math.isfinite(out.float().sum().item())


def _cuda_kernels(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_walk_where_it_is_built(d):
    """The causal bf16 forward with one feature part walks in la_fwd_wgmma_kernel on sm_90 (the only
    architecture it is built for) and in la_fwd_kernel elsewhere; Cosformer and fp16 always take
    la_fwd_kernel. Several segments with states folded or scanned, an initial state, the final
    state, GQA, a row count off the chunk and a padded D against float64."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    n, dd = 2 * 4096 + 77, d - 16
    q, k, v = make(1, 4, 2, n, dd, d, torch.bfloat16, phi="relu")
    g = torch.Generator(device="cuda").manual_seed(1)
    s0 = torch.randn(1, 2, dd, d, device="cuda", generator=g)
    z0 = torch.rand(1, 2, dd, device="cuda", generator=g) * 10
    got = {}
    names = _cuda_kernels(lambda: got.update(r=la.fwd(q, k, v, True, "relu", initial_state=(s0, z0), return_state=True,
                                                       scale=0.7)))
    assert ("la_fwd_wgmma_kernel" in names) == hopper and ("la_fwd_kernel" in names) != hopper, names
    out, state = got["r"]
    ref, ref_state, _ = reference(q, k, v, "relu", True, None, None, 0.7, s0=s0, z0=z0)
    assert_close("out", out, ref, torch.bfloat16)
    assert rel_error(state.S, ref_state.S) < 1e-3 and rel_error(state.z, ref_state.z) < 1e-3
    cos, sin = weights(n)
    assert "la_fwd_wgmma_kernel" not in _cuda_kernels(lambda: la.fwd(q, k, v, True, "elu+1", 1e-6, cos, sin))
    assert "la_fwd_wgmma_kernel" not in _cuda_kernels(lambda: la.fwd(q.half(), k.half(), v.half(), True))


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("b,h,hkv,n,d,dv", [(2, 4, 2, 4096 + 77, 240, 256), (1, 3, 1, 200, 256, 72),
                                            (3, 2, 2, 65, 136, 136)])
def test_bidirectional_wgmma_walk_at_256_features(b, h, hkv, n, d, dv, phi):
    """The bidirectional bf16 forward at 256 features with one feature part walks in la_fwd_wgmma_kernel
    on sm_90 (spec.py WGMMA_BIDIR_FWD_TILES) and in la_fwd_kernel elsewhere, as Cosformer, fp16 and
    128 features always do: GQA, padded D, Dv past and inside one tile of 128, N off the chunk,
    against float64 with scale, on a poisoned allocator."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    q, k, v = make(b, h, hkv, n, d, dv, torch.bfloat16, phi=phi)
    poison_allocator()
    got = {}
    names = _cuda_kernels(lambda: got.update(out=la.fwd(q, k, v, False, phi, 1e-6, scale=0.37)))
    assert ("la_fwd_wgmma_kernel" in names) == hopper and ("la_fwd_kernel" in names) != hopper, names
    ref, _, _ = reference(q, k, v, phi, False, None, None, 0.37)
    assert_close("out", got["out"], ref, torch.bfloat16)
    cos, sin = weights(n)
    assert "la_fwd_wgmma_kernel" not in _cuda_kernels(lambda: la.fwd(q, k, v, False, "elu+1", 1e-6, cos, sin))
    assert "la_fwd_wgmma_kernel" not in _cuda_kernels(lambda: la.fwd(q.half(), k.half(), v.half(), False))
    narrow = make(1, 2, 2, 300, 128, 128, torch.bfloat16, phi=phi)
    assert "la_fwd_wgmma_kernel" not in _cuda_kernels(lambda: la.fwd(*narrow, False, phi))


@pytest.mark.parametrize("hkv", [16, 8])
def test_bidirectional_state_pass_of_all_rows(hkv):
    """B4 H16 D256 bidirectional: the state pass's programs (4 tiles x B x Hkv) fill 132
    multiprocessors at Hkv 16, so it sums all rows in one segment that the walks' two segments read
    (csrc's whole_state_pass); at Hkv 8 (128 programs) it sums the two segments and the scan adds
    them. Forward and backward (its stats pass reads the same states) against float64, on a
    poisoned allocator."""
    q, k, v = make(4, 16, hkv, 300, 256, 256, torch.bfloat16)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    poison_allocator()
    out = la.fwd(*leaves, False)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref, _, grads = reference(q, k, v, "elu+1", False, None, None, 1.0, grad_out=grad_out)
    assert_close("out", out, ref, torch.bfloat16)
    for name, leaf, g in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, g, torch.bfloat16)


@pytest.mark.parametrize("n", [128, 129])
def test_wgmma_rows_past_int32(n):
    """The Gluon reverse walks at 128 features copy rows in 32-bit offsets within a head: with q's
    row stride 2^24 elements, 128 rows still fit ((N - 1) * stride + D < 2^31) and the backward runs
    in Gluon, 129 do not and it takes the Triton kernels (the forward, in 64-bit offsets, stays in
    Gluon); forward and backward against float64 either way (4 GiB of q's storage)."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    stride = 1 << 24
    storage = torch.empty((n - 1) * stride + 128, device="cuda", dtype=torch.bfloat16)
    _, k, v = make(1, 1, 1, n, 128, 128, torch.bfloat16, phi="relu")
    q = storage.as_strided((1, 1, n, 128), (n * stride, n * stride, stride, 1))
    q.copy_(torch.randn(1, 1, n, 128, device="cuda", dtype=torch.bfloat16))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    assert leaves[0].stride(2) == stride
    got = {}
    names = _cuda_kernels(lambda: got.update(out=la.fwd(*leaves, True, "relu")))
    assert ("la_fwd_wgmma_kernel" in names) == hopper, names
    grad_out = torch.randn_like(got["out"])
    names = _cuda_kernels(lambda: got["out"].backward(grad_out))
    gluon = hopper and n == 128
    for walk in ("dq", "dk"):  # dk's walk computes dv too
        assert (f"la_bwd_{walk}_wgmma_kernel" in names) == gluon, names
    ref, _, grads = reference(q, k, v, "relu", True, None, None, 1.0, grad_out=grad_out)
    assert_close("out", got["out"], ref, torch.bfloat16)
    for name, leaf, r in zip(("dq", "dk", "dv"), leaves, grads):
        assert_close(name, leaf.grad, r, torch.bfloat16)
    del storage, q, leaves
    torch.cuda.empty_cache()


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("d, dv", [(112, 120), (48, 60)])
def test_wgmma_backward_where_it_is_built(phi, d, dv):
    """At 64 and 128 features and value columns the causal bf16 backward with one feature part walks
    in la_bwd_{dq,dv,dk}_wgmma_kernel on sm_90, in la_bwd_{dq,dv,dk}_kernel elsewhere. dq computes
    the stats (den and dout . out, normalized maps) at both on sm_90 and at 64 elsewhere, where 128
    takes the forward kernel's stats variant; Gluon's dk computes dv at both (no dv pass), Triton's at
    64. Several segments, an
    initial state, the final state's gradient and the initial one's, GQA, N off the chunk, D and Dv
    padded, scale, against float64."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    wide = d > 64
    b, h, hkv, n = 1, 4, 2, 2 * 4096 + 77
    q, k, v = make(b, h, hkv, n, d, dv, torch.bfloat16, phi=phi)
    g = torch.Generator(device="cuda").manual_seed(5)
    s0 = torch.randn(b, hkv, d, dv, device="cuda", generator=g).requires_grad_()
    z0 = (torch.rand(b, hkv, d, device="cuda", generator=g) * 10).requires_grad_()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, st = la.fwd(*leaves, True, phi, 1e-6, initial_state=(s0, z0), scale=0.6, return_state=True)
    grad_out = torch.randn_like(out)
    grad_state = (torch.randn_like(st.S), torch.randn_like(st.z))  # z0 reaches only z under softmax_free
    poison_allocator()
    names = _cuda_kernels(lambda: torch.autograd.backward([out, st.S, st.z], [grad_out, *grad_state]))
    for walk in ("dq", "dk"):
        assert (f"la_bwd_{walk}_wgmma_kernel" in names) == hopper, names
        assert (f"la_bwd_{walk}_kernel" in names) != hopper, names
    assert ("la_bwd_dv_kernel" in names) == (not hopper and wide), names
    assert "la_fwd_wgmma_kernel" not in names, names
    assert ("la_fwd_kernel" in names) == (not hopper and phi != "softmax_free" and wide), names
    ref, _, grads = reference(q, k, v, phi, True, None, None, 0.6, s0, z0, grad_out, grad_state)
    assert_close("out", out, ref, torch.bfloat16)
    for name, leaf, r in zip(("dq", "dk", "dv", "dS0", "dz0"), (*leaves, s0, z0), grads):
        assert_close(name, leaf.grad, r, torch.bfloat16)
