"""The interpreter's bounds check (tests/interpreter_bounds.py), which the kernel tests under
TRITON_INTERPRET=1 run with: an access past a tensor argument raises, naming the kernel, the
argument and the distance; masked-off lanes and accesses inside the storage do not."""

import pytest
import torch

from helpers import requires_interpreter

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from triton.runtime.errors import InterpreterError  # noqa: E402

import interpreter_bounds  # noqa: E402

pytestmark = requires_interpreter
interpreter_bounds.install()


@triton.jit
def _copy_kernel(src, dst, n_load, n_store, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n_load, other=0.0)
    tl.store(dst + offs, x, mask=offs < n_store)


def test_accesses_inside_the_arguments_pass():
    src, dst = torch.arange(10.0), torch.zeros(16)
    _copy_kernel[(1,)](src, dst, 10, 16, BLOCK=16)
    assert torch.equal(dst[:10], src) and not dst[10:].any()


def test_a_view_may_reach_the_rest_of_its_storage():
    base = torch.arange(16.0)
    dst = torch.zeros(16)
    _copy_kernel[(1,)](base[4:8], dst, 12, 12, BLOCK=16)
    assert torch.equal(dst[:12], base[4:])


def test_a_load_past_its_tensor_raises():
    src, dst = torch.arange(10.0), torch.zeros(16)
    with pytest.raises(InterpreterError, match=r"_copy_kernel program \(0, 0, 0\): a load of 2 element\(s\) outside "
                                               r"every tensor argument, the first at 0x[0-9a-f]+, 0 bytes past the end "
                                               r"of src's storage \(40 bytes\)"):
        _copy_kernel[(1,)](src, dst, 12, 12, BLOCK=16)


def test_a_store_past_its_tensor_raises():
    src, dst = torch.arange(16.0), torch.zeros(8)
    with pytest.raises(InterpreterError, match=r"a store of 8 element\(s\) .* of dst's storage \(32 bytes\)"):
        _copy_kernel[(1,)](src, dst, 16, 16, BLOCK=16)
