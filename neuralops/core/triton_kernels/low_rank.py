"""Triton Low-Rank Projection Kernel (Forward & Backward).

Computes low-rank bottleneck projections: ``y = (x @ V.T) @ U.T + bias``, the layer
``nn.Linear(in, out)`` factored through rank ``r`` (``neuralops.nn.LowRankLinear``).

Used by: Multi-Head Latent Attention (MLA); SVD-LLM, ASVD, Direct SVD, DOBI SVD, Frandi; low-rank
projections of linear attention.

Shapes: x ``[..., in]`` (any leading dims), V ``[r, in]``, U ``[out, r]``, bias ``[out]`` or None;
y ``[..., out]`` (contiguous). All share one dtype and device. ``bwd`` returns
``(dx [..., in], dU [out, r], dV [r, in], dbias [out] or None)``.

Numerics: products accumulate in fp32 and ``h = x @ V.T`` is rounded to the input dtype before the
second product, as two ``F.linear`` calls round it; fp32 inputs use IEEE fp32 products (no TF32).

On CUDA tensors of float16, bfloat16 or float32 the work runs in the compiled library
(``torch.ops.neuralops.low_rank_fwd`` / ``low_rank_fwd_hidden`` / ``low_rank_bwd``), which picks
per shape between AOT-compiled Triton kernels and cuBLAS (``backend="auto"``; ``"triton"`` or
``"cublas"`` force one; ``route()`` says which a call takes). Decode sizes (up to 64 rows) take the
Triton kernels where their weights are small enough for them to win (up to 9 MiB;
``neuralops.build_info()["routing"]["low_rank"]``), except a backward being
captured into a CUDA graph, where only the GPU's time counts and cuBLAS is faster. Elsewhere
``low_rank_pytorch_fallback``
runs. ``fwd`` is differentiable either way (gradients for x, U, V and bias; when autograd needs
them the forward keeps ``h`` for the backward) and works under ``torch.compile(fullgraph=True)``.

x may be any view whose last dim is contiguous: leading dims that collapse into at most two strided
levels are read in place; other layouts, and weights whose last dim is strided, are copied once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from neuralops import _library
from neuralops.core.suitability import kernels_ready, register_op_limits, sizes_fit_int32

BACKENDS = ("auto", "triton", "cublas")

_INT32_MAX = 2**31 - 1


def _limits(rows: int = 0, in_features: int = 0, rank: int = 0, out_features: int = 0, **_: Any) -> str | None:
    # The kernels take sizes as 32-bit integers (offsets are 64-bit).
    sizes = {"rows": rows, "in_features": in_features, "rank": rank, "out_features": out_features}
    too_big = [f"{name}={value}" for name, value in sizes.items() if value > _INT32_MAX]
    if too_big:
        return f"sizes beyond the kernels' 32-bit arguments: {', '.join(too_big)}"
    return None


register_op_limits("low_rank", _limits)


def _parse_kwargs(kwargs: dict[str, Any], fn: str) -> str:
    unknown = sorted(set(kwargs) - {"backend"})
    if unknown:
        raise TypeError(f"neuralops.low_rank.{fn}() got unexpected keyword arguments {unknown}")
    backend = kwargs.get("backend", "auto")
    if backend not in BACKENDS:
        raise ValueError(f'neuralops.low_rank: backend must be "auto", "triton" or "cublas", got {backend!r}')
    return backend


def _rows(x: torch.Tensor) -> int:
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    return rows


def _check_inputs(x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor | None) -> None:
    for name, t in (("x", x), ("U", U), ("V", V)) + ((("bias", bias),) if bias is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"neuralops.low_rank: {name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() < 1:
        raise ValueError("neuralops.low_rank: x must have shape [..., in_features], got a 0-d tensor")
    if V.dim() != 2:
        raise ValueError(f"neuralops.low_rank: V must be 2-D [rank, in_features], got shape {tuple(V.shape)}")
    if U.dim() != 2:
        raise ValueError(f"neuralops.low_rank: U must be 2-D [out_features, rank], got shape {tuple(U.shape)}")
    if V.shape[1] != x.shape[-1]:
        raise ValueError(f"neuralops.low_rank: V must have shape [rank, in_features] with in_features = "
                         f"x.shape[-1] = {x.shape[-1]}, got shape {tuple(V.shape)}")
    if U.shape[1] != V.shape[0]:
        raise ValueError(f"neuralops.low_rank: U must have shape [out_features, rank] with rank = "
                         f"V.shape[0] = {V.shape[0]}, got shape {tuple(U.shape)}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != U.shape[0]):
        raise ValueError(f"neuralops.low_rank: bias must have shape [out_features] = [{U.shape[0]}], "
                         f"got shape {tuple(bias.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"neuralops.low_rank: x must be a floating-point tensor, got {x.dtype}")
    for name, t in (("U", U), ("V", V)) + ((("bias", bias),) if bias is not None else ()):
        if t.dtype != x.dtype:
            raise TypeError(f"neuralops.low_rank: {name} has dtype {t.dtype} but x has dtype {x.dtype}; "
                            "x, U, V and bias must share one dtype")
        if t.device != x.device:
            raise ValueError(f"neuralops.low_rank: x is on {x.device} but {name} is on {t.device}")


def _check_like_rows(x: torch.Tensor, t: Any, last: int, name: str, last_name: str) -> None:
    """t must be [..., last] with x's leading dims, dtype and device (grad_out, the op's hidden)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"neuralops.low_rank: {name} must be a torch.Tensor, got {type(t).__name__}")
    expected = tuple(x.shape[:-1]) + (last,)
    if tuple(t.shape) != expected:
        raise ValueError(f"neuralops.low_rank: {name} must have shape [..., {last_name}] = {expected} "
                         f"(x's leading dims), got shape {tuple(t.shape)}")
    if t.dtype != x.dtype:
        raise TypeError(f"neuralops.low_rank: {name} has dtype {t.dtype} but x has dtype {x.dtype}")
    if t.device != x.device:
        raise ValueError(f"neuralops.low_rank: x is on {x.device} but {name} is on {t.device}")


