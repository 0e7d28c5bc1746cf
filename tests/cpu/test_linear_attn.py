"""Linear attention on CPU: the fallback against a float64 O(N^2) reference, streaming with states,
the registered ops (their ATen path), autograd, fake tensors, torch.compile and errors."""

import math
import warnings

import pytest
import torch
from torch.library import opcheck

from helpers import assert_compiled_matches_eager, phi_reference
from neuralops.core.suitability import check_triton_suitability
from neuralops.core.triton_kernels import linear_attn as la

PHIS = ["elu+1", "relu", "identity", "softmax_free"]


def reference(q, k, v, phi, causal, cos=None, sin=None, scale=1.0, eps=1e-6, s0=None, z0=None):
    """The plain O(N^2) definition in float64: (out, S_final, z_final) in the API's layouts."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, n, d = q.shape
    hkv = k.shape[1]
    rep = h // hkv
    fq, fk = phi_reference(q, phi), phi_reference(k, phi)
    s = scale * torch.einsum("bhid,bhjd->bhij", fq, fk.repeat_interleave(rep, 1))
    if cos is not None:
        c = cos.double().reshape(-1, 1, n)
        sn = sin.double().reshape(-1, 1, n)
        s = s * (c[..., :, None] * c[..., None, :] + sn[..., :, None] * sn[..., None, :])
    if causal:
        s = s.tril()
    vr = v.repeat_interleave(rep, 1)
    num, den = s @ vr, s.sum(-1)
    kf = fk if cos is None else torch.stack([fk * cos.double().reshape(-1, 1, n, 1), fk * sin.double().reshape(-1, 1, n, 1)], 2)
    s_fin = torch.einsum("bhjd,bhje->bhde", fk, v) if cos is None else torch.einsum("bhpjd,bhje->bhpde", kf, v)
    z_fin = fk.sum(2) if cos is None else kf.sum(3)
    if s0 is not None:
        qf = scale * fq if cos is None else scale * torch.stack(
            [fq * cos.double().reshape(-1, 1, n, 1), fq * sin.double().reshape(-1, 1, n, 1)], 2)
        s0r, z0r = s0.double().repeat_interleave(rep, 1), z0.double().repeat_interleave(rep, 1)
        if cos is None:
            num = num + qf @ s0r
            den = den + (qf * z0r[:, :, None]).sum(-1)
        else:
            num = num + torch.einsum("bhpid,bhpde->bhie", qf, s0r)
            den = den + torch.einsum("bhpid,bhpd->bhi", qf, z0r)
        s_fin, z_fin = s_fin + s0.double(), z_fin + z0.double()
    out = num if phi == "softmax_free" else num / (den + eps)[..., None]
    return out, s_fin, z_fin


def make(b, h, hkv, n, d, dv, dtype=torch.float32, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g).to(dtype) for s in ((b, h, n, d), (b, hkv, n, d), (b, hkv, n, dv)))
    if positive:  # the normalizer of identity features must stay away from zero
        q, k = q.abs() + 0.1, k.abs() + 0.1
    return q, k, v


def weights(n, batch=None, start=0, max_len=None):
    cos, sin = la.cosformer_weights(n, max_len if max_len is not None else n + start, start=start)
    if batch is not None:
        cos, sin = cos.expand(batch, n).clone(), sin.expand(batch, n).clone()
    return cos, sin


def tol(dtype):
    return {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 5e-3}[dtype]


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("b,h,hkv,n,d,dv", [(2, 4, 2, 67, 5, 7), (1, 3, 3, 130, 9, 4)])
def test_fallback_matches_reference(phi, causal, cosformer, b, h, hkv, n, d, dv):
    q, k, v = make(b, h, hkv, n, d, dv, positive=phi == "identity")
    cos, sin = weights(n, batch=b if b > 1 else None) if cosformer else (None, None)
    out, st = la.linear_attn_pytorch_fallback(q, k, v, causal, phi, 1e-6, cos, sin, scale=0.7, return_state=True)
    ref, s_ref, z_ref = reference(q, k, v, phi, causal, cos, sin, scale=0.7)
    assert out.dtype == q.dtype and out.shape == (b, h, n, dv)
    assert rel(out, ref) < 1e-5
    assert rel(st.S, s_ref) < 1e-5 and rel(st.z, z_ref) < 1e-5
    assert st.S.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_fallback_dtypes(dtype):
    q, k, v = make(2, 2, 1, 70, 8, 6, dtype)
    out = la.fwd(q, k, v, is_causal=True)
    ref, _, _ = reference(q, k, v, "elu+1", True)
    assert out.dtype == dtype and rel(out, ref) < tol(dtype)


@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("impl", ["api", "op"])
def test_streaming_equals_one_call(library_loaded, cosformer, impl):
    b, h, hkv, n, d, dv = 2, 4, 2, 150, 6, 5
    q, k, v = make(b, h, hkv, n, d, dv)
    cos, sin = weights(n) if cosformer else (None, None)

    def call(qs, ks, vs, c, s, state):
        if impl == "api":
            return la.fwd(qs, ks, vs, True, "elu+1", 1e-6, c, s, initial_state=state, return_state=True)
        s0, z0 = (None, None) if state is None else state
        out, s_, z_ = torch.ops.neuralops.linear_attn_fwd(qs, ks, vs, c, s, s0, z0, "elu+1", True, 1e-6, 1.0, True)
        return out, la.LinearAttnState(s_, z_)

    full, full_state = call(q, k, v, cos, sin, None)
    state, pieces = None, []
    for a, e in ((0, 1), (1, 64), (64, 101), (101, 150)):  # a decode step, odd pieces
        c = s = None
        if cosformer:
            c, s = la.cosformer_weights(e - a, n, start=a)
        out, state = call(q[:, :, a:e], k[:, :, a:e], v[:, :, a:e], c, s, state)
        pieces.append(out)
    assert rel(torch.cat(pieces, 2), full) < 1e-5
    assert rel(state.S, full_state.S) < 1e-5 and rel(state.z, full_state.z) < 1e-5


def test_bidirectional_initial_state_adds_to_every_row():
    q, k, v = make(1, 2, 2, 40, 4, 3)
    _, st = la.fwd(q, k, v, return_state=True)
    q2, k2, v2 = make(1, 2, 2, 30, 4, 3, seed=1)
    out = la.fwd(q2, k2, v2, initial_state=st)
    ref, _, _ = reference(torch.cat([q2, q2], 2), torch.cat([k, k2], 2), torch.cat([v, v2], 2), "elu+1", False)
    assert rel(out, ref[:, :, 30:]) < 1e-5


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
def test_op_cpu_path_matches_fallback(library_loaded, phi, causal, cosformer):
    b, h, hkv, n, d, dv = 2, 4, 2, 99, 7, 5
    q, k, v = make(b, h, hkv, n, d, dv, torch.float64, positive=phi == "identity")
    cos, sin = weights(n, batch=b) if cosformer else (None, None)
    st = la.LinearAttnState(*(t.double() for t in la.fwd(*make(b, h, hkv, 9, d, dv, torch.float64, True, 3),
                                                         True, phi, 1e-6, *weights(9) if cosformer else (None, None),
                                                         return_state=True)[1]))
    gen = torch.Generator().manual_seed(5)
    dout = torch.randn(b, h, n, dv, generator=gen, dtype=torch.float64)
    ds_fin, dz_fin = (torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in st)
    out, s_fin, z_fin = torch.ops.neuralops.linear_attn_fwd(q, k, v, cos, sin, st.S, st.z, phi, causal, 1e-6, 0.5, True)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, st.S, st.z)]
    ref_out, ref_st = la.linear_attn_pytorch_fallback(*leaves[:3], causal, phi, 1e-6, cos, sin, scale=0.5,
                                                      initial_state=la.LinearAttnState(*leaves[3:]), return_state=True)
    assert rel(out, ref_out) < 1e-10 and rel(s_fin, ref_st.S) < 1e-10 and rel(z_fin, ref_st.z) < 1e-10
    loss = (ref_out * dout).sum() + (ref_st.S * ds_fin).sum() + (ref_st.z * dz_fin).sum()
    grads = torch.autograd.grad(loss, leaves)
    got = torch.ops.neuralops.linear_attn_bwd(dout, q, k, v, cos, sin, st.S, st.z, ds_fin, dz_fin, phi, causal, 1e-6,
                                              0.5, True)
    for name, g, r in zip(("dq", "dk", "dv", "dS0", "dz0"), got, grads):
        assert rel(g, r) < 1e-9, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_op_cpu_path_low_precision(library_loaded, dtype):
    q, k, v = make(1, 2, 1, 45, 6, 4, dtype)
    out, _, _ = torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, None, None, "relu", True, 1e-6, 1.0, False)
    ref, _, _ = reference(q, k, v, "relu", True)
    assert out.dtype == dtype and rel(out, ref) < tol(dtype)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
def test_gradcheck_api(causal, cosformer):
    q, k, v = make(1, 2, 1, 11, 3, 2, torch.float64)
    cos, sin = weights(11) if cosformer else (None, None)
    s0 = torch.rand((1, 1, 2, 3, 2) if cosformer else (1, 1, 3, 2), dtype=torch.float64)
    z0 = torch.rand(s0.shape[:-1], dtype=torch.float64)

    def f(q, k, v, s0, z0):
        out, st = la.fwd(q, k, v, causal, "elu+1", 1e-6, cos, sin, scale=0.9,
                         initial_state=(s0, z0), return_state=True)
        return out, st.S, st.z

    args = [t.requires_grad_() for t in (q, k, v, s0, z0)]
    assert torch.autograd.gradcheck(f, args)


@pytest.mark.parametrize("phi", ["elu+1", "softmax_free"])
def test_gradcheck_op(library_loaded, phi):
    q, k, v = make(1, 4, 2, 70, 3, 2, torch.float64)  # 70 rows: two chunks of the CPU path
    s0 = torch.rand(1, 2, 3, 2, dtype=torch.float64)
    z0 = torch.rand(1, 2, 3, dtype=torch.float64)
    op = torch.ops.neuralops.linear_attn_fwd

    def f(q, k, v, s0, z0):
        return op(q, k, v, None, None, s0, z0, phi, True, 1e-6, 1.0, True)

    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in (q, k, v, s0, z0)])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("state", [False, True])
def test_double_backward_matches_the_fallback(library_loaded, causal, cosformer, state):
    """A gradient penalty through the op (create_graph=True): the backward's own backward. Before it
    had one, PyTorch warned that the kernels' results would be differentiated silently wrong."""
    q, k, v = make(1, 4, 2, 70, 5, 3, torch.float64, seed=3)  # two chunks, GQA
    cos, sin = weights(70) if cosformer else (None, None)
    parts = (2,) if cosformer else ()
    g = torch.Generator().manual_seed(4)
    s0 = torch.randn(1, 2, *parts, 5, 3, generator=g, dtype=torch.float64) if state else None
    z0 = torch.rand(1, 2, *parts, 5, generator=g, dtype=torch.float64) + 1 if state else None
    leaves = [q, k, v] + ([s0, z0] if state else [])

    def penalty_grads(attention):
        args = [t.detach().requires_grad_() for t in leaves]
        out = attention(*args)
        grads = torch.autograd.grad((out ** 2).sum(), args, create_graph=True)
        return torch.autograd.grad(sum((g ** 2).sum() for g in grads), args)

    def op(q, k, v, s0=None, z0=None):
        return torch.ops.neuralops.linear_attn_fwd(q, k, v, cos, sin, s0, z0, "elu+1", causal, 1e-6, 0.7, False)[0]

    def fallback(q, k, v, *state):
        return la.linear_attn_pytorch_fallback(q, k, v, causal, "elu+1", 1e-6, cos, sin, scale=0.7,
                                               initial_state=state or None)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = penalty_grads(op)
    for a, b in zip(got, penalty_grads(fallback)):
        assert rel(a, b) < 1e-12


