"""Triton Fused Linear Attention Kernel (Forward & Backward).

Semantics. q ``[B, H, N, D]``, k ``[B, Hkv, N, D]``, v ``[B, Hkv, N, Dv]`` (Dv may differ from D;
H a multiple of Hkv: grouped-query attention, each query head reading kv head ``h // (H // Hkv)``)::

    s_ij   = scale * phi(q_i) . phi(k_j)                          (j <= i if is_causal, else all j)
    out_i  = sum_j s_ij v_j / (sum_j s_ij + eps)                  phi in "elu+1", "relu", "identity"
    out_i  = sum_j (scale * q_i . k_j) v_j                        phi = "softmax_free" (no normalizer)

with ``elu+1(x) = x + 1 if x > 0 else exp(x)``, applied to q and k inside the kernels (never written
to memory). Cosformer: with ``cos_weight`` and ``sin_weight`` (one value per position, ``[N]`` or
``[B, N]``, e.g. from ``cosformer_weights``), ``s_ij`` is multiplied by ``cos_i cos_j + sin_i sin_j``,
applied in registers. Callers that pre-applied a modulation pass their tensors with no weights.
No gradient flows to cos_weight and sin_weight.

Keyword-only extras: ``scale`` (default 1.0), ``initial_state`` and ``return_state``. The state after
a sequence is ``S = sum_j kf_j^T v_j`` and ``z = sum_j kf_j``, fp32 (fp64 for fp64 inputs), where
``kf_j = phi(k_j)`` or, under Cosformer, ``(cos_j phi(k_j), sin_j phi(k_j))``:
``S [B, Hkv, D, Dv]`` and ``z [B, Hkv, D]``, or ``[B, Hkv, 2, D, Dv]`` and ``[B, Hkv, 2, D]`` under
Cosformer (index 0 the cos part, 1 the sin part). States belong to kv heads. With
``return_state=True`` the result is ``(out, LinearAttnState(S, z))``; ``initial_state`` takes such a
state (or an ``(S, z)`` pair) and continues from it: in causal mode, splitting a sequence into
pieces with the state carried gives the output of one call (Cosformer weights then index absolute
positions: ``cosformer_weights(n, max_len, start=offset)``); N = 1 with a state is a decode step,
one kernel launch. In bidirectional mode the initial state is added to every row's sums.
Gradients flow to ``initial_state`` and from the returned state.

Dtypes fp16, bf16, fp32 on CUDA (fp32 accumulation; dot operands in bf16 for bf16 tensors, tf32
for fp16, tf32x3 for fp32), any floating dtype on the fallback; D and Dv up to 256 on the kernels
(under Cosformer D above 128 in bf16 and fp16), any N >= 1, any strides with a unit last stride
(a transposed ``[B, N, H, D]`` view is read in place).
Causal mode is chunked: O(N) memory, never an N x N matrix. Under Cosformer above D 128 the kernels
walk the two feature parts of the forward one after the other, through an fp32 buffer of the first
part's sums (``[B, H, N, Dv]``, held during the call). For the backward, autograd saves the
inputs and the forward's per-segment states (fp32 ``[B, Hkv, G, D*Dv + D]``, padded to 16, with G a
few segments per multiprocessor-wave: 4 MB at B4 H16 N4096 D64), which the backward would otherwise
recompute with a pass over k and v; the seed's ``bwd`` recomputes them.

On CUDA tensors the work runs on AOT-compiled Triton kernels (``torch.ops.neuralops.linear_attn_fwd``
and ``linear_attn_bwd``); elsewhere, or outside the kernels' limits, on
``linear_attn_pytorch_fallback``, the chunked and readable reference. ``fwd`` is differentiable
either way, twice too (on the kernels the second derivative runs the backward's ATen form), and
works under ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from neuralops import _library
from neuralops.core.arguments import check_int
from neuralops.core.suitability import kernels_ready, register_op_limits

PHIS = ("elu+1", "relu", "identity", "softmax_free")
MAX_HEAD_DIM = 256
# Cosformer doubles the features: above D = 128 it needs the 512-feature kernels, built for bf16 and
# fp16 (triton_src/linear_attn/spec.py COSFORMER_BLOCK_DTYPES says why; a CPU test keeps the two equal).
COSFORMER_WIDE_DTYPES = (torch.bfloat16, torch.float16)
MAX_NARROW_COSFORMER_HEAD_DIM = 128
_CHUNK = 64  # rows per step of the fallback's causal scan


def _limits(head_dim: int = 0, seq_len: int = 0, value_dim: int = 0, cosformer: bool = False,
            dtype: torch.dtype | None = None, **_: Any) -> str | None:
    if head_dim > MAX_HEAD_DIM:
        return f"the kernels take head_dim up to {MAX_HEAD_DIM}, got {head_dim}"
    if cosformer and head_dim > MAX_NARROW_COSFORMER_HEAD_DIM and dtype not in COSFORMER_WIDE_DTYPES:
        return (f"under Cosformer the kernels take head_dim up to {MAX_NARROW_COSFORMER_HEAD_DIM} for {dtype} "
                f"({MAX_HEAD_DIM} for bfloat16 and float16), got {head_dim}")
    if value_dim > MAX_HEAD_DIM:
        return f"the kernels take a value head dim up to {MAX_HEAD_DIM}, got {value_dim}"
    if seq_len >= 2**31:
        return f"the kernels take seq_len below 2**31, got {seq_len}"
    return None


register_op_limits("linear_attn", _limits)


class LinearAttnState(NamedTuple):
    """The state after a sequence, fp32 (fp64 for fp64 inputs): ``S [B, Hkv, (2,) D, Dv]``, ``z [B, Hkv, (2,) D]``."""

    S: torch.Tensor
    z: torch.Tensor


def cosformer_weights(
    seq_len: int,
    max_len: int | None = None,
    *,
    start: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosformer's position weights ``(cos(pi i / (2 M)), sin(pi i / (2 M)))``, each ``[seq_len]``, for
    positions ``i = start .. start + seq_len - 1``; ``M = max_len``, by default ``start + seq_len``.
    When streaming, pass the same ``max_len`` for every piece and ``start`` = the piece's offset."""
    check_int(seq_len, "seq_len", "neuralops.linear_attn")
    check_int(start, "start", "neuralops.linear_attn")
    if max_len is not None:
        check_int(max_len, "max_len", "neuralops.linear_attn")
    if seq_len < 0 or start < 0:
        raise ValueError(f"neuralops.linear_attn: seq_len and start must be >= 0, got {seq_len} and {start}")
    m = start + seq_len if max_len is None else max_len
    if m <= 0 or m < start + seq_len:
        raise ValueError(f"neuralops.linear_attn: max_len ({max_len}) must cover positions up to "
                         f"start + seq_len = {start + seq_len}")
    angle = (torch.arange(seq_len, device=device, dtype=torch.float64) + start) * (math.pi / (2 * m))
    return angle.cos().to(dtype), angle.sin().to(dtype)


