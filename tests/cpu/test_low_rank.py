"""Low-rank projection on CPU: the fallbacks, the registered ops (their ATen path), autograd, fake
tensors, torch.compile, errors, and the nn layer with its SVD and model-rewriting helpers."""

import re

import pytest
import torch
from torch import nn
from torch.library import opcheck
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import assert_compiled_matches_eager, rel_error
from neuralops.core.suitability import check_triton_suitability
from neuralops.core.triton_kernels import low_rank
from neuralops.nn import LowRankLinear, replace_linear_with_low_rank

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}
op = torch.ops.neuralops


@pytest.fixture(autouse=True)
def _seeded():
    """Fixed inputs: a 1 x 1 x 1 product plus bias in float16 can cancel to near zero, where no
    rounding stays within a relative bound (unseeded, such a draw failed a local run)."""
    torch.manual_seed(0)


def make(lead, k, r, n, dtype=torch.float32, bias=True, requires_grad=False):
    x = torch.randn(*lead, k, dtype=torch.float64)
    V = torch.randn(r, k, dtype=torch.float64) / k**0.5
    U = torch.randn(n, r, dtype=torch.float64) / r**0.5
    b = torch.randn(n, dtype=torch.float64) if bias else None
    out = [t.to(dtype).requires_grad_(requires_grad) if t is not None else None for t in (x, U, V, b)]
    return out


def reference(x, U, V, b):
    """Exact math in float64, one element at a time along the rank."""
    x64, U64, V64 = x.double(), U.double(), V.double()
    y = torch.zeros(*x.shape[:-1], U.shape[0], dtype=torch.float64)
    for j in range(V.shape[0]):
        y += (x64 * V64[j]).sum(-1, keepdim=True) * U64[:, j]
    return y + (b.double() if b is not None else 0)


