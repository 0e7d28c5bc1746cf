"""Linear attention (bf16) against its peers: fla's ``chunk_linear_attn`` (when ``import fla`` works;
elu+1 and the [B, N, H, D] transposes applied as a user would), the torch forms, and SDPA (flash,
causal) as the softmax attention it replaces.

Bytes: each input read once, each output written once (fwd+bwd: q, k, v, grad_out read, out, dq,
dk, dv written). FLOPs: the recurrent form, the cheapest: 4 N D Dv per head forward (q S and the
k^T v update), twice that backward.

``python -m neuralops.bench.linear_attn --startup`` measures, in fresh processes, the first call's
latency and the host time per call against a plain torch op.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Callable

import torch
import torch.nn.functional as F

from neuralops.bench.harness import Case
from neuralops.bench.timing import add_graphed
from neuralops.core.triton_kernels import linear_attn as la

_BYTES = 2  # bf16


def _fla() -> Callable | None:
    try:
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception:  # noqa: BLE001 - any import failure means the peer is absent
        return None
    return chunk_linear_attn


def _elu1(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


def _inputs(b: int, h: int, n: int, d: int, grad: bool = False) -> list[torch.Tensor]:
    ts = [torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    return [t.requires_grad_() for t in ts] if grad else ts


def _fwd_bwd(fn: Callable[[], torch.Tensor], leaves: list[torch.Tensor], grad_out: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        for t in leaves:
            t.grad = None
        fn().backward(grad_out)
    return run


def _fla_fwd(fla: Callable, q, k, v) -> torch.Tensor:
    o, _ = fla(_elu1(q).transpose(1, 2), _elu1(k).transpose(1, 2), v.transpose(1, 2), scale=1.0, normalize=True)
    return o.transpose(1, 2)


def _masked_causal(q, k, v) -> torch.Tensor:
    """The plain O(N^2) form a user would write."""
    s = (_elu1(q) @ _elu1(k).transpose(-1, -2)).tril()
    return (s @ v) / (s.sum(-1, keepdim=True) + 1e-6)


def _einsum_bidirectional(q, k, v) -> torch.Tensor:
    qf, kf = _elu1(q), _elu1(k)
    s = torch.einsum("bhnd,bhne->bhde", kf, v)
    den = torch.einsum("bhnd,bhd->bhn", qf, kf.sum(2)) + 1e-6
    return torch.einsum("bhnd,bhde->bhne", qf, s) / den.unsqueeze(-1)


def _check(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    if not err < 2e-2:
        raise AssertionError(f"neuralops linear_attn {what} differs from its peer: relative error {err:.3e}")


def _causal_fwd(b: int, h: int, n: int, d: int) -> Case:
    q, k, v = _inputs(b, h, n, d)
    impls = {"neuralops": lambda: la.fwd(q, k, v, True)}
    fla = _fla()
    if fla is not None:
        _check(impls["neuralops"](), _fla_fwd(fla, q, k, v), "causal fwd (fla)")
        impls["fla chunk_linear_attn +phi"] = lambda: _fla_fwd(fla, q, k, v)
    if n <= 8192:
        _check(impls["neuralops"](), _masked_causal(q, k, v), "causal fwd (masked form)")
        impls["torch masked O(N^2)"] = lambda: _masked_causal(q, k, v)
        impls["SDPA flash causal (softmax)"] = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return Case("linear_attn causal fwd", f"B{b} H{h} N{n} D{d} bf16", 4 * b * h * n * d * _BYTES,
                4 * b * h * n * d * d, impls)


def _causal_fwd_bwd(b: int, h: int, n: int, d: int, peers: bool = True) -> Case:
    q, k, v = _inputs(b, h, n, d, grad=True)
    grad_out = torch.randn_like(q)
    impls = {"neuralops": _fwd_bwd(lambda: la.fwd(q, k, v, True), [q, k, v], grad_out)}
    fla = _fla()
    if peers and fla is not None:
        impls["fla chunk_linear_attn +phi"] = _fwd_bwd(lambda: _fla_fwd(fla, q, k, v), [q, k, v], grad_out)
    if peers and n <= 8192:
        impls["torch masked O(N^2)"] = _fwd_bwd(lambda: _masked_causal(q, k, v), [q, k, v], grad_out)
    if n <= 16384:
        impls["SDPA flash causal (softmax)"] = _fwd_bwd(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v], grad_out)
    return Case("linear_attn causal fwd+bwd", f"B{b} H{h} N{n} D{d} bf16", 11 * b * h * n * d * _BYTES,
                12 * b * h * n * d * d, impls)


def _bidirectional_fwd(b: int, h: int, n: int, d: int) -> Case:
    q, k, v = _inputs(b, h, n, d)
    _check(la.fwd(q, k, v, False), _einsum_bidirectional(q, k, v), "bidirectional fwd")
    return Case("linear_attn bidir fwd", f"B{b} H{h} N{n} D{d} bf16", 4 * b * h * n * d * _BYTES,
                4 * b * h * n * d * d, {
                    "neuralops": lambda: la.fwd(q, k, v, False),
                    "torch einsum": lambda: _einsum_bidirectional(q, k, v),
                })


def _decode(b: int, h: int, hkv: int, d: int) -> Case:
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    state = la.LinearAttnState(torch.randn(b, hkv, d, d, device="cuda"), torch.rand(b, hkv, d, device="cuda") * 100)

    def torch_step():
        kf = _elu1(k.float())
        s = state.S + kf.transpose(-1, -2) @ v.float()
        z = state.z + kf[:, :, 0]
        qf = _elu1(q.float()).reshape(b, hkv, h // hkv, d)
        out = (qf @ s) / ((qf * z[:, :, None]).sum(-1, keepdim=True) + 1e-6)
        return out.reshape(b, h, 1, d).to(q.dtype), s, z

    _check(la.fwd(q, k, v, True, initial_state=state), torch_step()[0], "decode step")
    state_bytes = 2 * 4 * (b * hkv * d * d + b * hkv * d)  # the state read and the new one written
    impls = {
        "neuralops": lambda: la.fwd(q, k, v, True, initial_state=state, return_state=True),
        "torch (fp32 state update)": torch_step,
    }
    # One step is a few microseconds of GPU work: graphs time it without the host's launch cost.
    add_graphed(impls, "neuralops, CUDA graph", impls["neuralops"])
    add_graphed(impls, "torch, CUDA graph", torch_step)
    return Case("linear_attn decode step", f"B{b} H{h} Hkv{hkv} N1 D{d} bf16+fp32 state",
                state_bytes + (2 * b * h + 2 * b * hkv) * d * _BYTES, 4 * b * h * d * d, impls)


def cases(quick: bool = False) -> list[Case]:
    out = [
        _causal_fwd(4, 16, 4096, 64),
        _causal_fwd(1, 16, 65536, 128),
        _causal_fwd_bwd(4, 16, 4096, 64),
        _causal_fwd_bwd(1, 16, 65536, 128),
        _bidirectional_fwd(4, 16, 4096, 64),
        _decode(64, 32, 8, 128),
    ]
    if quick:
        return out
    out += [_causal_fwd(2, 16, 16384, 64), _bidirectional_fwd(2, 16, 16384, 128)]
    for n in (2048, 4096, 8192):
        for d in (64, 128):
            if (n, d) != (4096, 64):
                out.append(_causal_fwd_bwd(4, 16, n, d, peers=False))
    return out


_STARTUP = textwrap.dedent("""
    import time, torch
    t0 = time.perf_counter()
    from neuralops.core.triton_kernels import linear_attn as la
    t1 = time.perf_counter()
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    out = la.fwd(q, k, v, True)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    # A process's first backward starts the autograd engine's device thread and loads the kernels
    # of sum and its gradient: torch's cost, timed apart on a plain op so the next figure is ours.
    w = torch.randn(8, device="cuda", requires_grad=True)
    (w * 2).sum().backward()
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    q.requires_grad_()
    out = la.fwd(q, k, v, True)
    out.sum().backward()
    torch.cuda.synchronize()
    t5 = time.perf_counter()
    x, y = (torch.randn(1, 1, 8, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    def host_us(fn, reps=2000):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        elapsed = time.perf_counter() - start
        torch.cuda.synchronize()
        return elapsed / reps * 1e6
    print(f"import {1e3 * (t1 - t0):.1f} ms; first fwd {1e3 * (t3 - t2):.1f} ms; torch's first backward "
          f"(a plain op) {1e3 * (t4 - t3):.1f} ms; then first fwd+bwd {1e3 * (t5 - t4):.1f} ms; "
          f"host per call: linear_attn fwd "
          f"{host_us(lambda: la.fwd(x, x, y, True)):.1f} us, torch.add {host_us(lambda: torch.add(x, y)):.1f} us")
""")


def startup() -> str:
    """First-call latency and host time per call, measured in a fresh process."""
    return subprocess.run([sys.executable, "-c", _STARTUP], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    if "--startup" in sys.argv:
        print(startup())
    else:
        print(__doc__)
