"""A bounds check for the kernels the CPU tests run under Triton's interpreter: every element that a
load or a store reaches under its mask must lie inside the storage of one of the launch's tensor
arguments.

On the GPU such an access is an illegal-address fault, which also breaks the process's CUDA context
for every later launch, or a silent read of another buffer's bytes. The interpreter reads and
writes host memory, where neither shows: without this check a kernel can pass its numerics here
and fault on the device. install() makes the access raise (an AssertionError, which the
interpreter wraps in triton.runtime.errors.InterpreterError) naming the kernel, the program, the
argument nearest to the address and how far past its end it is.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from triton.runtime import interpreter

# The launch in progress (the interpreter runs one at a time): its kernel's name and the byte
# ranges [start, end) of its tensor arguments' storages, by argument name.
_LAUNCH: dict = {"kernel": "", "extents": []}


def _describe(address: int) -> str:
    below = [(start, end, name) for start, end, name in _LAUNCH["extents"] if start <= address]
    if not below:
        return f"0x{address:x}, below every argument"
    start, end, name = max(below)
    return f"0x{address:x}, {address - end} bytes past the end of {name}'s storage ({end - start} bytes)"


def _check(builder, kind: str, ptrs, mask) -> None:
    addresses = ptrs.data[mask.data.astype(bool)].astype(np.int64)  # Triton broadcasts the mask to the pointers
    if addresses.size == 0:
        return
    size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end, _ in _LAUNCH["extents"]:
        inside |= (addresses >= start) & (addresses + size <= end)
    if not inside.all():
        outside = addresses[~inside]
        raise AssertionError(f"{_LAUNCH['kernel']} program {tuple(builder.grid_idx)}: a {kind} of {outside.size} "
                             f"element(s) outside every tensor argument, the first at {_describe(int(outside[0]))}")


def install() -> None:
    """Check every interpreted launch from now on (idempotent)."""
    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    if getattr(builder, "_neuralops_bounds", False):
        return
    init_args, load, store = executor._init_args_hst, builder.create_masked_load, builder.create_masked_store

    def init_args_checked(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = [*zip(inspect.getfullargspec(self.fn).args, args_hst), *kwargs_hst.items()]
        storages = [(name, arg.untyped_storage()) for name, arg in named if isinstance(arg, torch.Tensor)]
        _LAUNCH.update(kernel=self.fn.__name__,
                       extents=[(s.data_ptr(), s.data_ptr() + s.nbytes(), name) for name, s in storages])
        return args_hst, kwargs_hst

    def load_checked(self, ptrs, mask, other, *rest):
        _check(self, "load", ptrs, mask)
        return load(self, ptrs, mask, other, *rest)

    def store_checked(self, ptrs, value, mask, *rest):
        _check(self, "store", ptrs, mask)
        return store(self, ptrs, value, mask, *rest)

    executor._init_args_hst = init_args_checked
    builder.create_masked_load, builder.create_masked_store = load_checked, store_checked
    builder._neuralops_bounds = True