def low_rank_pytorch_fallback(
    x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor | None = None, **kwargs: Any
) -> torch.Tensor:
    """The projection in plain PyTorch (two ``F.linear`` calls, differentiable)."""
    return F.linear(F.linear(x, V), U, bias)


def low_rank_bwd_pytorch_fallback(
    x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, grad_out: torch.Tensor,
    bias: torch.Tensor | None = None, **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The gradients in plain PyTorch: what autograd computes for the two ``F.linear`` calls."""
    rows = _rows(x)
    x2 = x.reshape(rows, x.shape[-1])
    g2 = grad_out.reshape(rows, U.shape[0])
    dh = g2 @ U
    dx = (dh @ V).reshape(x.shape)
    dU = g2.T @ (x2 @ V.T)
    dV = dh.T @ x2
    return dx, dU, dV, (g2.sum(0) if bias is not None else None)


def is_supported(
    x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor | None = None, **kwargs: Any
) -> bool:
    """Check whether low-rank projection can run on the Triton kernel."""
    # Every call runs this: bare attribute checks here, the reasons in check_triton_suitability.
    if not (isinstance(x, torch.Tensor) and isinstance(U, torch.Tensor) and isinstance(V, torch.Tensor)):
        return False
    if x.dim() < 1 or U.dim() != 2 or V.dim() != 2 or not kernels_ready(x):
        return False
    dtype, device = x.dtype, x.device
    if U.dtype != dtype or V.dtype != dtype or U.device != device or V.device != device:
        return False
    if bias is not None and not (isinstance(bias, torch.Tensor) and bias.dtype == dtype and bias.device == device):
        return False
    return _limits(_rows(x), x.shape[-1], V.shape[0], U.shape[0]) is None


def _on_kernels(x: Any, U: Any, V: Any, bias: Any) -> int:
    """fwd's and bwd's per-call test: ``is_supported`` less the checks the op makes itself (ranks,
    shapes, dtypes and devices of U, V and bias), which raise the fallback's exception types naming
    the same argument (see neuralops.core.suitability on the per-call path). ``kernels_ready``'s
    answer: 0, READY or READY_TRACED."""
    if not (isinstance(x, torch.Tensor) and isinstance(U, torch.Tensor) and isinstance(V, torch.Tensor)):
        return 0
    ready = kernels_ready(x)
    if not ready:
        return 0
    if sizes_fit_int32(x, U, V):
        return ready if bias is None or isinstance(bias, torch.Tensor) else 0
    return ready if is_supported(x, U, V, bias) else 0


def route(x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor | None = None, *,
          backend: str = "auto", backward: bool = False) -> str:
    """The implementation a call with these inputs takes: ``"triton_decode"``, ``"triton_fused"``,
    ``"triton_two_gemm"``, ``"cublas"`` (ATen on CUDA), ``"aten_cpu"``, or ``"pytorch_fallback"``
    when the compiled library cannot run them. ``backward`` asks about ``bwd`` (its dx product)."""
    _parse_kwargs({"backend": backend}, "route")
    _check_inputs(x, U, V, bias)
    if not is_supported(x, U, V, bias):
        return "pytorch_fallback"
    return torch.ops.neuralops.low_rank_route(x, U, V, bias, backend=backend, backward=backward)


def fwd(
    x: torch.Tensor, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor | None = None, **kwargs: Any
) -> torch.Tensor:
    """Forward entrypoint for fused Triton low-rank projection: y = (x @ V.T) @ U.T + bias.

    Keyword-only ``backend``: ``"auto"`` (default), ``"triton"`` or ``"cublas"``.
    """
    backend = _parse_kwargs(kwargs, "fwd") if kwargs else "auto"
    ready = _on_kernels(x, U, V, bias)
    if ready:
        return _FWD.entry(ready)(x, U, V, bias, backend)
    _check_inputs(x, U, V, bias)
    return low_rank_pytorch_fallback(x, U, V, bias)


def bwd(
    x: torch.Tensor,
    U: torch.Tensor,
    V: torch.Tensor,
    grad_out: torch.Tensor,
    bias: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Backward entrypoint computing gradients for x, U, V, and bias.

    Recomputes ``h = x @ V.T`` (autograd through ``fwd`` keeps it instead). Keyword-only
    ``backend`` as for ``fwd``.
    """
    backend = _parse_kwargs(kwargs, "bwd")
    _check_inputs(x, U, V, bias)
    _check_like_rows(x, grad_out, U.shape[0], "grad_out", "out_features")
    ready = _on_kernels(x, U, V, bias)  # after the checks above: is_supported's answer
    if not ready:
        return low_rank_bwd_pytorch_fallback(x, U, V, grad_out, bias)
    return _BWD.entry(ready)(x, U, V, grad_out, None, bias is not None, backend)


# The ops, looked up once (_library.op).
_FWD = _library.op("low_rank_fwd") if _library.LOADED else None
_BWD = _library.op("low_rank_bwd") if _library.LOADED else None


def _register() -> None:
    # Autograd is registered in C++ (csrc/ops/low_rank_autograd.cpp): shared with C++ callers, and a
    # decode-sized call runs no Python beyond fwd's checks.
    def fake_fwd(x, U, V, bias=None, *, backend="auto"):
        _parse_kwargs({"backend": backend}, "fwd")
        _check_inputs(x, U, V, bias)
        return x.new_empty(tuple(x.shape[:-1]) + (U.shape[0],))

    def fake_fwd_hidden(x, U, V, bias=None, *, backend="auto"):
        return fake_fwd(x, U, V, bias, backend=backend), x.new_empty(tuple(x.shape[:-1]) + (V.shape[0],))

    def fake_bwd(x, U, V, grad_out, hidden=None, bias_grad=False, *, backend="auto"):
        _parse_kwargs({"backend": backend}, "bwd")
        _check_inputs(x, U, V, None)
        _check_like_rows(x, grad_out, U.shape[0], "grad_out", "out_features")
        if hidden is not None:
            _check_like_rows(x, hidden, V.shape[0], "hidden", "rank")
        dbias = x.new_empty((U.shape[0],)) if bias_grad else None
        return x.new_empty(x.shape), U.new_empty(U.shape), V.new_empty(V.shape), dbias

    torch.library.register_fake("neuralops::low_rank_fwd", fake_fwd)
    torch.library.register_fake("neuralops::low_rank_fwd_hidden", fake_fwd_hidden)
    torch.library.register_fake("neuralops::low_rank_bwd", fake_bwd)


if _library.LOADED:
    _register()
