"""The linear attention Triton kernels themselves, run on CPU tensors by the Triton interpreter
(TRITON_INTERPRET=1, set in conftest.py), launched the way csrc/ops/linear_attn.cpp launches them
(tests/linear_attn_driver.py), on small odd shapes: a representative subset of the modes (the GPU
tests cover all of them). Triton 3.8's interpreter multiplies bf16 bits as integers in tl.dot;
patch_interpreter_bf16_dot makes it widen them first, as the GPU does."""

import math

import pytest
import torch

import linear_attn_driver as drv
from helpers import rel_error
from triton_src.linear_attn import kernels as K
from triton_src.linear_attn import spec

triton = pytest.importorskip("triton")
import interpreter_bounds  # noqa: E402

interpreter_bounds.install()  # every launch below: an access past its tensors raises
drv.patch_interpreter_bf16_dot()

TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-4}


def cosformer(n, start=0, max_len=None):
    i = torch.arange(start, start + n, dtype=torch.float64)
    m = max_len or n
    return torch.cos(math.pi * i / (2 * m)).float(), torch.sin(math.pi * i / (2 * m)).float()


def make(b, h, hkv, n, d, dv, dtype, positive=False, transposed=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, h, n, d), (b, hkv, n, d), (b, hkv, n, dv))
    if transposed:  # [B, N, H, D] storage viewed as [B, H, N, D]
        q, k, v = (torch.randn(s[0], s[2], s[1], s[3], generator=g).to(dtype).transpose(1, 2) for s in shapes)
    else:
        q, k, v = (torch.randn(s, generator=g).to(dtype) for s in shapes)
    if positive:
        q, k = q.abs(), k.abs()
    return q, k, v


CASES = [
    # B, H, Hkv, N, D, Dv, dtype, phi, causal, cos, state, seg_len, transposed
    (1, 4, 2, 150, 16, 16, torch.bfloat16, "elu+1", True, False, True, 64, False),   # GQA, segments, states
    (2, 2, 1, 70, 16, 32, torch.float16, "relu", False, True, False, 64, True),       # bidirectional Cosformer
    (1, 2, 2, 37, 20, 24, torch.bfloat16, "elu+1", True, False, False, None, False),  # padded D, Dv (-inf fill)
    (1, 2, 1, 50, 16, 16, torch.bfloat16, "identity", False, False, False, None, False),
    (1, 2, 1, 40, 16, 16, torch.float32, "softmax_free", True, True, True, 16, False),  # fp32 variant, states
    # Dv over three of the fp32 forward's 16-column tiles: the stats pass's shares of dout . out summed
    (1, 2, 1, 45, 16, 40, torch.float32, "elu+1", True, False, False, 16, False),
    (2, 2, 2, 1, 16, 16, torch.float16, "elu+1", True, False, True, None, False),     # decode step
    # fp32's 128 block: 80 padded features, dq and dk over 128 padded value columns, a state
    (1, 2, 1, 40, 72, 100, torch.float32, "relu", True, False, True, 16, False),
    # the 128 blocks: dq and dk in 32-feature tiles over 80 padded features, a state
    (1, 2, 1, 150, 72, 100, torch.bfloat16, "relu", True, False, True, None, False),
    # three decode rows at the 256 block (Cosformer's 2 x 120 features), GQA, with a state
    (1, 4, 2, 3, 120, 40, torch.bfloat16, "elu+1", True, True, True, None, False),
    # Cosformer at D = 48: the forward chunks by 32 rows, the backward's dq and dk kernels by 64,
    # so segments must hold whole chunks of both (a regression caught on the H200).
    (1, 2, 2, 130, 48, 24, torch.float16, "elu+1", True, True, False, None, False),
    (1, 2, 1, 33, 16, 16, torch.bfloat16, "relu", True, False, False, None, False),  # relu compiled in (FEAT 3)
    # Cosformer above 128 features: the 512 block (2 x 144 padded features), whose forward, stats
    # pass and dv walk one part per launch (spec.walks_by_part), segments and a state; bidirectional there with
    # GQA, transposed inputs and Dv over several of the forward's tiles; then a decode step
    (1, 2, 1, 70, 136, 24, torch.bfloat16, "elu+1", True, True, True, 32, False),
    (1, 4, 2, 45, 130, 40, torch.bfloat16, "relu", False, True, False, 16, True),
    # and in fp16 (tf32 operands), whose 512 block the part walks let it build
    (1, 2, 1, 40, 130, 24, torch.float16, "elu+1", True, True, True, 16, False),
    (1, 2, 1, 33, 136, 20, torch.float16, "softmax_free", False, True, False, None, False),
    (1, 2, 1, 1, 200, 16, torch.bfloat16, "relu", True, True, True, None, False),
]


