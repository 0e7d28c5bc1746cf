"""Whether an op can run on its AOT kernels for given inputs, and if not, why.

Shared by every op's ``is_supported``. The checks, in order: kernels not disabled
(``NEURALOPS_DISABLE_KERNELS=1`` forces the fallbacks), a CUDA tensor, the compiled library loaded,
a dtype with kernels, a cubin for the device's architecture, and the op's own limits.

The per-call path: each op's ``fwd`` runs ``_on_kernels``, ``is_supported`` less the checks its C++
op makes anyway, built from ``kernels_ready`` and ``sizes_fit_int32``. Every tensor attribute read
costs about 0.1 us on the CPU machine and three times that on the GPU hosts, against a few
microseconds for a whole decode step (``benchmarks/host_python.py``).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from neuralops import _library

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# Each op's limits beyond dtype and device: keyword arguments (and the tensor's dtype, where a limit
# depends on it) -> None when fine, else the reason.
OpLimits = Callable[..., "str | None"]
_OP_LIMITS: dict[str, OpLimits] = {}


def register_op_limits(op_name: str, limits: OpLimits) -> None:
    _OP_LIMITS[op_name] = limits


_DISABLE_VAR = "NEURALOPS_DISABLE_KERNELS"
# os.environ.get raises and catches a KeyError inside when the variable is unset (the usual case):
# microseconds on every op call. CPython's os.environ keeps its encoded entries in ``_data``; the
# lookup there costs a dict read, and the variable is still read on every call.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(_DISABLE_VAR) if _ENV_DATA is not None else None
_ENV_OFF = (os.environ.encodevalue(""), os.environ.encodevalue("0")) if _ENV_DATA is not None else ("", "0")


def _disabled_by_env(compiling: bool) -> bool:
    # torch.compile traces os.environ, not its private dict.
    if _ENV_DATA is not None and not compiling:
        return _ENV_DATA.get(_ENV_KEY, _ENV_OFF[1]) not in _ENV_OFF
    return os.environ.get(_DISABLE_VAR, "0") not in ("", "0")


def kernels_disabled() -> bool:
    """Whether ``NEURALOPS_DISABLE_KERNELS`` is set (to anything but "" or "0"): every op then runs its
    PyTorch fallback. Read on every call, so it can be set or cleared at run time."""
    return _disabled_by_env(torch.compiler.is_compiling())


def select_arch(archs: tuple[int, ...], cc: int) -> int:
    """The built architecture whose cubins run on compute capability ``cc`` (e.g. 90), or -1.

    Mirrors runtime::select_arch in csrc/runtime/kernel.cpp (a test checks they agree): Triton's
    sm_90-and-newer cubins are arch-specific and need that exact capability; sm_8x cubins run on any
    later 8.x GPU.
    """
    if cc in archs:
        return cc
    portable = [a for a in archs if a < 90 and a // 10 == cc // 10 and a <= cc]
    return max(portable, default=-1)


def device_arch(device_index: int) -> int:
    """The cubin architecture neuralops would run on this CUDA device, or -1 if none was built.

    Written with what torch.compile folds to constants (device properties), so ``is_supported``
    traces without graph breaks.
    """
    props = torch.cuda.get_device_properties(device_index)
    return select_arch(_library.BUILT_ARCHS, props.major * 10 + props.minor)


# Device index -> whether a cubin runs there: fixed for the life of the process.
_DEVICE_READY: dict[int, bool] = {}

# kernels_ready's answers other than 0 (not ready), which _library.Op.entry turns into the op's
# callable.
READY, READY_TRACED = _library.READY, _library.READY_TRACED


def kernels_ready(tensor: torch.Tensor) -> int:
    """check_triton_suitability's checks short of the op's own limits, for the ops' per-call path:
    kernels not disabled, a CUDA tensor of a kernel dtype, the library loaded, a cubin for the
    device (looked up once per device). 0 when they fail, else READY or READY_TRACED (under
    torch.compile), so that the caller picks the op's entry without asking is_compiling() again."""
    if not (tensor.is_cuda and _library.LOADED and tensor.dtype in KERNEL_DTYPES):
        return 0
    # One is_compiling() per call: it costs as much as the rest of this function.
    compiling = torch.compiler.is_compiling()
    if _disabled_by_env(compiling):
        return 0
    index = tensor.get_device()
    if compiling:
        return READY_TRACED if device_arch(index) >= 0 else 0
    ready = _DEVICE_READY.get(index)
    if ready is None:
        ready = _DEVICE_READY[index] = device_arch(index) >= 0
    return READY if ready else 0


def sizes_fit_int32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None) -> bool:
    """A cheap sufficient test for the kernels' 32-bit size arguments, for the ops' per-call path:
    every tensor given holds 1 to 2**31 - 1 elements, so none of its sizes passes 32 bits. False
    says nothing (a zero-size dimension beside a huge one): callers then take their exact test.
    (Fixed arguments: varargs and a loop cost the call 0.2 us more.)"""
    return 0 < a.numel() < 2**31 and 0 < b.numel() < 2**31 and (c is None or 0 < c.numel() < 2**31)


def check_triton_suitability(tensor: torch.Tensor, op_name: str, **limits: Any) -> tuple[bool, str]:
    """(True, "") when ``op_name`` can run its kernels on ``tensor``; else (False, the reason).

    ``limits`` are the op's own parameters (for example ``head_dim`` for linear attention).
    """
    if op_name not in _OP_LIMITS:
        raise ValueError(f"unknown op {op_name!r}; expected one of {sorted(_OP_LIMITS)}")
    if kernels_disabled():
        return False, "NEURALOPS_DISABLE_KERNELS is set: using the PyTorch fallbacks"
    if not isinstance(tensor, torch.Tensor):
        return False, f"expected a torch.Tensor, got {type(tensor).__name__}"
    if tensor.device.type != "cuda":
        return False, f"the kernels run on CUDA tensors; this one is on {tensor.device.type}"
    if not _library.LOADED:
        return False, f"the neuralops library is not loaded: {_library.LOAD_ERROR}"
    if tensor.dtype not in KERNEL_DTYPES:
        return False, f"no kernel for dtype {tensor.dtype}; kernels take float16, bfloat16 and float32"
    index = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
    if device_arch(index) < 0:
        props = torch.cuda.get_device_properties(index)
        return False, (f"no cubin for cuda:{index} (compute capability {props.major}.{props.minor}); "
                       f'rebuild with NEURALOPS_CUDA_ARCHS="{props.major}{props.minor}"')
    reason = _OP_LIMITS[op_name](dtype=tensor.dtype, **limits)
    if reason is not None:
        return False, reason
    return True, ""