def _options(kwargs: dict[str, Any], fn: str) -> tuple[float, LinearAttnState | None, bool]:
    unknown = sorted(set(kwargs) - {"scale", "initial_state", "return_state"})
    if unknown:
        raise TypeError(f"neuralops.linear_attn.{fn}() got unexpected keyword arguments {unknown}; "
                        "the extras are scale, initial_state and return_state")
    scale = _number(kwargs.get("scale", 1.0), "scale")
    state = kwargs.get("initial_state")
    if state is not None:
        if not (isinstance(state, (tuple, list)) and len(state) == 2
                and all(isinstance(t, torch.Tensor) for t in state)):
            raise TypeError("neuralops.linear_attn: initial_state must be a LinearAttnState or an (S, z) pair "
                            "of tensors")
        state = LinearAttnState(*state)
    return scale, state, bool(kwargs.get("return_state", False))


def _number(x: Any, name: str) -> float:
    if not isinstance(x, (int, float)):
        raise TypeError(f"neuralops.linear_attn: {name} must be a Python number, got {type(x).__name__}")
    return float(x)


def _phi_kind(phi: str) -> tuple[str, bool]:
    if phi not in PHIS:
        raise ValueError(f"neuralops.linear_attn: phi must be one of {PHIS}, got {phi!r}")
    return ("identity" if phi == "softmax_free" else phi), phi != "softmax_free"