SHAPES = [((5,), 8, 4, 6), ((2, 3), 17, 5, 9), ((1,), 1, 1, 1), ((), 12, 3, 7), ((3, 2, 2), 16, 16, 32)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,k,r,n", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_fallback_and_op_match_float64(dtype, lead, k, r, n, bias, library_loaded):
    x, U, V, b = make(lead, k, r, n, dtype, bias)
    ref = reference(x, U, V, b)
    for y in (low_rank.fwd(x, U, V, b), low_rank.low_rank_pytorch_fallback(x, U, V, b),
              op.low_rank_fwd(x, U, V, b), op.low_rank_fwd_hidden(x, U, V, b)[0]):
        assert y.shape == tuple(lead) + (n,) and y.dtype == dtype
        assert rel_error(y, ref) <= TOL[dtype]
    h = op.low_rank_fwd_hidden(x, U, V, b)[1]
    assert h.shape == tuple(lead) + (r,)
    assert rel_error(h, x.double() @ V.double().T) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_bwd_matches_autograd_of_two_linears(dtype, bias, library_loaded):
    x, U, V, b = make((2, 5), 12, 4, 7, torch.float64, bias, requires_grad=True)
    g = torch.randn(2, 5, 7, dtype=torch.float64)
    params = [t for t in (x, U, V, b) if t is not None]
    want = torch.autograd.grad(low_rank.low_rank_pytorch_fallback(x, U, V, b), params, g)
    cast = [t.detach().to(dtype) if t is not None else None for t in (x, U, V, b)]
    for got in (low_rank.bwd(*cast[:3], g.to(dtype), cast[3]),
                low_rank.low_rank_bwd_pytorch_fallback(*cast[:3], g.to(dtype), cast[3]),
                op.low_rank_bwd(*cast[:3], g.to(dtype), None, bias),
                op.low_rank_bwd(*cast[:3], g.to(dtype), (cast[0] @ cast[2].T), bias)):
        assert (got[3] is None) == (not bias)
        for a, w in zip([t for t in got if t is not None], want):
            assert a.shape == w.shape and a.dtype == dtype
            assert rel_error(a, w) <= TOL[dtype]


def test_non_contiguous_inputs(library_loaded):
    x_strided = torch.randn(4, 6, 20)[..., ::2]        # strided last dim
    x_transposed = torch.randn(6, 4, 10).transpose(0, 1)  # leading dims that do not collapse
    U = torch.randn(3, 5).T                            # [5, 3], strided last dim
    V = torch.randn(3, 20)[:, ::2]                     # [3, 10], strided last dim
    for x in (x_strided, x_transposed):
        y = op.low_rank_fwd(x, U, V, None)
        assert y.is_contiguous()
        torch.testing.assert_close(y, (x @ V.T) @ U.T)


def test_api_gradients_float64():
    x, U, V, b = make((2, 3), 6, 3, 5, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: low_rank.fwd(*a), (x, U, V, b))


@pytest.mark.parametrize("name", ["low_rank_fwd", "low_rank_fwd_hidden"])
def test_op_gradients_and_double_backward(library_loaded, name):
    x, U, V, b = make((2, 3), 6, 3, 5, torch.float64, requires_grad=True)
    f = getattr(op, name)
    assert torch.autograd.gradcheck(lambda *a: f(*a), (x, U, V, b))
    assert torch.autograd.gradgradcheck(lambda *a: f(*a), (x, U, V, b))
    assert torch.autograd.gradcheck(lambda *a: f(*a), (x, U, V, None))


@pytest.mark.parametrize("with_hidden", [True, False])
def test_bwd_op_gradients(library_loaded, with_hidden):
    x, U, V, _ = make((4,), 6, 3, 5, torch.float64, requires_grad=True)
    g = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    h = (x @ V.T).detach().requires_grad_() if with_hidden else None
    inputs = (x, U, V, g) + ((h,) if with_hidden else ())

    def f(x, U, V, g, h=None):
        return [t for t in op.low_rank_bwd(x, U, V, g, h, True) if t is not None]

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(library_loaded, dtype):
    x, U, V, b = make((2, 3), 8, 4, 6, dtype, requires_grad=True)
    opcheck(op.low_rank_fwd.default, (x, U, V, b))
    opcheck(op.low_rank_fwd.default, (x, U, V, None), {"backend": "cublas"})
    opcheck(op.low_rank_fwd_hidden.default, (x, U, V, b), {"backend": "triton"})
    g = torch.randn(2, 3, 6, dtype=dtype, requires_grad=True)
    h = (x @ V.T).detach().requires_grad_()
    opcheck(op.low_rank_bwd.default, (x, U, V, g, None, True))
    opcheck(op.low_rank_bwd.default, (x, U, V, g, h, False))


def test_torch_compile_fullgraph_forward_and_backward(library_loaded):
    torch._dynamo.reset()
    x, U, V, b = make((2, 5), 8, 4, 6, torch.float32, requires_grad=True)

    def f(x, U, V, b):
        return (low_rank.fwd(x, U, V, b) * 2).square().sum()

    assert_compiled_matches_eager(f, (x, U, V, b), backend="aot_eager")


def test_ops_under_compile_fullgraph(library_loaded):
    torch._dynamo.reset()
    x, U, V, b = make((3,), 8, 4, 6, torch.float32, requires_grad=True)

    def f(x, U, V, b):
        y, h = op.low_rank_fwd_hidden(x, U, V, b, backend="triton")
        return y.sum() + h.square().sum()

    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x, U, V, b)
    out.backward()
    grads = [t.grad.clone() for t in (x, U, V, b)]
    for t in (x, U, V, b):
        t.grad = None
    f(x, U, V, b).backward()
    for a, t in zip(grads, (x, U, V, b)):
        torch.testing.assert_close(a, t.grad)


class RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.name())
        return func(*args, **(kwargs or {}))


