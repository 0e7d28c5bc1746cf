"""Grouped-query attention (GQA) head expansion.

Repeats KV heads along the head dimension for multi-query and grouped-query attention:
(k, v) with ``num_kv_heads`` heads -> (k_expanded, v_expanded) with ``num_heads`` heads, head ``h``
of the output being head ``h // (num_heads // num_kv_heads)`` of the input (the semantics of
``torch.repeat_interleave(x, n_rep, dim=1)`` and Hugging Face ``repeat_kv``).

Shapes: k ``[B, num_kv_heads, N, Dk]``, v ``[B, num_kv_heads, N', Dv]``, any strides (a transposed
``[B, N, H, D]`` view is read in place). Outputs are contiguous ``[B, num_heads, N, D]``.
``bwd`` sums each group of ``num_heads // num_kv_heads`` gradient heads (fp32 accumulation).

On CUDA tensors of float16, bfloat16 or float32 the work runs on AOT-compiled Triton kernels
(``torch.ops.neuralops.gqa_fwd`` / ``gqa_bwd``); elsewhere on ``gqa_pytorch_fallback``. ``fwd`` is
differentiable either way and works under ``torch.compile`` without graph breaks.
"""

from __future__ import annotations

from typing import Any

import torch

from neuralops import _library
from neuralops.core.arguments import check_int
from neuralops.core.suitability import KERNEL_DTYPES, kernels_ready, register_op_limits, sizes_fit_int32

register_op_limits("gqa", lambda **_: None)


def _check_kwargs(kwargs: dict[str, Any], fn: str) -> None:
    if kwargs:
        raise TypeError(f"neuralops.gqa.{fn}() got unexpected keyword arguments {sorted(kwargs)}")


def _check_heads(num_kv_heads: int, num_heads: int) -> None:
    check_int(num_kv_heads, "num_kv_heads", "neuralops.gqa")
    check_int(num_heads, "num_heads", "neuralops.gqa")
    if num_kv_heads <= 0 or num_heads <= 0:
        raise ValueError(f"neuralops.gqa: num_kv_heads and num_heads must be positive, got "
                         f"num_kv_heads={num_kv_heads} and num_heads={num_heads}")
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"neuralops.gqa: num_heads ({num_heads}) must be a multiple of "
                         f"num_kv_heads ({num_kv_heads})")