def _state_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _state_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cosformer: bool) -> tuple[tuple, tuple]:
    b, hkv, d, dv = q.shape[0], k.shape[1], q.shape[3], v.shape[3]
    parts = (2,) if cosformer else ()
    return (b, hkv, *parts, d, dv), (b, hkv, *parts, d)


def _check_inputs(q: Any, k: Any, v: Any, cos: Any, sin: Any, state: LinearAttnState | None) -> None:
    for name, t, dims in (("q", q, "[B, H, N, D]"), ("k", k, "[B, Hkv, N, D]"), ("v", v, "[B, Hkv, N, Dv]")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"neuralops.linear_attn: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"neuralops.linear_attn: {name} must be 4-D {dims}, got shape {tuple(t.shape)}")
    if not q.dtype.is_floating_point or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"neuralops.linear_attn: q, k and v must have one floating dtype, got {q.dtype}, "
                        f"{k.dtype} and {v.dtype}")
    _check_device(q, k, "k")
    _check_device(q, v, "v")
    b, h, n, d = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(f"neuralops.linear_attn: q, k and v must have one batch size, got {b}, {k.shape[0]} "
                         f"and {v.shape[0]}")
    if k.shape[2] != n or v.shape[2] != n:
        raise ValueError(f"neuralops.linear_attn: q, k and v must have one sequence length, got {n}, "
                         f"{k.shape[2]} and {v.shape[2]}")
    if k.shape[3] != d:
        raise ValueError(f"neuralops.linear_attn: k must have q's head dim {d}, got {k.shape[3]}")
    if v.shape[1] != k.shape[1]:
        raise ValueError(f"neuralops.linear_attn: k and v must have one number of heads, got {k.shape[1]} and {v.shape[1]}")
    if d == 0 or v.shape[3] == 0:
        raise ValueError(f"neuralops.linear_attn: head dims must be positive, got D={d} and Dv={v.shape[3]}")
    if h == 0 or k.shape[1] == 0 or h % k.shape[1] != 0:
        raise ValueError(f"neuralops.linear_attn: q's heads ({h}) must be a positive multiple of k's and v's "
                         f"({k.shape[1]})")
    if (cos is None) != (sin is None):
        raise ValueError("neuralops.linear_attn: cos_weight and sin_weight go together: pass both or neither")
    for name, w in (("cos_weight", cos), ("sin_weight", sin)):
        if w is None:
            continue
        if not isinstance(w, torch.Tensor) or not w.dtype.is_floating_point:
            raise TypeError(f"neuralops.linear_attn: {name} must be a floating point tensor")
        if not ((w.dim() == 1 and w.shape[0] == n) or (w.dim() == 2 and w.shape[1] == n and w.shape[0] in (1, b))):
            raise ValueError(f"neuralops.linear_attn: {name} must have shape [N] or [B, N] = [{n}] or [{b}, {n}], "
                             f"got {tuple(w.shape)}")
        _check_device(q, w, name)
    if cos is not None and cos.shape != sin.shape:
        raise ValueError(f"neuralops.linear_attn: cos_weight and sin_weight must have one shape, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    if state is not None:
        _check_state(q, k, v, cos is not None, state, ("initial_state.S", "initial_state.z"))


def _check_state(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cosformer: bool, state: LinearAttnState,
                 names: tuple[str, str]) -> None:
    s_shape, z_shape = _state_shapes(q, k, v, cosformer)
    layout = "[B, Hkv, 2, D, Dv] and [B, Hkv, 2, D] under Cosformer" if cosformer else "[B, Hkv, D, Dv] and [B, Hkv, D]"
    for name, t, shape in zip(names, state, (s_shape, z_shape)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"neuralops.linear_attn: {name} must have shape {shape} ({layout}), got {got}")
        _check_device(q, t, name)


def _check_device(q: torch.Tensor, t: torch.Tensor, name: str) -> None:
    # The C++ op's message (check_same_device): one error whichever layer catches it. The fake
    # implementations need the check as much as the fallback: a call with any one tensor on "meta"
    # dispatches to them, and they would return uninitialized memory on q's device.
    if t.device != q.device:
        raise ValueError(f"neuralops.linear_attn: q is on {q.device} but {name} is on {t.device}")


def _check_grad_out(q: torch.Tensor, v: torch.Tensor, grad_out: Any) -> None:
    if not isinstance(grad_out, torch.Tensor):
        raise TypeError(f"neuralops.linear_attn: grad_out must be a torch.Tensor, got {type(grad_out).__name__}")
    shape = [q.shape[0], q.shape[1], q.shape[2], v.shape[3]]
    if list(grad_out.shape) != shape:
        raise ValueError(f"neuralops.linear_attn: grad_out must have the output's shape [B, H, N, Dv] = {shape}, "
                         f"got {list(grad_out.shape)}")
    if grad_out.dtype != q.dtype:
        raise TypeError(f"neuralops.linear_attn: grad_out must be {q.dtype} like q, got {grad_out.dtype}")
    _check_device(q, grad_out, "grad_out")


def _weights(cos: torch.Tensor | None, sin: torch.Tensor | None, dtype: torch.dtype):
    """Position weights as [B or 1, 1, 1, N, 1] (the grouped layout below), or None."""
    if cos is None:
        return None
    return tuple(w.detach().to(dtype).reshape(-1, 1, 1, w.shape[-1], 1) for w in (cos, sin))


def _features(x: torch.Tensor, groups: int, phi: str, mult: float, weights) -> torch.Tensor:
    """[B, Hx, N, D] -> [B, Hx / groups, groups, N, F]: phi, scale, Cosformer parts concatenated."""
    f = {"identity": x, "relu": torch.relu(x), "elu+1": torch.nn.functional.elu(x) + 1}[phi] * mult
    b, hx, n, d = x.shape
    f = f.reshape(b, hx // groups, groups, n, d)
    if weights is None:
        return f
    return torch.cat([f * weights[0], f * weights[1]], dim=-1)


def linear_attn_pytorch_fallback(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    phi: str = "elu+1",
    eps: float = 1e-6,
    cos_weight: torch.Tensor | None = None,
    sin_weight: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, LinearAttnState]:
    """Linear attention in plain PyTorch (differentiable, O(N) memory); the reference for the kernels.

    Causal mode walks the sequence in chunks of 64 rows: within a chunk the masked (qf kf^T) v, before
    it the running state S, z. Computes in fp32 (fp64 for fp64 inputs)."""
    scale, state, return_state = _options(kwargs, "linear_attn_pytorch_fallback")
    eps = _number(eps, "eps")
    kind, normalize = _phi_kind(phi)
    _check_inputs(q, k, v, cos_weight, sin_weight, state)
    b, h, n, d = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    dt = _state_dtype(q)
    weights = _weights(cos_weight, sin_weight, dt)
    qf = _features(q.to(dt), h // hkv, kind, scale, weights)       # [B, Hkv, R, N, F]
    kf = _features(k.to(dt), 1, kind, 1.0, weights)                # [B, Hkv, 1, N, F]
    vv = v.to(dt).unsqueeze(2)                                     # [B, Hkv, 1, N, Dv]
    f = kf.shape[-1]
    if state is None:
        s = qf.new_zeros(b, hkv, 1, f, dv)
        z = qf.new_zeros(b, hkv, 1, f)
    else:
        s = state.S.to(dt).reshape(b, hkv, 1, f, dv)
        z = state.z.to(dt).reshape(b, hkv, 1, f)
    if is_causal:
        pieces = []
        for c0 in range(0, n, _CHUNK):
            qc, kc, vc = qf[:, :, :, c0:c0 + _CHUNK], kf[:, :, :, c0:c0 + _CHUNK], vv[:, :, :, c0:c0 + _CHUNK]
            a = (qc @ kc.transpose(-1, -2)).tril()
            num = a @ vc + qc @ s
            if normalize:
                num = num / (a.sum(-1) + (qc * z.unsqueeze(3)).sum(-1) + eps).unsqueeze(-1)
            pieces.append(num)
            s = s + kc.transpose(-1, -2) @ vc
            z = z + kc.sum(3)
        out = torch.cat(pieces, dim=3) if pieces else qf.new_zeros(b, hkv, h // hkv, 0, dv)
    else:
        s = s + kf.transpose(-1, -2) @ vv
        z = z + kf.sum(3)
        out = qf @ s
        if normalize:
            out = out / ((qf * z.unsqueeze(3)).sum(-1) + eps).unsqueeze(-1)
    out = out.reshape(b, h, n, dv).to(q.dtype)
    if not return_state:
        return out
    s_shape, z_shape = _state_shapes(q, k, v, cos_weight is not None)
    return out, LinearAttnState(s.reshape(s_shape), z.reshape(z_shape))


def is_supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> bool:
    """Check whether linear attention can run on the Triton kernel."""
    # Every call runs this: bare attribute checks here, the reasons in check_triton_suitability.
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if k.device != q.device or v.device != q.device or not kernels_ready(q):
        return False
    cosformer = kwargs.get("cos_weight") is not None
    return _limits(q.shape[3], q.shape[2], v.shape[3], cosformer, q.dtype if cosformer else None) is None


def _state_args(q: torch.Tensor, state: LinearAttnState | None) -> tuple:
    if state is None:
        return None, None
    dt = _state_dtype(q)
    return state.S.to(dt), state.z.to(dt)


def _on_kernels(q: Any, k: Any, v: Any, cos: Any) -> int:
    """fwd's and bwd's per-call test: ``is_supported`` less the checks the op makes itself (k's and
    v's ranks, dtypes and devices), which raise the fallback's exception types naming the same
    argument (see neuralops.core.suitability on the per-call path). ``kernels_ready``'s answer: 0,
    READY or READY_TRACED."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return 0
    ready = kernels_ready(q)
    if not ready:
        return 0
    qs, vs = q.shape, v.shape
    if len(qs) != 4 or len(vs) != 4:
        return 0
    cosformer = cos is not None
    # q.dtype only under Cosformer: an attribute read costs the plain calls host time
    return ready if _limits(qs[3], qs[2], vs[3], cosformer, q.dtype if cosformer else None) is None else 0


def fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    phi: str = "elu+1",
    eps: float = 1e-6,
    cos_weight: torch.Tensor | None = None,
    sin_weight: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, LinearAttnState]:
    """Forward entrypoint for fused Triton linear attention.

    Returns ``out [B, H, N, Dv]``, or ``(out, LinearAttnState(S, z))`` with ``return_state=True``.
    Keyword-only: ``scale`` (1.0), ``initial_state`` (None), ``return_state`` (False).
    """
    scale, state, return_state = _options(kwargs, "fwd") if kwargs else (1.0, None, False)
    ready = _on_kernels(q, k, v, cos_weight)
    if not ready:
        return linear_attn_pytorch_fallback(q, k, v, is_causal, phi, eps, cos_weight, sin_weight, **kwargs)
    s0, z0 = _state_args(q, state)
    out, s, z = _FWD.entry(ready)(q, k, v, cos_weight, sin_weight, s0, z0, phi, bool(is_causal), _number(eps, "eps"),
                                  scale, return_state)
    return (out, LinearAttnState(s, z)) if return_state else out


def bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool = False,
    phi: str = "elu+1",
    eps: float = 1e-6,
    cos_weight: torch.Tensor | None = None,
    sin_weight: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward entrypoint computing gradients for q, k, v (of ``fwd``'s output, given grad_out)."""
    scale, state, _ = _options(kwargs, "bwd")
    ready = _on_kernels(q, k, v, cos_weight)
    if ready:
        s0, z0 = _state_args(q, state)
        dq, dk, dv, _, _ = _BWD.entry(ready)(
            grad_out, q, k, v, cos_weight, sin_weight, s0, z0, None, None, phi, bool(is_causal), _number(eps, "eps"),
            scale, False, None)
        return dq, dk, dv
    _check_inputs(q, k, v, cos_weight, sin_weight, state)
    _check_grad_out(q, v, grad_out)
    q_req, k_req, v_req = (t.detach().requires_grad_(True) for t in (q, k, v))
    extras = {key: val for key, val in kwargs.items() if key != "return_state"}
    with torch.enable_grad():
        out = linear_attn_pytorch_fallback(q_req, k_req, v_req, is_causal, phi, eps, cos_weight, sin_weight, **extras)
        dq, dk, dv = torch.autograd.grad(out, [q_req, k_req, v_req], grad_out)
    return dq, dk, dv


# The ops, looked up once (_library.op).
_FWD = _library.op("linear_attn_fwd") if _library.LOADED else None
_BWD = _library.op("linear_attn_bwd") if _library.LOADED else None


def _register() -> None:
    # Autograd is registered in C++ (csrc/ops/linear_attn_autograd.cpp): shared with C++ callers, no
    # Python per call.
    def op_state(s, z, names):
        if (s is None) != (z is None):
            raise ValueError(f"neuralops.linear_attn: {names[0]} and {names[1]} go together: pass both or neither")
        return None if s is None else LinearAttnState(s, z)

    def fake_fwd(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state):
        state = op_state(s0, z0, ("initial_S", "initial_z"))
        _phi_kind(phi)
        _check_inputs(q, k, v, cos, sin, state)
        s_shape, z_shape = _state_shapes(q, k, v, cos is not None)
        dt = _state_dtype(q)
        out = q.new_empty(q.shape[0], q.shape[1], q.shape[2], v.shape[3])
        if not return_state:
            return out, None, None
        return out, q.new_empty(s_shape, dtype=dt), q.new_empty(z_shape, dtype=dt)

    def fake_fwd_train(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state):
        out, s, z = fake_fwd(q, k, v, cos, sin, s0, z0, phi, causal, eps, scale, return_state)
        shape = [0]
        if q.device.type == "cuda":
            device = q.device.index if q.device.index is not None else torch.cuda.current_device()
            shape = torch.ops.neuralops.linear_attn_states_shape(
                q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3], v.shape[3], q.dtype, phi, causal,
                cos is not None, device)
        return out, s, z, q.new_empty(shape, dtype=torch.float32)

    def fake_bwd(grad_out, q, k, v, cos, sin, s0, z0, grad_s, grad_z, phi, causal, eps, scale, state_grad,
                 fwd_states=None):
        state = op_state(s0, z0, ("initial_S", "initial_z"))
        grad_state = op_state(grad_s, grad_z, ("grad_S", "grad_z"))
        _phi_kind(phi)
        _check_inputs(q, k, v, cos, sin, state)
        _check_grad_out(q, v, grad_out)
        if grad_state is not None:
            _check_state(q, k, v, cos is not None, grad_state, ("grad_S", "grad_z"))
        if fwd_states is not None:
            _check_device(q, fwd_states, "fwd_states")
        s_shape, z_shape = _state_shapes(q, k, v, cos is not None)
        dt = _state_dtype(q)
        grads = (torch.empty_like(q, memory_format=torch.contiguous_format),
                 torch.empty_like(k, memory_format=torch.contiguous_format),
                 torch.empty_like(v, memory_format=torch.contiguous_format))
        if not state_grad:
            return (*grads, None, None)
        return (*grads, q.new_empty(s_shape, dtype=dt), q.new_empty(z_shape, dtype=dt))

    torch.library.register_fake("neuralops::linear_attn_fwd", fake_fwd)
    torch.library.register_fake("neuralops::linear_attn_fwd_train", fake_fwd_train)
    torch.library.register_fake("neuralops::linear_attn_bwd", fake_bwd)


if _library.LOADED:
    _register()