@pytest.mark.parametrize("n", [70, 9])  # two chunks of the ATen path; at 9 a third derivative too
def test_bwd_op_is_differentiable(library_loaded, n):
    q, k, v = make(1, 2, 1, n, 3, 2, torch.float64)
    grad_out = torch.randn(1, 2, n, 2, dtype=torch.float64)
    s0, z0 = torch.rand(1, 1, 3, 2, dtype=torch.float64), torch.rand(1, 1, 3, dtype=torch.float64) + 1
    op = torch.ops.neuralops.linear_attn_bwd

    def f(grad_out, q, k, v, s0, z0):
        return op(grad_out, q, k, v, None, None, s0, z0, None, None, "relu", True, 1e-6, 1.0, True)

    args = [t.requires_grad_() for t in (grad_out, q, k, v, s0, z0)]
    assert torch.autograd.gradcheck(f, args, fast_mode=n > 9)
    if n == 9:
        assert torch.autograd.gradgradcheck(f, args)


@pytest.mark.parametrize("return_state", [False, True])
def test_opcheck(library_loaded, return_state):
    q, k, v = make(2, 4, 2, 13, 5, 3)
    cos, sin = weights(13)
    s0, z0 = torch.rand(2, 2, 2, 5, 3), torch.rand(2, 2, 2, 5)
    args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), cos, sin, s0.requires_grad_(),
            z0.requires_grad_(), "elu+1", True, 1e-6, 0.5, return_state)
    opcheck(torch.ops.neuralops.linear_attn_fwd.default, args)
    dout = torch.randn(2, 4, 13, 3)
    opcheck(torch.ops.neuralops.linear_attn_bwd.default,
            (dout, q.detach(), k.detach(), v.detach(), cos, sin, s0.detach(), z0.detach(), None, None, "elu+1",
             False, 1e-6, 0.5, True))
    # Inputs that require grad: the backward's own autograd kernel (double backward).
    opcheck(torch.ops.neuralops.linear_attn_bwd.default,
            (dout.requires_grad_(), q, k, v, cos, sin, s0, z0, None, None, "elu+1", True, 1e-6, 0.5, True))