def test_api_keeps_hidden_only_when_grad_is_needed(library_loaded, monkeypatch):
    monkeypatch.setattr(low_rank, "kernels_ready", lambda t: True)  # the op path, on CPU
    x, U, V, b = make((3,), 8, 4, 6)
    with RecordOps() as rec:
        low_rank.fwd(x, U, V, b)
    assert "neuralops::low_rank_fwd" in rec.names and "neuralops::low_rank_fwd_hidden" not in rec.names
    U.requires_grad_()
    with RecordOps() as rec:
        y = low_rank.fwd(x, U, V, b)
    assert "neuralops::low_rank_fwd_hidden" in rec.names
    (dU,) = torch.autograd.grad(y, U, torch.ones_like(y))
    torch.testing.assert_close(dU, torch.ones(3, 6).T @ (x @ V.T))
    with torch.no_grad(), RecordOps() as rec:
        low_rank.fwd(x, U, V, b)
    assert "neuralops::low_rank_fwd_hidden" not in rec.names


@pytest.mark.parametrize("call,error,match", [
    (lambda x, U, V, b: low_rank.fwd(x, U, V.T, b), ValueError,
     r"V must have shape \[rank, in_features\] with in_features = x.shape\[-1\] = 8, got shape \(8, 4\)"),
    (lambda x, U, V, b: low_rank.fwd(x, U.T, V, b), ValueError,
     r"U must have shape \[out_features, rank\] with rank = V.shape\[0\] = 4, got shape \(4, 6\)"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V, b[:-1]), ValueError, r"bias must have shape \[out_features\] = \[6\]"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V[None], b), ValueError, r"V must be 2-D \[rank, in_features\]"),
    (lambda x, U, V, b: low_rank.fwd(x[0, 0, 0], U, V, b), ValueError, "got a 0-d tensor"),
    (lambda x, U, V, b: low_rank.fwd(x, U.double(), V, b), TypeError,
     "U has dtype torch.float64 but x has dtype torch.float32"),
    (lambda x, U, V, b: low_rank.fwd(x.long(), U, V, b), TypeError, "x must be a floating-point tensor"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V, b, backend="cudnn"), ValueError, 'backend must be "auto"'),
    (lambda x, U, V, b: low_rank.fwd(x, U, V, b, block=64), TypeError, "unexpected keyword arguments"),
    (lambda x, U, V, b: low_rank.fwd(x.numpy(), U, V, b), TypeError, "x must be a torch.Tensor"),
    (lambda x, U, V, b: low_rank.bwd(x, U, V, x, b), ValueError,
     r"grad_out must have shape \[..., out_features\] = \(2, 3, 6\)"),
    (lambda x, U, V, b: op.low_rank_fwd(x, U, V.T, b), ValueError,
     r"V must have shape \[rank, in_features\] with in_features = x.shape\[-1\] = 8, got shape \[8, 4\]"),
    (lambda x, U, V, b: op.low_rank_fwd(x, U, V, b.half()), TypeError, "bias has dtype Half but x has dtype Float"),
    (lambda x, U, V, b: op.low_rank_fwd(x, U, V, b, backend="x"), ValueError, 'backend must be "auto"'),
    (lambda x, U, V, b: op.low_rank_bwd(x, U, V, x, None, False), ValueError,
     r"grad_out must have shape \[..., out_features\] = \[2, 3, 6\]"),
    (lambda x, U, V, b: op.low_rank_bwd(x, U, V, x[..., :6], x, False), ValueError,
     r"hidden must have shape \[..., rank\] = \[2, 3, 4\]"),
    # A tensor on "meta" sends the call to the fake implementation, which returned uninitialized memory
    # where it did not check hidden.
    (lambda x, U, V, b: op.low_rank_bwd(x, U, V, x[..., :6], x[..., :4].to("meta"), False), ValueError,
     "x is on cpu but hidden is on meta"),
])
def test_bad_inputs_get_clear_errors(library_loaded, call, error, match):
    x, U, V, b = make((2, 3), 8, 4, 6)
    with pytest.raises(error, match=match):
        call(x, U, V, b)