@pytest.mark.parametrize("b,h,hkv,n,d,dv,dtype,phi,causal,cos,state,seg_len,transposed", CASES)
def test_kernels_forward_and_backward(b, h, hkv, n, d, dv, dtype, phi, causal, cos, state, seg_len, transposed):
    check_against_reference(b, h, hkv, n, d, dv, dtype, phi, causal, cos, state, seg_len, transposed)


def check_against_reference(b, h, hkv, n, d, dv, dtype, phi, causal, cos, state, seg_len=None, transposed=False):
    """The driver's forward and backward (states and their gradients with `state`) against float64."""
    q, k, v = make(b, h, hkv, n, d, dv, dtype, positive=phi == "identity", transposed=transposed)
    w = cosformer(n) if cos else None
    parts = 2 if cos else 1
    g = torch.Generator().manual_seed(1)
    s0 = z0 = ds_fin = dz_fin = None
    if state:
        s0 = torch.randn(b, hkv, parts * d, dv, generator=g)
        z0 = torch.rand(b, hkv, parts * d, generator=g) * 3
        ds_fin = torch.randn(b, hkv, parts * d, dv, generator=g)
        dz_fin = torch.randn(b, hkv, parts * d, generator=g)
    dout = torch.randn(b, h, n, dv, generator=g).to(dtype)
    kw = dict(phi=phi, causal=causal, scale=0.5, cos=w[0] if w else None, sin=w[1] if w else None, s0=s0, z0=z0,
              seg_len=seg_len)
    out, s_fin, z_fin = drv.forward(q, k, v, return_state=True, **kw)
    dq, dk, dv_, ds0, dz0 = drv.backward(dout, q, k, v, ds_fin=ds_fin, dz_fin=dz_fin, state_grad=state, **kw)

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    if state:
        leaves += [s0.double().requires_grad_(), z0.double().requires_grad_()]
    pk = K.PHI_KINDS["identity" if phi == "softmax_free" else phi]
    ref, ref_s, ref_z = K.attention_reference(*leaves[:3], pk, phi != "softmax_free", causal, w, 0.5, 1e-6,
                                              *(leaves[3:] if state else (None, None)))
    loss = (ref * dout.double()).sum()
    if state:
        loss = loss + (ref_s * ds_fin.double()).sum() + (ref_z * dz_fin.double()).sum()
    grads = torch.autograd.grad(loss, leaves)
    tol = TOL[dtype]
    assert out.dtype == dtype and out.shape == (b, h, n, dv)
    results = {"out": (out, ref), "S": (s_fin, ref_s), "z": (z_fin, ref_z), "dq": (dq, grads[0]),
               "dk": (dk, grads[1]), "dv": (dv_, grads[2])}
    if state:
        results.update(dS0=(ds0, grads[3]), dz0=(dz0, grads[4]))
    errors = {name: rel_error(a, r) for name, (a, r) in results.items()}
    assert all(e <= tol for e in errors.values()), errors


# The (dtype, block, FEAT or None) keys that some architecture's tiles override (spec.ARCH_TILES),
# each run with the shared tiles (arch None) and with every overriding architecture's: the
# interpreter has no architecture, so the test sets the one whose tiles the driver reads.
ARCH_TILE_KEYS = sorted({(*key[:2], key[2] if len(key) > 2 else None)
                         for tables in spec.ARCH_TILES.values() for tiles in tables.values() for key in tiles},
                        key=str)