def test_fwd_train_on_cpu(library_loaded):
    """The autograd forward's op: linear_attn_fwd's results and no forward states on the CPU path; the
    backward refuses states that are not [0] there."""
    q, k, v = make(2, 4, 2, 70, 5, 3)
    args = (q, k, v, None, None, None, None, "relu", True, 1e-6, 0.5, True)
    out, s, z, states = torch.ops.neuralops.linear_attn_fwd_train(*args)
    ref = torch.ops.neuralops.linear_attn_fwd(*args)
    for a, b in zip((out, s, z), ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert states.shape == (0,) and states.dtype == torch.float32
    opcheck(torch.ops.neuralops.linear_attn_fwd_train.default, args)
    dout = torch.randn(2, 4, 70, 3)
    bwd_args = (dout, q, k, v, None, None, None, None, None, None, "relu", True, 1e-6, 0.5, False)
    with pytest.raises(ValueError, match=r"fwd_states must be the fourth output of linear_attn_fwd_train"):
        torch.ops.neuralops.linear_attn_bwd(*bwd_args, torch.zeros(2, 2, 3, 32))
    plain = torch.ops.neuralops.linear_attn_bwd(*bwd_args)
    for a, b in zip(torch.ops.neuralops.linear_attn_bwd(*bwd_args, states)[:3], plain[:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_states_shape_errors(library_loaded):
    """linear_attn_states_shape (the fake implementation's source for the saved states' shape): no
    states for empty inputs; the kernels' dtypes and feature maps only, named in the error."""
    op = torch.ops.neuralops.linear_attn_states_shape
    assert op(0, 4, 4, 3000, 64, 64, torch.bfloat16, "relu", True, False, 0) == [0]
    with pytest.raises(TypeError, match=r"take float16, bfloat16 and float32, got Double"):
        op(1, 4, 4, 3000, 64, 64, torch.float64, "relu", True, False, 0)
    with pytest.raises(ValueError, match=r"phi must be"):
        op(1, 4, 4, 3000, 64, 64, torch.bfloat16, "gelu", True, False, 0)


def test_torch_compile_fullgraph(library_loaded):
    torch._dynamo.reset()
    q, k, v = (t.requires_grad_() for t in make(1, 4, 2, 20, 4, 3))

    def f(q, k, v):
        out, st = la.fwd(q, k, v, True, "relu", return_state=True, scale=0.3)
        return out.square().sum() + st.S.sum()

    assert_compiled_matches_eager(f, (q, k, v), backend="aot_eager")


def test_op_under_compile_fullgraph(library_loaded):
    torch._dynamo.reset()
    q, k, v = (t.requires_grad_() for t in make(1, 2, 2, 9, 4, 3))

    def f(q, k, v):
        out, _, _ = torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, None, None, "elu+1", True, 1e-6, 1.0, False)
        return out.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    compiled(q, k, v).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_bwd_api_matches_autograd():
    q, k, v = make(2, 2, 1, 33, 4, 5)
    dout = torch.randn(2, 2, 33, 5)
    dq, dk, dv = la.bwd(q, k, v, dout, is_causal=True, phi="relu")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = la.linear_attn_pytorch_fallback(*leaves, True, "relu")
    ref = torch.autograd.grad(out, leaves, dout)
    for g, r in zip((dq, dk, dv), ref):
        torch.testing.assert_close(g, r)
    assert dk.shape == k.shape and dv.shape == v.shape


def test_cosformer_weights():
    cos, sin = la.cosformer_weights(5, 10)
    torch.testing.assert_close(cos, torch.cos(math.pi * torch.arange(5.0) / 20))
    torch.testing.assert_close(sin, torch.sin(math.pi * torch.arange(5.0) / 20))
    c2, _ = la.cosformer_weights(3, 10, start=2)
    torch.testing.assert_close(c2, cos[2:])
    full, _ = la.cosformer_weights(4)
    torch.testing.assert_close(full, torch.cos(math.pi * torch.arange(4.0) / 8))
    with pytest.raises(ValueError, match="max_len"):
        la.cosformer_weights(5, 3)
    with pytest.raises(TypeError, match="seq_len must be an int, got float"):
        la.cosformer_weights(4.5)
    with pytest.raises(TypeError, match="max_len must be an int, got float"):
        la.cosformer_weights(4, 8.0)


def test_empty_sequence(library_loaded):
    q, k, v = make(1, 2, 2, 0, 4, 3)
    assert la.fwd(q, k, v, is_causal=True).shape == (1, 2, 0, 3)
    out, s, z = torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, None, None, "elu+1", True, 1e-6, 1.0, True)
    assert out.shape == (1, 2, 0, 3) and s.shape == (1, 2, 4, 3) and not s.any()


def test_cpu_tensors_are_not_supported_and_say_why():
    q, k, v = make(1, 2, 2, 4, 8, 8)
    assert not la.is_supported(q, k, v)
    ok, reason = check_triton_suitability(q, "linear_attn", head_dim=8, seq_len=4)
    assert not ok and "CUDA tensors" in reason


def test_limits_name_the_reason():
    assert la._limits(head_dim=256, seq_len=10, value_dim=256) is None
    assert "head_dim up to 256" in la._limits(head_dim=257, seq_len=10)
    assert "value head dim" in la._limits(head_dim=64, value_dim=300)
    for dtype in (torch.bfloat16, torch.float16):  # under Cosformer too: 512 features
        assert la._limits(head_dim=256, cosformer=True, dtype=dtype) is None
    assert la._limits(head_dim=128, cosformer=True, dtype=torch.float32) is None
    assert "under Cosformer the kernels take head_dim up to 128 for torch.float32" in la._limits(
        head_dim=136, cosformer=True, dtype=torch.float32)


@pytest.mark.parametrize("call", ["api", "op", "api_to_op"])
def test_bad_inputs_get_clear_errors(library_loaded, call, monkeypatch):
    q, k, v = make(1, 4, 2, 6, 8, 5)
    if call == "api_to_op":
        # The API's kernel route leaves most checks to the op (on CPU here): the same errors.
        monkeypatch.setattr(la, "kernels_ready", lambda t: True)
        call = "api"

    def run(q=q, k=k, v=v, phi="elu+1", cos=None, sin=None, s0=None, z0=None):
        if call == "api":
            state = None if s0 is None else (s0, z0)
            return la.fwd(q, k, v, True, phi, 1e-6, cos, sin, initial_state=state)
        return torch.ops.neuralops.linear_attn_fwd(q, k, v, cos, sin, s0, z0, phi, True, 1e-6, 1.0, False)

    with pytest.raises(ValueError, match=r"q must be 4-D \[B, H, N, D\]"):
        run(q=q[0])
    with pytest.raises(ValueError, match=r"must be a positive multiple of k's and v's \(3\)"):
        run(k=torch.randn(1, 3, 6, 8), v=torch.randn(1, 3, 6, 5))
    # The op's CPU path divided by the group size H / Hkv: the process died of SIGFPE.
    with pytest.raises(ValueError, match=r"q's heads \(0\) must be a positive multiple of k's and v's \(2\)"):
        run(q=torch.randn(1, 0, 6, 8))
    with pytest.raises(ValueError, match="k must have q's head dim 8, got 7"):
        run(k=torch.randn(1, 2, 6, 7))
    with pytest.raises(ValueError, match=r"q, k and v must have one batch size, got 1, 2 and 2"):
        run(k=torch.randn(2, 2, 6, 8), v=torch.randn(2, 2, 6, 5))
    with pytest.raises(ValueError, match=r"q, k and v must have one sequence length, got 6, 6 and 5"):
        run(v=torch.randn(1, 2, 5, 5))
    with pytest.raises(ValueError, match="k and v must have one number of heads, got 2 and 1"):
        run(v=torch.randn(1, 1, 6, 5))
    with pytest.raises(ValueError, match="head dims must be positive, got D=8 and Dv=0"):
        run(v=torch.randn(1, 2, 6, 0))
    with pytest.raises(TypeError, match="one (floating )?dtype"):
        run(v=v.double())
    with pytest.raises(ValueError, match="phi must be"):
        run(phi="gelu")
    with pytest.raises(ValueError, match="go together"):
        run(cos=torch.ones(6))
    with pytest.raises(ValueError, match=r"cos_weight must have shape \[N\] or \[B, N\]"):
        run(cos=torch.ones(7), sin=torch.ones(7))
    with pytest.raises(ValueError, match=r"initial_(state\.)?S must have shape \(?\[?1, 2, 8, 5"):
        run(s0=torch.zeros(1, 2, 8, 4), z0=torch.zeros(1, 2, 8))


@pytest.mark.parametrize("call", ["api", "op"])
def test_bad_grad_out_gets_clear_errors(library_loaded, call):
    q, k, v = make(1, 4, 2, 6, 8, 5)

    def run(grad_out):
        if call == "api":
            return la.bwd(q, k, v, grad_out, True)
        return torch.ops.neuralops.linear_attn_bwd(grad_out, q, k, v, None, None, None, None, None, None, "elu+1",
                                                   True, 1e-6, 1.0, False)

    with pytest.raises(ValueError, match=r"grad_out must have the output's shape \[B, H, N, Dv\] = \[1, 4, 6, 5\], "
                                         r"got \[1, 4, 6, 8\]"):
        run(torch.randn(1, 4, 6, 8))
    with pytest.raises(TypeError, match="grad_out must be"):
        run(torch.randn(1, 4, 6, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="q is on cpu but grad_out is on meta"):
        run(torch.randn(1, 4, 6, 5, device="meta"))
    if call == "api":
        with pytest.raises(TypeError, match="grad_out must be a torch.Tensor, got NoneType"):
            run(None)


# One tensor on "meta" sends the whole call to the fake implementation, which returned uninitialized
# memory on q's device where it did not check that tensor's device.
@pytest.mark.parametrize("arg", ["cos_weight", "initial_S", "grad_out", "grad_S", "fwd_states"])
def test_op_names_an_argument_on_another_device(library_loaded, arg):
    q, k, v = make(1, 2, 2, 6, 4, 4)
    cos, sin = weights(6)
    s0, z0 = torch.zeros(1, 2, 2, 4, 4), torch.zeros(1, 2, 2, 4)
    a = dict(grad_out=torch.randn(1, 2, 6, 4), cos_weight=cos, initial_S=s0, grad_S=s0, fwd_states=torch.zeros(0))
    a[arg] = a[arg].to("meta")
    name = "initial_(state.)?S" if arg == "initial_S" else arg  # the fake names it initial_state.S
    with pytest.raises(ValueError, match=f"q is on cpu but {name} is on meta"):
        torch.ops.neuralops.linear_attn_bwd(a["grad_out"], q, k, v, a["cos_weight"], sin, a["initial_S"], z0,
                                            a["grad_S"], z0, "elu+1", True, 1e-6, 1.0, True, a["fwd_states"])


def test_api_names_the_argument_that_is_not_a_tensor_or_on_another_device():
    q, k, v = make(1, 2, 2, 3, 4, 4)
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got list"):
        la.fwd(q, k.tolist(), v)
    with pytest.raises(ValueError, match="q is on cpu but v is on meta"):
        la.fwd(q, k, v.to("meta"))


def test_api_rejects_unknown_keywords_and_bad_state():
    q, k, v = make(1, 2, 2, 3, 4, 4)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['block'\\]"):
        la.fwd(q, k, v, block=64)
    with pytest.raises(TypeError, match="initial_state must be"):
        la.fwd(q, k, v, initial_state=torch.zeros(1))
    with pytest.raises(TypeError, match="scale must be a Python number"):
        la.fwd(q, k, v, scale=torch.tensor(1.0))
    for call in (la.fwd, la.linear_attn_pytorch_fallback):
        with pytest.raises(TypeError, match="eps must be a Python number, got str"):
            call(q, k, v, True, "elu+1", "1e-6")


def test_forward_mode_ad_is_refused_by_name(library_loaded):
    """The ops have no forward-mode formulas: a tangent through them came out as zeros (torch.func.jvp)
    or, on CUDA, not at all. The fallback, which the API takes on CPU, supports it."""
    q, k, v = make(1, 2, 2, 5, 4, 3, torch.float64)
    grad_out = torch.randn(1, 2, 5, 3, dtype=torch.float64)

    def fwd(q):
        return torch.ops.neuralops.linear_attn_fwd(q, k, v, None, None, None, None, "elu+1", True, 1e-6, 1.0, False)[0]

    def bwd(grad_out):
        return torch.ops.neuralops.linear_attn_bwd(grad_out, q, k, v, None, None, None, None, None, None, "elu+1",
                                                   True, 1e-6, 1.0, False)[0]

    for f, x in ((fwd, q), (bwd, grad_out)):
        with pytest.raises(NotImplementedError, match="neuralops.linear_attn: forward-mode AD"):
            torch.func.jvp(f, (x,), (torch.ones_like(x),))
        with torch.autograd.forward_ad.dual_level(), \
                pytest.raises(NotImplementedError, match="neuralops.linear_attn: forward-mode AD"):
            f(torch.autograd.forward_ad.make_dual(x, torch.ones_like(x)))
    _, tangent = torch.func.jvp(lambda q: la.fwd(q, k, v, True), (q,), (torch.ones_like(q),))
    assert tangent.abs().sum() > 0