@pytest.mark.parametrize("call,error,match", [
    (lambda x, U, V, b: low_rank.fwd(x, U, V.T, b), ValueError, r"V must have shape \[rank, in_features\]"),
    (lambda x, U, V, b: low_rank.fwd(x, U.T, V, b), ValueError, r"U must have shape \[out_features, rank\]"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V, b[:-1]), ValueError, r"bias must have shape \[out_features\] = \[6\]"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V[None], b), ValueError, r"V must be 2-D \[rank, in_features\]"),
    (lambda x, U, V, b: low_rank.fwd(x[0, 0, 0], U, V, b), ValueError, "got a 0-d tensor"),
    (lambda x, U, V, b: low_rank.fwd(x, U.double(), V, b), TypeError, "U has dtype"),
    (lambda x, U, V, b: low_rank.fwd(x, U, V, b.numpy()), TypeError, "bias must be a torch.Tensor"),
])
def test_bad_inputs_on_the_kernel_route_get_clear_errors(library_loaded, monkeypatch, call, error, match):
    # fwd's kernel route leaves these checks to the op (on CPU here).
    monkeypatch.setattr(low_rank, "kernels_ready", lambda t: True)
    x, U, V, b = make((2, 3), 8, 4, 6)
    with pytest.raises(error, match=match):
        call(x, U, V, b)


def test_empty_inputs(library_loaded):
    x, U, V, b = make((0, 3), 8, 4, 6)
    assert low_rank.fwd(x, U, V, b).shape == (0, 3, 6)
    assert op.low_rank_fwd(x, U, V, b).shape == (0, 3, 6)
    dx, dU, dV, db = op.low_rank_bwd(x, U, V, torch.zeros(0, 3, 6), None, True)
    assert dx.shape == x.shape and not dU.any() and not dV.any() and not db.any()
    x, U, V, b = make((2,), 0, 4, 6)   # in_features = 0: y is the bias
    torch.testing.assert_close(op.low_rank_fwd(x, U, V, b), b.expand(2, 6))


def test_cpu_is_not_supported_and_route_says_so(library_loaded):
    x, U, V, b = make((2,), 8, 4, 6)
    assert not low_rank.is_supported(x, U, V, b)
    assert low_rank.route(x, U, V, b) == "pytorch_fallback"
    assert op.low_rank_route(x, U, V, b) == "aten_cpu"
    ok, reason = check_triton_suitability(x, "low_rank")
    assert not ok and "CUDA tensors" in reason


def test_size_limits():
    assert low_rank._limits(rows=2**31) is not None and "rows=2147483648" in low_rank._limits(rows=2**31)
    assert low_rank._limits(rows=2**31 - 1, in_features=4096, rank=256, out_features=4096) is None


# ---- nn ---------------------------------------------------------------------------------------

def test_low_rank_linear_forward_and_init():
    torch.manual_seed(0)
    layer = LowRankLinear(256, 128, 32)
    assert layer.U.shape == (128, 32) and layer.V.shape == (32, 256) and layer.bias.shape == (128,)
    x = torch.randn(4, 7, 256)
    torch.testing.assert_close(layer(x), (x @ layer.V.T) @ layer.U.T + layer.bias)
    # The product's entries have nn.Linear's weight variance, 1 / (3 * in).
    var = (layer.U @ layer.V).var().item()
    assert 0.7 / (3 * 256) < var < 1.3 / (3 * 256)
    assert LowRankLinear(4, 3, 2, bias=False).bias is None
    assert "rank=32" in repr(layer)
    with pytest.raises(ValueError, match="rank must be a positive int"):
        LowRankLinear(4, 3, 0)


