"""GQA on CPU: the fallbacks, the registered ops (their ATen path), autograd, fake tensors, errors."""

import pytest
import torch
from torch.library import opcheck

from neuralops.core.suitability import check_triton_suitability
from neuralops.core.triton_kernels import gqa

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def reference_expand(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, n, d = x.shape
    out = torch.empty(b, h * n_rep, n, d, dtype=torch.float64)
    for j in range(h * n_rep):
        out[:, j] = x[:, j // n_rep].double()
    return out


def reference_reduce(g: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, n, d = g.shape
    out = torch.zeros(b, h // n_rep, n, d, dtype=torch.float64)
    for j in range(h):
        out[:, j // n_rep] += g[:, j].double()
    return out


SHAPES = [(2, 2, 5, 8, 6), (1, 1, 1, 1, 3), (3, 4, 7, 17, 2), (2, 3, 9, 80, 1)]  # B, Hkv, N, D, n_rep


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,hkv,n,d,n_rep", SHAPES)
def test_fallback_matches_reference(dtype, b, hkv, n, d, n_rep):
    k = torch.randn(b, hkv, n, d).to(dtype)
    v = torch.randn(b, hkv, n, d + 3).to(dtype)
    ek, ev = gqa.fwd(k, v, hkv, hkv * n_rep)
    assert torch.equal(ek.double(), reference_expand(k, n_rep))
    assert torch.equal(ev.double(), reference_expand(v, n_rep))
    gk = torch.randn(b, hkv * n_rep, n, d).to(dtype)
    gv = torch.randn(b, hkv * n_rep, n, d + 3).to(dtype)
    rk, rv = gqa.bwd(gk, gv, hkv, hkv * n_rep)
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(dtype, 1e-6)
    torch.testing.assert_close(rk.double(), reference_reduce(gk, n_rep).to(dtype).double(), rtol=tol, atol=tol)
    torch.testing.assert_close(rv.double(), reference_reduce(gv, n_rep).to(dtype).double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_registered_op_cpu_path_matches_fallback(library_loaded, dtype):
    k = torch.randn(2, 3, 11, 24).to(dtype)
    v = torch.randn(2, 3, 11, 40).to(dtype).transpose(2, 3).contiguous().transpose(2, 3)  # D-strided
    ok, ov = torch.ops.neuralops.gqa_fwd(k, v, 3, 12)
    fk, fv = gqa.gqa_pytorch_fallback(k, v, 3, 12)
    assert torch.equal(ok, fk) and torch.equal(ov, fv)
    assert ok.is_contiguous() and ov.is_contiguous()
    gk, gv = torch.ops.neuralops.gqa_bwd(ok, ov, 3, 12)
    torch.testing.assert_close(gk, 4 * k)
    torch.testing.assert_close(gv, 4 * v)


def test_fwd_is_differentiable_and_matches_autograd_of_fallback():
    k = torch.randn(2, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 6, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda k, v: gqa.fwd(k, v, 2, 6), (k, v))


def test_op_gradients_and_double_backward(library_loaded):
    k = torch.randn(2, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 6, 7, dtype=torch.float64, requires_grad=True)
    op = torch.ops.neuralops.gqa_fwd
    assert torch.autograd.gradcheck(lambda k, v: op(k, v, 2, 6), (k, v))
    assert torch.autograd.gradgradcheck(lambda k, v: op(k, v, 2, 6), (k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(library_loaded, dtype):
    k = torch.randn(2, 2, 5, 8, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 5, 6, dtype=dtype, requires_grad=True)
    opcheck(torch.ops.neuralops.gqa_fwd.default, (k, v, 2, 6))
    gk = torch.randn(2, 6, 5, 8, dtype=dtype, requires_grad=True)
    gv = torch.randn(2, 6, 5, 6, dtype=dtype, requires_grad=True)
    opcheck(torch.ops.neuralops.gqa_bwd.default, (gk, gv, 2, 6))


def test_torch_compile_fullgraph(library_loaded):
    torch._dynamo.reset()

    def f(k, v):
        ek, ev = torch.ops.neuralops.gqa_fwd(k, v, 2, 8)
        return (ek * 2).sum() + ev.sum()

    k = torch.randn(2, 2, 5, 8, requires_grad=True)
    v = torch.randn(2, 2, 5, 8, requires_grad=True)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = compiled(k, v)
    out.backward()
    torch.testing.assert_close(out, f(k, v))
    torch.testing.assert_close(k.grad, torch.full_like(k, 8.0))


def test_api_under_compile_fullgraph():
    torch._dynamo.reset()
    k = torch.randn(2, 2, 5, 8)
    v = torch.randn(2, 2, 5, 8)
    compiled = torch.compile(lambda k, v: gqa.fwd(k, v, 2, 4), fullgraph=True, backend="aot_eager")
    ek, ev = compiled(k, v)
    assert torch.equal(ek, torch.repeat_interleave(k, 2, dim=1))


def test_equal_head_counts_return_inputs():
    k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)
    ek, ev = gqa.fwd(k, v, 4, 4)
    assert ek is k and ev is v
    gk, gv = gqa.bwd(k, v, 4, 4)
    assert gk is k and gv is v


@pytest.mark.parametrize("call", [
    lambda k, v: gqa.fwd(k, v, 3, 8),
    lambda k, v: torch.ops.neuralops.gqa_fwd(k, v, 3, 8),
])
def test_indivisible_head_counts_name_both(library_loaded, call):
    k, v = torch.randn(1, 3, 4, 8), torch.randn(1, 3, 4, 8)
    with pytest.raises(ValueError, match=r"num_heads \(8\) must be a multiple of num_kv_heads \(3\)"):
        call(k, v)


@pytest.mark.parametrize("route", ["api", "api_to_op"])
def test_bad_inputs_get_clear_errors(library_loaded, route, monkeypatch):
    if route == "api_to_op":  # the API's kernel route leaves these checks to the op (on CPU here)
        monkeypatch.setattr(gqa, "kernels_ready", lambda t: True)
    k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"k must be 4-D \[B, num_kv_heads, N, D\], got shape .2, 4, 8."):
        gqa.fwd(k[0], v, 2, 4)
    with pytest.raises(ValueError, match="v has 2 heads in dim 1 but num_kv_heads is 1"):
        gqa.fwd(k[:, :1], v, 1, 4)
    with pytest.raises(ValueError, match="must be positive"):
        gqa.fwd(k, v, 0, 4)
    with pytest.raises(TypeError, match="num_kv_heads must be an int, got float"):
        gqa.fwd(k, v, 2.0, 4)
    with pytest.raises(TypeError, match="num_heads must be an int, got bool"):
        gqa.bwd(k, v, 1, True)
    with pytest.raises(ValueError, match="grad_k has 2 heads in dim 1 but num_heads is 4"):
        gqa.bwd(k, v, 2, 4)
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        gqa.fwd(k, v, 2, 4, block_size=64)
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        gqa.fwd(k.numpy(), v, 2, 4)
    with pytest.raises(ValueError, match=r"k must be 4-D \[B, num_kv_heads, N, D\]"):
        torch.ops.neuralops.gqa_fwd(k[0], v, 2, 4)


def test_empty_tensors(library_loaded):
    k, v = torch.randn(0, 2, 4, 8), torch.randn(2, 2, 0, 8)
    ek, ev = gqa.fwd(k, v, 2, 4)
    assert ek.shape == (0, 4, 4, 8) and ev.shape == (2, 4, 0, 8)
    ok, ov = torch.ops.neuralops.gqa_fwd(k, v, 2, 4)
    assert ok.shape == (0, 4, 4, 8) and ov.shape == (2, 4, 0, 8)


def test_cpu_tensors_are_not_supported_and_say_why():
    k = torch.randn(1, 2, 4, 8)
    assert not gqa.is_supported(k, k, 2, 4)
    ok, reason = check_triton_suitability(k, "gqa")
    assert not ok and "CUDA tensors" in reason


def test_disable_kernels_env(monkeypatch):
    monkeypatch.setenv("NEURALOPS_DISABLE_KERNELS", "1")
    ok, reason = check_triton_suitability(torch.randn(1), "gqa")
    assert not ok and "NEURALOPS_DISABLE_KERNELS" in reason


def test_unknown_op_name():
    with pytest.raises(ValueError, match="unknown op 'attention'"):
        check_triton_suitability(torch.randn(1), "attention")


@pytest.mark.parametrize("name", ["gqa_fwd", "gqa_bwd"])
def test_forward_mode_ad_is_refused_by_name(library_loaded, name):
    # No forward-mode formulas: torch.func.jvp gave a zero tangent.
    x = torch.randn(1, 2, 4, 8) if name == "gqa_fwd" else torch.randn(1, 4, 4, 8)
    with pytest.raises(NotImplementedError, match="neuralops.gqa: forward-mode AD"):
        torch.func.jvp(lambda x: getattr(torch.ops.neuralops, name)(x, x, 2, 4)[0], (x,), (torch.ones_like(x),))
