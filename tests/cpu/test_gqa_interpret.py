"""The GQA Triton kernels themselves, run on CPU tensors by the Triton interpreter (TRITON_INTERPRET=1,
set in conftest.py), on small odd shapes with the grid and block sizes the C++ op would use."""

import pytest
import torch

from helpers import requires_interpreter
from triton_src.gqa import kernels
from triton_src.gqa.spec import KERNELS

triton = pytest.importorskip("triton")
import interpreter_bounds  # noqa: E402

interpreter_bounds.install()  # every launch below: an access past its tensors raises

CONSTEXPRS = {spec.name: spec.constexprs for spec in KERNELS}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def block_d(d: int) -> int:  # as csrc/ops/gqa.cpp picks it
    return 32 if d <= 32 else 64 if d <= 64 else 128


def launch(kernel_name, fn, x, out, hkv, n_rep, dt):
    b, _, n, d = x.shape
    cx = CONSTEXPRS[kernel_name]({"dtype": dt, "BLOCK_D": block_d(d)})
    grid = (b * hkv * triton.cdiv(n, cx["BLOCK_N"]),)
    s = [x.stride(i) if x.size(i) > 1 else 0 for i in range(3)]
    o = [out.stride(i) if out.size(i) > 1 else 0 for i in range(3)]
    fn[grid](x, out, hkv, n, d, n_rep, *s, *o, **cx)


@requires_interpreter
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
@pytest.mark.parametrize("b,hkv,n,d,n_rep,transposed", [
    (1, 1, 1, 1, 2, False),
    (2, 2, 5, 17, 3, False),
    (1, 3, 9, 40, 2, True),
    (1, 1, 3, 136, 2, False),   # D > BLOCK_D: the loop over D chunks
])
def test_expand_and_reduce_kernels(dt, b, hkv, n, d, n_rep, transposed):
    dtype = DTYPES[dt]
    if transposed:
        x = torch.randn(b, n, hkv, d).to(dtype).transpose(1, 2)
    else:
        x = torch.randn(b, hkv, n, d).to(dtype)
    out = torch.full((b, hkv * n_rep, n, d), float("nan"), dtype=dtype)
    launch("gqa_expand", kernels.gqa_expand_kernel, x, out, hkv, n_rep, dt)
    assert torch.equal(out, kernels.expand_reference(x, n_rep))

    g = torch.randn(b, hkv * n_rep, n, d).to(dtype)
    red = torch.full((b, hkv, n, d), float("nan"), dtype=dtype)
    launch("gqa_reduce", kernels.gqa_reduce_kernel, g, red, hkv, n_rep, dt)
    ref = g.double().view(b, hkv, n_rep, n, d).sum(2)
    tol = 1e-6 if dt == "fp32" else 1e-2
    torch.testing.assert_close(red.double(), ref.to(dtype).double(), rtol=tol, atol=tol)
    torch.testing.assert_close(red, kernels.reduce_reference(g, n_rep), rtol=tol, atol=tol)