def test_from_linear_is_the_truncated_svd():
    torch.manual_seed(0)
    linear = nn.Linear(40, 24)
    s = torch.linalg.svdvals(linear.weight.detach())
    for rank in (1, 7, 24):
        layer = LowRankLinear.from_linear(linear, rank)
        w = layer.U.detach() @ layer.V.detach()
        expected = (s[rank:].square().sum().sqrt() / s.square().sum().sqrt()).item()
        assert rel_error(w, linear.weight) == pytest.approx(expected, abs=1e-5)
        # sqrt(S) on both sides: the factors have equal column / row norms.
        torch.testing.assert_close(layer.U.norm(dim=0), layer.V.norm(dim=1), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(layer.bias, linear.bias)
    x = torch.randn(3, 40)
    torch.testing.assert_close(LowRankLinear.from_linear(linear, 24)(x), linear(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"rank must be an int in \[1, min\(in_features, out_features\)\] = \[1, 24\]"):
        LowRankLinear.from_linear(linear, 25)
    with pytest.raises(TypeError, match="expected an nn.Linear"):
        LowRankLinear.from_linear(nn.Conv1d(2, 2, 1), 1)
    half = nn.Linear(16, 16, bias=False).to(torch.bfloat16)
    layer = LowRankLinear.from_linear(half, 4)
    assert layer.U.dtype == torch.bfloat16 and layer.bias is None


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(64, 4)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)
        self.gate = nn.Linear(64, 8)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(64, 1000)


def test_replace_linear_reports_and_replaces():
    torch.manual_seed(0)
    model = Model()
    original = model.layers[0].up.weight.detach().clone()
    reports = replace_linear_with_low_rank(model, 0.25, exclude="head")
    names = [r.name for r in reports]
    assert names == ["layers.0.up", "layers.0.down", "layers.0.gate", "layers.1.up", "layers.1.down", "layers.1.gate"]
    up = reports[0]
    assert up.replaced and up.rank == 16 and up.params_before == 64 * 256 + 256
    assert up.params_after == 16 * (64 + 256) + 256 and up.params_saved == up.params_before - up.params_after
    layer = model.layers[0].up
    assert isinstance(layer, LowRankLinear) and isinstance(model.head, nn.Linear)
    assert up.rel_error == pytest.approx(rel_error(layer.U @ layer.V, original), rel=1e-6)
    assert 0 < up.rel_error < 1
    gate = reports[2]   # rank 16 of a 64 x 8 layer saves nothing: kept
    assert not gate.replaced and "would not save parameters" in gate.reason and gate.params_after == gate.params_before
    assert type(model.layers[0].attn.out_proj) is not LowRankLinear   # nn.MultiheadAttention untouched
    assert layer(torch.randn(5, 64)).shape == (5, 256)


def test_replace_linear_include_patterns():
    model = Model()
    reports = replace_linear_with_low_rank(model, 0.5, include="layers.*.up", rank_multiple=1)
    assert [r.name for r in reports] == ["layers.0.up", "layers.1.up"] and reports[0].rank == 32
    model = Model()
    reports = replace_linear_with_low_rank(model, 0.5, include=[re.compile(r"layers\.1\.(up|down)")],
                                           exclude=["*.down"])
    assert [r.name for r in reports] == ["layers.1.up"]
    model = Model()
    reports = replace_linear_with_low_rank(model, 1.0, include="head", only_if_smaller=False)
    assert reports[0].replaced and reports[0].rank == 64 and reports[0].rel_error < 1e-5
    with pytest.raises(ValueError, match=r"rank_ratio must be in \(0, 1\]"):
        replace_linear_with_low_rank(model, 0.0)
    with pytest.raises(TypeError, match=r"include must be a pattern \(str for fnmatch, or re.Pattern\)"):
        replace_linear_with_low_rank(Model(), 0.5, include=[3])
    with pytest.raises(TypeError, match=r"exclude must be a pattern .* got 3"):
        replace_linear_with_low_rank(Model(), 0.5, exclude=3)


@pytest.mark.parametrize("call", [
    lambda x, U, V, b: op.low_rank_fwd(x, U, V, b),
    lambda x, U, V, b: op.low_rank_fwd_hidden(x, U, V, b)[0],
    lambda x, U, V, b: op.low_rank_bwd(x, U, V, x[..., :6], None, True)[0],
])
def test_forward_mode_ad_is_refused_by_name(library_loaded, call):
    # No forward-mode formulas: torch.func.jvp gave a zero tangent.
    x, U, V, b = make((2, 3), 8, 4, 6)
    with pytest.raises(NotImplementedError, match="neuralops.low_rank: forward-mode AD"):
        torch.func.jvp(lambda x: call(x, U, V, b), (x,), (torch.ones_like(x),))