DTYPES = {name: dtype for dtype, name in drv.DTYPE_NAMES.items()}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("arch", [None, *spec.ARCH_TILES])
@pytest.mark.parametrize("dtype,block,feat", ARCH_TILE_KEYS)
def test_every_architectures_tiles(monkeypatch, dtype, block, feat, arch, causal):
    """Each architecture's tiles at the blocks they override, forward and backward, in bounds
    (interpreter_bounds) and against float64: D and Dv off the 16-column grid, N past a 128-row
    chunk, GQA. FEAT 0 is Cosformer's (two parts of D features), any other key a one-part map."""
    monkeypatch.setattr(drv, "device_arch", lambda device: arch)
    phi = "elu+1" if not feat else next(p for p, kind in K.PHI_KINDS.items() if kind + 1 == feat)
    d = (block // 2 if feat == 0 else block) - 8
    check_against_reference(1, 2, 1, 150, d, 130, DTYPES[dtype], phi, causal, feat == 0, False)


@pytest.mark.parametrize("state", [False, True], ids=["folded", "scanned"])
@pytest.mark.parametrize("causal_heads", [(2, 2), (4, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("split,seg_len", [(2, 128), (4, 256)], ids=["r2", "r4"])
def test_split_state_pass(state, causal_heads, split, seg_len):
    """The causal state pass split R ways per segment (csrc's state_split): the walks fold R sums per
    segment before theirs (has_s = 1 + R) or read every R-th scanned state, forward and reverse (at
    R 4, which the op does not choose, 8 sub-segments: two steps of the scan's loop, the first or
    last skipped whole), and give what the unsplit pass gives but for roundings (the sums add in
    another order, and a changed last bit of fp32 flips some bf16 outputs by one bf16 step: a wrong
    state costs far more)."""
    h, hkv = causal_heads
    q, k, v = make(1, h, hkv, 400, 16, 24, torch.bfloat16)
    g = torch.Generator().manual_seed(3)
    s0 = torch.randn(1, hkv, 16, 24, generator=g) if state else None
    z0 = torch.rand(1, hkv, 16, generator=g) * 3 if state else None
    dout = torch.randn(1, h, 400, 24, generator=g).to(torch.bfloat16)
    runs = []
    for r in (1, split):
        kw = dict(phi="elu+1", causal=True, s0=s0, z0=z0, seg_len=seg_len, split=r)
        st = drv._Setup(q, k, v, "elu+1", True, None, None, seg_len, r)
        n_seg = -(-400 // seg_len)
        assert (st.g, st.l, st.r, st.r_rev) == (n_seg, seg_len, r, r)
        fwd = drv.forward(q, k, v, return_state=True, **kw)
        runs.append((*fwd, *drv.backward(dout, q, k, v, state_grad=state, **kw)[:5 if state else 3]))
    for name, whole, parts in zip(("out", "S", "z", "dq", "dk", "dv", "dS0", "dz0"), *runs):
        assert rel_error(parts, whole) <= 1e-3, name


@pytest.mark.parametrize("heads", [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_bidirectional_state_pass_of_all_rows(heads):
    """Where the state pass's programs fill the GPU (csrc's whole_state_pass; here as many
    multiprocessors as kv heads), a bidirectional call's state pass sums all rows in one segment and
    every walk of the six segments reads that total (the other segments' slots stay NaN, which a
    walk reading one would show): the out, dq, dk and dv of the scan over six segment sums, but
    for roundings."""
    h, hkv = heads
    q, k, v = make(1, h, hkv, 330, 16, 24, torch.bfloat16)
    dout = torch.randn(1, h, 330, 24, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    runs = []
    for sms in (132, hkv):
        assert (lambda st: (st.g, st.whole_state))(drv._Setup(q, k, v, "elu+1", False, None, None, 64, sms=sms)) == (
            6, sms == hkv)
        kw = dict(phi="elu+1", causal=False, seg_len=64, sms=sms)
        runs.append((drv.forward(q, k, v, **kw)[0], *drv.backward(dout, q, k, v, **kw)[:3]))
    for name, scanned, whole in zip(("out", "dq", "dk", "dv"), *runs):
        assert rel_error(whole, scanned) <= 1e-3, name


@pytest.mark.parametrize("phi", ["identity", "elu+1", "relu", "softmax_free"])
def test_compiled_feature_map_matches_run_time_one(monkeypatch, phi):
    """FEAT > 0 (the map compiled in, what the op runs without Cosformer) against FEAT 0 (phi and
    the part count read at run time) on the same one-part inputs, every kernel of both passes."""
    q, k, v = make(1, 2, 1, 70, 16, 24, torch.bfloat16, positive=phi == "identity")
    dout = torch.randn(1, 2, 70, 24, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    runs = []
    for feat in (None, 0):
        if feat is not None:
            monkeypatch.setattr(drv, "feature_key", lambda phi_kind, n_parts: feat)
        kw = dict(phi=phi, causal=True, seg_len=32)
        runs.append((drv.forward(q, k, v, **kw)[0], *drv.backward(dout, q, k, v, **kw)[:3]))
    assert drv._Setup(q, k, v, phi, True, None, None, None).feat == 0
    for compiled, generic in zip(*runs):
        assert rel_error(compiled, generic) <= 1e-6


@pytest.mark.parametrize("causal", [True, False])
def test_folded_scan_matches_scan(monkeypatch, causal):
    """Walks that sum the segment sums before them (has_s = 2, few segments) against the scan's
    states, every kernel of both passes, with the final state (causal) from the last walk."""
    q, k, v = make(1, 4, 2, 150, 16, 24, torch.bfloat16)
    dout = torch.randn(1, 4, 150, 24, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    kw = dict(phi="elu+1", causal=causal, seg_len=64)
    st = drv._Setup(q, k, v, "elu+1", causal, None, None, 64)
    assert st.g == 3 and st.folds(None, causal, False) and st.folds(None, False, True)
    runs = []
    for fold_max in (drv.FOLD_MAX_SEGMENTS, 1):
        monkeypatch.setattr(drv, "FOLD_MAX_SEGMENTS", fold_max)
        out, s_fin, z_fin = drv.forward(q, k, v, return_state=causal, **kw)
        runs.append((out, *((s_fin, z_fin) if causal else ()), *drv.backward(dout, q, k, v, **kw)[:3]))
    for folded, scanned in zip(*runs):
        assert rel_error(folded, scanned) <= 1e-3  # fp32 sums in another order, bf16 outputs


@pytest.mark.parametrize("causal,cos,phi,dtype", [(True, False, "elu+1", torch.bfloat16),
                                                  (False, True, "elu+1", torch.bfloat16),
                                                  (True, False, "softmax_free", torch.bfloat16),
                                                  (True, False, "relu", torch.float16)])
def test_fused_backward_against_separate_passes(monkeypatch, causal, cos, phi, dtype):
    """The fused backward kernels (dq computing its rows' den and dout . out, STATS; dk computing dv,
    WITH_DV) against the separate stats and dv passes, with segments and GQA. dv is the same sums.
    dq takes dout . out from its own products, with the state's two halves where the stats pass
    rounds it once as the forward does, so dq and dk differ by roundings: both must be as close to
    float64 as the separate passes' (the first form of this change, with A rounded differently in
    den and dout . out, left the first row's dq uncancelled: 7.9e-3 from the separate passes)."""
    q, k, v = make(1, 4, 2, 150, 16, 24, dtype)
    dout = torch.randn(1, 4, 150, 24, generator=torch.Generator().manual_seed(3)).to(dtype)
    w = cosformer(150) if cos else (None, None)
    kw = dict(phi=phi, causal=causal, seg_len=64, cos=w[0], sin=w[1])
    st = drv._Setup(q, k, v, phi, causal, w[0], w[1], 64)
    assert drv.dq_uses_stats(st) == (phi != "softmax_free")
    assert drv.dk_computes_dv(st) == (dtype == torch.bfloat16)  # fp16: dq only (spec.dq_stats_built)
    fused = drv.backward(dout, q, k, v, **kw)[:3]
    monkeypatch.setattr(drv, "dk_dv_built", lambda key: False)
    monkeypatch.setattr(drv, "dq_stats_built", lambda key: False)
    separate = drv.backward(dout, q, k, v, **kw)[:3]
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    pk = K.PHI_KINDS["identity" if phi == "softmax_free" else phi]
    ref = K.attention_reference(*leaves, pk, phi != "softmax_free", causal, None if w[0] is None else w, 1.0,
                                1e-6)[0]
    grads = torch.autograd.grad((ref * dout.double()).sum(), leaves)
    assert rel_error(fused[2], separate[2]) <= 1e-3  # dv: the same sums, in another order
    for name, a, b, r in zip(("dq", "dk", "dv"), fused, separate, grads):
        assert rel_error(a, r) <= min(TOL[dtype], 1.1 * rel_error(b, r)), name


@pytest.mark.parametrize("d,dv,dtype,cos,stats,with_dv", [
    (64, 64, torch.bfloat16, False, True, True),
    (32, 64, torch.bfloat16, True, True, True),  # Cosformer: 64 features in all
    (64, 64, torch.float16, False, True, False),  # dk with dv: tf32 operands, spilled, slower
    (64, 64, torch.bfloat16, True, False, False),  # 128 features: two dq (and dk) programs per row
    (64, 128, torch.bfloat16, False, False, False),  # dq and dk hold all of Dv: feature tiles of 32
    (64, 64, torch.float32, False, False, False),
])
def test_fused_backward_rule(d, dv, dtype, cos, stats, with_dv):
    """Where the backward runs fused kernels: one dq or dk program must hold all features
    (spec.dq_stats_built, spec.dk_dv_built); dq folds in the stats pass only for normalized maps."""
    q = torch.empty(1, 2, 256, d, dtype=dtype)
    v = torch.empty(1, 2, 256, dv, dtype=dtype)
    w = torch.ones(256) if cos else None
    st = drv._Setup(q, q, v, "elu+1", True, w, w, None)
    assert drv.dq_uses_stats(st) == stats and drv.dk_computes_dv(st) == with_dv
    st = drv._Setup(q, q, v, "softmax_free", True, w, w, None)
    assert not drv.dq_uses_stats(st) and drv.dk_computes_dv(st) == with_dv


@pytest.mark.parametrize("d,dv,dtype,fwd,bwd", [
    (64, 64, torch.bfloat16, True, True),
    (64, 128, torch.bfloat16, True, False),  # dq holds all 128 value columns
    (128, 128, torch.bfloat16, False, False),  # built without: it cost the 128-feature kernels 3-5%
    (64, 64, torch.float32, True, True),  # fp32's own 64 block (16-row chunks, 64-column tiles)
    (128, 128, torch.float32, False, False),
])
def test_fold_rule(d, dv, dtype, fwd, bwd):
    """Which variants fold the scan into their walks (kernels.FOLD_MAX_BLOCK), and that they do so
    only for a few segments (3 or 4 here) without an initial state."""
    q = torch.empty(4, 16, 4096, d, dtype=dtype)
    v = torch.empty(4, 16, 4096, dv, dtype=dtype)
    st = drv._Setup(q, q, v, "elu+1", True, None, None, None)
    assert 1 < st.g <= drv.FOLD_MAX_SEGMENTS and (st.fold_fwd, st.fold_bwd) == (fwd, bwd)
    assert st.folds(None, True, False) == fwd and st.folds(None, False, True) == bwd
    assert not st.folds(torch.empty(0), False, False)


@pytest.mark.parametrize("b,h,n,d,causal,g,seg_rows", [
    (4, 16, 2048, 128, True, 2, 1024),  # causal segments of at least 1024 rows
    (4, 16, 4096, 64, True, 4, 1024),
    (4, 16, 2048, 64, True, 4, 512),  # but one wave at two programs per SM at 64 features
    (1, 16, 65536, 128, True, 32, 2048),  # about 4 programs per SM
    (4, 16, 4096, 64, False, 8, 512),  # bidirectional: at least 8 rows per feature
    (4, 16, 4096, 128, False, 4, 1024),
    (1, 16, 65536, 128, False, 16, 4096),  # one wave of two per SM where a program holds all of Dv
])
def test_segment_rule(b, h, n, d, causal, g, seg_rows):
    """The segment counts the H200 sweeps measured best (benchmarks/results/linear_attn.md, eighth
    and tenth sessions), as the driver computes them like csrc's segment_count (132 multiprocessors here)."""
    q = torch.empty(b, h, n, d, dtype=torch.bfloat16)
    st = drv._Setup(q, q, q, "elu+1", causal, None, None, None)
    assert (st.g, st.l) == (g, seg_rows)


@pytest.mark.parametrize("b,h,n,g,whole", [(4, 16, 4096, 2, True), (1, 16, 65536, 8, False)])
def test_segment_rule_at_256_features_on_sm90(monkeypatch, b, h, n, g, whole):
    """sm_90's bidirectional forward at 256 features (the Gluon walk) holds all 256 value columns in
    8 warps, one program per multiprocessor: one wave of them, so two segments at B4 H16, whose state
    pass (2 x 2 tiles a head: 256 programs) sums all rows in one (whole_state_pass: no scan). At B1
    (64 programs) the segments keep their own sums and the scan."""
    monkeypatch.setattr(drv, "device_arch", lambda device: 90)
    q = torch.empty(b, h, n, 256, dtype=torch.bfloat16)
    st = drv._Setup(q, q, q, "elu+1", False, None, None, None)
    assert (st.fwd[1], st.nt) == (256, 1)
    assert (st.g, st.whole_state) == (g, whole)


@pytest.mark.parametrize("cos", [False, True])
def test_state_kernel_matches_reference(cos):
    b, hkv, n, d, dv = 2, 2, 100, 16, 20
    k, v = torch.randn(b, hkv, n, d), torch.randn(b, hkv, n, dv)
    w = (torch.rand(b, n), torch.rand(b, n)) if cos else None
    st = drv._Setup(k.repeat(1, 2, 1, 1), k, v, "elu+1", False, *(w or (None, None)), 64)
    parts = 2 if cos else 1
    x = torch.full((b, hkv, st.g, st.ep), float("nan"))
    st.state_sums(x)
    ref_s, ref_z = K.state_reference(k, v, 1, w, st.l)
    f = parts * d
    assert rel_error(x[..., : f * dv].reshape(b, hkv, st.g, f, dv), ref_s) < 1e-4
    assert rel_error(x[..., f * dv: f * dv + f], ref_z) < 1e-6


@pytest.mark.parametrize("cos", [False, True])
def test_state_kernel_grads_mode_matches_reference(cos):
    """GRADS mode: per query head and segment, (sum qf^T dout / den, sum qf (-dl) / den)."""
    b, h, n, d, dv, scale = 2, 4, 100, 16, 20, 0.5
    g = torch.Generator().manual_seed(3)
    q, k, do = torch.randn(b, h, n, d, generator=g), torch.randn(b, 2, n, d, generator=g), torch.randn(b, h, n, dv, generator=g)
    v = torch.randn(b, 2, n, dv, generator=g)
    den, dl = torch.rand(b, h, n, generator=g) + 0.5, torch.randn(b, h, n, generator=g)
    w = (torch.rand(b, n, generator=g), torch.rand(b, n, generator=g)) if cos else None
    st = drv._Setup(q, k, v, "elu+1", True, *(w or (None, None)), 64)
    x = torch.full((b, h, st.g, st.ep), float("nan"))
    st.state_sums(x, drv._padded(do, st.dvp, 0.0), den, dl, scale)  # grad_out as the op pads it, to Dv 32
    qf = K.features_reference(q, 1, w, scale) / den.double()[..., None]
    f = qf.shape[-1]
    ref_s = torch.stack([torch.einsum("bhnf,bhne->bhfe", qf[:, :, a:a + st.l], do.double()[:, :, a:a + st.l])
                         for a in range(0, n, st.l)], 2)
    ref_z = torch.stack([(qf * -dl.double()[..., None])[:, :, a:a + st.l].sum(2) for a in range(0, n, st.l)], 2)
    assert rel_error(x[..., : f * dv].reshape(b, h, st.g, f, dv), ref_s) < 1e-4
    assert rel_error(x[..., f * dv: f * dv + f], ref_z) < 1e-5


@pytest.mark.parametrize("grads", [False, True], ids=["forward", "grads"])
@pytest.mark.parametrize("d,cos", [(72, False), (40, True)], ids=["one part", "cosformer"])
def test_state_kernel_in_feature_tiles(d, cos, grads):
    """A state tile narrower than the block (spec.state_feature_tile): 32 features of the 128 block
    per program (three tiles over 80 padded features, the last part padding; under Cosformer 16 of
    each part), the sums and z as with the whole block."""
    b, h, hkv, n, dv = 1, 2, 1, 70, 24
    q, k, v = make(b, h, hkv, n, d, dv, torch.bfloat16)
    w = cosformer(n) if cos else (None, None)
    args = ()
    if grads:  # grad_out (padded as the op pads it), den, dl
        args = (drv._padded(torch.randn(b, h, n, dv).to(torch.bfloat16), 32, 0.0), torch.rand(b, h, n) + 0.5,
                torch.randn(b, h, n))
    heads = h if grads else hkv
    sums = []
    for tile, feature_tile in ((spec.tile_of("STATE_TILES", None, "bf16", 128, 0), 128), ((32, 32, 4, 2, 32), 32)):
        with spec.tile_replaced("STATE_TILES", ("bf16", 128), tile):
            st = drv._Setup(q, k, v, "elu+1", True, *w, 32)
            assert (st.bk, st.state_bf) == (128, feature_tile)
            x = torch.full((b, heads, st.g, st.ep), float("nan"))
            st.state_sums(x, *args)
            sums.append(x[..., :st.e])
    assert st.state[3] == 3, "one Dv tile x three feature tiles"
    assert not sums[1].isnan().any()
    assert rel_error(sums[1], sums[0]) < 1e-6


@pytest.mark.parametrize("grads", [False, True])
def test_state_kernel_walks_only_its_segments(grads):
    """g_first and n_walk: the segments outside them stay unwritten (the causal calls' left-out end
    segment), those inside match the full pass."""
    q, k, v = make(1, 2, 2, 200, 16, 16, torch.bfloat16)
    st = drv._Setup(q, k, v, "elu+1", True, None, None, 64)
    assert st.g == 4
    args = ()
    if grads:  # grad_out, den, dl
        args = (torch.randn(1, 2, 200, 16).to(torch.bfloat16), torch.rand(1, 2, 200) + 0.5, torch.randn(1, 2, 200))
    full = torch.full((1, 2, st.g, st.ep), float("nan"))
    st.state_sums(full, *args)
    part = torch.full_like(full, float("nan"))
    st.state_sums(part, *args, g_first=1, n_walk=2)
    assert part[:, :, [0, 3]].isnan().all()
    assert torch.equal(part[:, :, 1:3], full[:, :, 1:3])


@pytest.mark.parametrize("mode,n_grp", [(0, 1), (1, 2), (2, 2), (2, 1)])
def test_scan_kernel_matches_reference(mode, n_grp):
    b, hy, g, fd, f = 2, 2, 37, 300, 20  # G over whole GB blocks (spec.SCAN_CONSTEXPRS) plus a partial one
    e = fd + f
    ep = drv.pad16(e)
    x = torch.randn(b, hy * n_grp, g, ep)
    init_s, init_z = torch.randn(b, hy, fd), torch.randn(b, hy, f)
    y = torch.full((b, hy, 1 if mode == 2 else g, ep), float("nan"))
    tot_s, tot_z = torch.empty(b, hy, fd), torch.empty(b, hy, f)
    drv._launch_scan(x, y, b * hy, g, fd, e, ep, y.shape[2] * ep, n_grp, mode, init_s, init_z, tot_s, tot_z, None)
    init = torch.cat([init_s, init_z], -1)
    ref = K.scan_reference(x[..., :e], init, mode, n_grp)
    torch.testing.assert_close(y[..., :e].double(), ref, rtol=1e-5, atol=1e-4)
    total = K.scan_reference(x[..., :e], init, 2, n_grp)[:, :, 0]
    torch.testing.assert_close(torch.cat([tot_s, tot_z], -1).double(), total, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode,n_grp", [(0, 1), (1, 2)])
def test_scan_without_total_reads_no_far_end_segment(mode, n_grp):
    """Modes 0 and 1 without a total leave out the segment no y needs (G - 1, 0), which the state
    pass leaves unwritten in causal calls: NaN there changes nothing."""
    b, hy, g, fd, f = 1, 2, 6, 40, 8
    e = fd + f
    ep = drv.pad16(e)
    x = torch.randn(b, hy * n_grp, g, ep)
    far = g - 1 if mode == 0 else 0
    ref = K.scan_reference(x[..., :e], None, mode, n_grp)
    x[:, :, far] = float("nan")
    y = torch.full((b, hy, g, ep), float("nan"))
    drv._launch_scan(x, y, b * hy, g, fd, e, ep, g * ep, n_grp, mode, None, None, None, None, torch.zeros(1))
    torch.testing.assert_close(y[..., :e].double(), ref, rtol=1e-5, atol=1e-4)


def test_streaming_through_the_kernels():
    q, k, v = make(1, 2, 1, 90, 16, 16, torch.float16)
    full, s_full, z_full = drv.forward(q, k, v, causal=True, return_state=True)
    s = z = None
    pieces = []
    for a, e in ((0, 33), (33, 34), (34, 90)):
        out, s, z = drv.forward(q[:, :, a:e], k[:, :, a:e], v[:, :, a:e], causal=True, s0=s, z0=z, return_state=True)
        pieces.append(out)
    assert rel_error(torch.cat(pieces, 2), full) < 2e-3
    assert rel_error(s, s_full) < 1e-5 and rel_error(z, z_full) < 1e-5


@pytest.mark.parametrize("n,dtype,phi,cos,hkv", [(1, torch.bfloat16, "elu+1", False, 2), (3, torch.float32, "relu", True, 1),
                                                 (4, torch.float16, "softmax_free", False, 4)])
def test_decode_kernel_continues_a_state(n, dtype, phi, cos, hkv):
    """A few causal rows after a state go through la_decode_kernel (one program per kv head and Dv
    tile): outputs and the new state against the float64 reference of the whole sequence."""
    b, h, d, dv, prefix = 2, 4, 24, 40, 50
    assert n <= drv.DECODE_MAX_ROWS
    q, k, v = make(b, h, hkv, prefix + n, d, dv, dtype, seed=3)
    w = cosformer(prefix + n, max_len=prefix + n + 10) if cos else None
    kw = dict(phi=phi, causal=True, scale=0.5)
    _, s0, z0 = drv.forward(q[:, :, :prefix], k[:, :, :prefix], v[:, :, :prefix], return_state=True,
                            cos=w[0][:prefix] if w else None, sin=w[1][:prefix] if w else None, **kw)
    out, s1, z1 = drv.forward(q[:, :, prefix:], k[:, :, prefix:], v[:, :, prefix:], s0=s0, z0=z0, return_state=True,
                              cos=w[0][prefix:] if w else None, sin=w[1][prefix:] if w else None, **kw)
    pk = K.PHI_KINDS["identity" if phi == "softmax_free" else phi]
    ref, ref_s, ref_z = K.attention_reference(q, k, v, pk, phi != "softmax_free", True, w, 0.5, 1e-6)
    assert rel_error(out, ref[:, :, prefix:]) < TOL[dtype]
    assert rel_error(s1, ref_s) < TOL[dtype] and rel_error(z1, ref_z) < TOL[dtype]