def _check_tensor(t: torch.Tensor, heads: int, name: str, heads_name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"neuralops.gqa: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"neuralops.gqa: {name} must be 4-D [B, {heads_name}, N, D], got shape {tuple(t.shape)}")
    if t.shape[1] != heads:
        raise ValueError(f"neuralops.gqa: {name} has {t.shape[1]} heads in dim 1 but {heads_name} is {heads}")


def _check_pair(a: torch.Tensor, b: torch.Tensor, heads: int, names: tuple[str, str], heads_name: str) -> None:
    _check_tensor(a, heads, names[0], heads_name)
    _check_tensor(b, heads, names[1], heads_name)
    if a.device != b.device:
        raise ValueError(f"neuralops.gqa: {names[0]} is on {a.device} but {names[1]} is on {b.device}")


def _expand(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, n, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, n, d).reshape(b, h * n_rep, n, d)


def _reduce(g: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, n, d = g.shape
    return g.reshape(b, h // n_rep, n_rep, n, d).sum(2, dtype=torch.float32).to(g.dtype)


def gqa_pytorch_fallback(
    k: torch.Tensor, v: torch.Tensor, num_kv_heads: int, num_heads: int, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Head expansion in plain PyTorch (differentiable); the reference for the kernels."""
    _check_heads(num_kv_heads, num_heads)
    n_rep = num_heads // num_kv_heads
    return _expand(k, n_rep), _expand(v, n_rep)


def gqa_bwd_pytorch_fallback(
    grad_k: torch.Tensor, grad_v: torch.Tensor, num_kv_heads: int, num_heads: int, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The group sum in plain PyTorch, accumulating in float32."""
    _check_heads(num_kv_heads, num_heads)
    n_rep = num_heads // num_kv_heads
    return _reduce(grad_k, n_rep), _reduce(grad_v, n_rep)


def is_supported(k: torch.Tensor, v: torch.Tensor, num_kv_heads: int, num_heads: int, **kwargs: Any) -> bool:
    """Check whether GQA expansion can run on the Triton kernel."""
    # Every call runs this: bare attribute checks here, the reasons in check_triton_suitability.
    if not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)) or not kernels_ready(k):
        return False
    if v.device != k.device or v.dtype not in KERNEL_DTYPES:
        return False
    if num_kv_heads <= 0 or num_heads <= 0 or (num_heads % num_kv_heads) != 0:
        return False
    # The kernels take sizes as 32-bit integers (offsets are 64-bit); larger sizes use the fallback.
    return max(max(k.shape), max(v.shape), num_heads) < 2**31


def _on_kernels(a: Any, b: Any, num_kv_heads: Any, num_heads: Any) -> int:
    """fwd's and bwd's per-call test: ``is_supported`` less the checks the op makes itself (ranks,
    head counts and devices), which raise the fallback's exception types naming the same argument
    (see neuralops.core.suitability on the per-call path). ``kernels_ready``'s answer: 0, READY or
    READY_TRACED."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return 0
    ready = kernels_ready(a)
    if not ready:
        return 0
    if b.dtype not in KERNEL_DTYPES or not (isinstance(num_kv_heads, int) and isinstance(num_heads, int)):
        return 0
    if sizes_fit_int32(a, b) and num_heads < 2**31:
        return ready
    return ready if is_supported(a, b, num_kv_heads, num_heads) else 0


def fwd(
    k: torch.Tensor, v: torch.Tensor, num_kv_heads: int, num_heads: int, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward entrypoint for GQA head expansion: (k_expanded, v_expanded).

    With ``num_kv_heads == num_heads`` the inputs are returned as they are.
    """
    _check_kwargs(kwargs, "fwd")
    return _dispatch(k, v, num_kv_heads, num_heads, "gqa_fwd", ("k", "v"), num_kv_heads, "num_kv_heads",
                     gqa_pytorch_fallback)


def bwd(
    grad_k: torch.Tensor, grad_v: torch.Tensor, num_kv_heads: int, num_heads: int, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward entrypoint: reduces expanded gradients back to num_kv_heads."""
    _check_kwargs(kwargs, "bwd")
    return _dispatch(grad_k, grad_v, num_kv_heads, num_heads, "gqa_bwd", ("grad_k", "grad_v"), num_heads,
                     "num_heads", gqa_bwd_pytorch_fallback)


def _dispatch(a, b, num_kv_heads, num_heads, op_name, names, heads, heads_name, fallback):
    """The op where _on_kernels says so (it checks its arguments itself); else the checks here, then
    the inputs as they are (equal head counts) or the fallback."""
    ready = _on_kernels(a, b, num_kv_heads, num_heads) if num_kv_heads != num_heads else 0
    if ready:
        return _OPS[op_name].entry(ready)(a, b, num_kv_heads, num_heads)
    _check_heads(num_kv_heads, num_heads)
    _check_pair(a, b, heads, names, heads_name)
    if num_kv_heads == num_heads:
        return a, b
    return fallback(a, b, num_kv_heads, num_heads)


# The ops, looked up once (_library.op).
_OPS = {name: _library.op(name) for name in ("gqa_fwd", "gqa_bwd")} if _library.LOADED else {}


def _register() -> None:
    # Autograd is registered in C++ (csrc/ops/gqa.cpp): shared with C++ callers, no Python per call.
    def fake_fwd(k, v, num_kv_heads, num_heads):
        _check_heads(num_kv_heads, num_heads)
        _check_pair(k, v, num_kv_heads, ("k", "v"), "num_kv_heads")
        b, _, n, d = k.shape
        bv, _, nv, dv = v.shape
        return k.new_empty((b, num_heads, n, d)), v.new_empty((bv, num_heads, nv, dv))

    def fake_bwd(grad_k, grad_v, num_kv_heads, num_heads):
        _check_heads(num_kv_heads, num_heads)
        _check_pair(grad_k, grad_v, num_heads, ("grad_k", "grad_v"), "num_heads")
        b, _, n, d = grad_k.shape
        bv, _, nv, dv = grad_v.shape
        return grad_k.new_empty((b, num_kv_heads, n, d)), grad_v.new_empty((bv, num_kv_heads, nv, dv))

    torch.library.register_fake("neuralops::gqa_fwd", fake_fwd)
    torch.library.register_fake("neuralops::gqa_bwd", fake_bwd)


if _library.LOADED:
    _register()
