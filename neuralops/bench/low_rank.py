"""Low-rank projection y = (x @ V.T) @ U.T + bias against two ``F.linear`` calls (cuBLAS).

Each shape is timed forward and forward+backward, for neuralops with ``backend="auto"`` (what users
get), ``"triton"`` (the Triton kernels only) and ``"cublas"`` (the op routed to ATen/cuBLAS), next
to two ``F.linear`` calls (and autograd through them). The case name says which implementation
``auto`` picked. Decode forwards (M <= 64), where the host's launch cost dominates eager times, are
also timed on the GPU alone, for ``auto`` and two ``F.linear`` calls, in CUDA graphs:
  - "CUDA graph": one call per replay, after the L2 flush every repetition gets;
  - "graph of L layers": one replay calls the op over L weight sets that together exceed the L2,
    timed per call: every call reads its weights from DRAM, as the layers of a served model do,
    without the replay's fixed cost of a few us that a one-call graph adds (timing.add_graphed_layers).
    Back to back, the decode kernels prefetch the next call's weights during the current call;
    "+ SiLU" puts another op's kernel after each call (for both), which leaves no such overlap.
Forward+backward steps are also replayed from a CUDA graph ("CUDA graph"), for ``auto`` and two
``F.linear`` calls with autograd: eager, autograd's host work can leave the GPU idle between kernels.
Run: ``python -m neuralops.bench low_rank [--quick]``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from neuralops.bench.harness import Case
from neuralops.bench.timing import add_graphed, add_graphed_layers
from neuralops.core.triton_kernels import low_rank

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_BACKENDS = ("auto", "triton", "cublas")


def _inputs(m: int, k: int, r: int, n: int, dtype: torch.dtype, grad: bool) -> list[torch.Tensor]:
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    V = torch.randn(r, k, device="cuda", dtype=dtype) / k**0.5
    U = torch.randn(n, r, device="cuda", dtype=dtype) / r**0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    return [t.requires_grad_(grad) for t in (x, U, V, b)]


def _check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = ((got.double() - want.double()).norm() / want.double().norm()).item()
    if not err <= 2e-2:
        raise AssertionError(f"neuralops low_rank {what} differs from two F.linear calls: relative error {err:.3g}")


def _fwd_case(m: int, k: int, r: int, n: int, dt: str) -> Case:
    dtype = _DTYPES[dt]
    x, U, V, b = _inputs(m, k, r, n, dtype, grad=False)
    peer = F.linear(F.linear(x, V), U, b)
    for backend in _BACKENDS:
        _check(low_rank.fwd(x, U, V, b, backend=backend), peer, f"fwd backend={backend}")
    size = torch.finfo(dtype).bits // 8
    nbytes = (m * k + r * k + n * r + n + m * n) * size
    flops = 2 * m * r * (k + n)
    route = low_rank.route(x, U, V, b)
    impls: dict[str, Callable[[], object]] = {
        f"neuralops {backend}": (lambda be=backend: low_rank.fwd(x, U, V, b, backend=be)) for backend in _BACKENDS
    }
    impls["2x F.linear"] = lambda: F.linear(F.linear(x, V), U, b)
    if m <= _DECODE_ROWS:  # decode: the host's launch cost dominates eager times; graphs show the GPU's
        add_graphed(impls, "neuralops auto, CUDA graph", impls["neuralops auto"])
        add_graphed(impls, "2x F.linear, CUDA graph", impls["2x F.linear"])
        add_graphed_layers(impls, "neuralops auto", lambda U, V, b: low_rank.fwd(x, U, V, b), (U, V, b))
        add_graphed_layers(impls, "neuralops triton",
                           lambda U, V, b: low_rank.fwd(x, U, V, b, backend="triton"), (U, V, b))
        add_graphed_layers(impls, "2x F.linear", lambda U, V, b: F.linear(F.linear(x, V), U, b), (U, V, b))
        # A SiLU after each call, as in a model, where another op's kernel sits between two calls:
        # the decode kernels then cannot prefetch a call's weights during the one before.
        add_graphed_layers(impls, "neuralops auto + SiLU",
                           lambda U, V, b: F.silu(low_rank.fwd(x, U, V, b)), (U, V, b))
        add_graphed_layers(impls, "2x F.linear + SiLU",
                           lambda U, V, b: F.silu(F.linear(F.linear(x, V), U, b)), (U, V, b))
    return Case("low_rank fwd", f"M{m} in{k} out{n} r{r} {dt} (auto: {route})", nbytes, flops, impls)


def _fwd_bwd_case(m: int, k: int, r: int, n: int, dt: str) -> Case:
    dtype = _DTYPES[dt]
    x, U, V, b = _inputs(m, k, r, n, dtype, grad=True)
    g = torch.randn(m, n, device="cuda", dtype=dtype)
    params = (x, U, V, b)

    def neuralops(backend: str):
        return torch.autograd.grad(low_rank.fwd(x, U, V, b, backend=backend), params, g)

    def peer():
        return torch.autograd.grad(F.linear(F.linear(x, V), U, b), params, g)

    want = peer()
    for backend in _BACKENDS:
        for got, ref, name in zip(neuralops(backend), want, ("dx", "dU", "dV", "dbias")):
            _check(got, ref, f"{name} backend={backend}")
    size = torch.finfo(dtype).bits // 8
    # forward, then the backward: read g, x, U, V and h; write dx, dU, dV, dbias (h kept by the forward).
    nbytes = ((m * k + r * k + n * r + n + m * n + m * r)
              + (m * n + m * k + r * k + n * r + m * r) + (m * k + n * r + r * k + n)) * size
    flops = 6 * m * r * (k + n)
    route = low_rank.route(x, U, V, b, backward=True)
    impls: dict[str, Callable[[], object]] = {
        f"neuralops {backend}": (lambda be=backend: neuralops(be)) for backend in _BACKENDS
    }
    impls["2x F.linear + autograd"] = peer
    # The step replayed from a CUDA graph: the GPU's time alone. Eager, autograd's host work (about
    # 100 us a step) can outlast the timer's cover and leave the GPU waiting between kernels, by
    # different amounts for paths that run the very same kernels (results/low_rank.md).
    add_graphed(impls, "neuralops auto, CUDA graph", impls["neuralops auto"])
    add_graphed(impls, "2x F.linear + autograd, CUDA graph", peer)
    return Case("low_rank fwd+bwd", f"M{m} in{k} out{n} r{r} {dt} (auto bwd: {route})", nbytes, flops, impls)


_DECODE_ROWS = 64  # the decode sizes: M = 16 and 64
_DECODE = [(16, 4096, 256, 4096), (64, 4096, 256, 4096), (16, 4096, 1024, 11008), (64, 4096, 512, 11008)]
_LARGE_M = (4096, 8192, 32768)
_RANKS = (128, 256, 512, 1024)
_IN_OUT = ((4096, 4096), (4096, 11008))


def cases(quick: bool = False) -> list[Case]:
    if quick:
        shapes = [(16, 4096, 256, 4096), (64, 4096, 256, 4096), (8192, 4096, 256, 4096),
                  (8192, 4096, 1024, 4096), (32768, 4096, 512, 11008)]
        return ([_fwd_case(*s, "bf16") for s in shapes] +
                [_fwd_bwd_case(*s, "bf16") for s in shapes[1:4]])
    shapes = _DECODE + [(m, k, r, n) for m in _LARGE_M for r in _RANKS for k, n in _IN_OUT]
    extra = [(16, 4096, 256, 4096, "fp16"), (16, 4096, 256, 4096, "fp32"), (8192, 4096, 256, 4096, "fp32"),
             (4000, 4000, 250, 4000, "bf16")]  # odd sizes: the general kernels
    out = []
    for s in shapes:
        out += [_fwd_case(*s, "bf16"), _fwd_bwd_case(*s, "bf16")]
    for *s, dt in extra:
        out += [_fwd_case(*s, dt), _fwd_bwd_case(*s, dt)]
    return out
