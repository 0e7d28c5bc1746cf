"""The sweep behind triton_src/linear_attn/fwd_wgmma.py (eighteenth session): the reduced Gluon walk
of benchmarks/linear_attn_wgmma_walk.py at each (features, cp.async stages, warps), checked against
float64 and timed beside the installed neuralops' causal forward kernels (torch profiler, median
per-kernel durations) at the shapes of the issue, for several segment counts G.

Gluon needs Triton 3.8, which the GPU machine lacks (3.6), so the two steps run on two machines:
    python benchmarks/linear_attn_wgmma_sweep.py compile DIR   # CPU machine: sm_90 cubins into DIR
    python benchmarks/linear_attn_wgmma_sweep.py time DIR      # GPU machine, neuralops installed
The cubins are launched through the driver (ctypes), as csrc/runtime does.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path

CONFIGS = ((64, 2, 4), (64, 3, 4), (64, 2, 8), (64, 3, 8), (128, 2, 8), (128, 3, 8), (128, 2, 4))
SHAPES = (((4, 16, 4096, 64), (2, 4, 8, 16)), ((2, 16, 16384, 64), (4, 8, 16)), ((1, 16, 65536, 64), (8, 16, 32)),
          ((1, 16, 65536, 128), (8, 16, 33, 64)), ((4, 16, 4096, 128), (2, 4, 8)), ((4, 16, 2048, 128), (1, 2, 4)))


def compile_all(out: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    from triton_src.aot import offline_driver

    offline_driver.activate(90)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    import linear_attn_wgmma_walk as walk

    out.mkdir(parents=True, exist_ok=True)
    names = "q_ptr k_ptr v_ptr o_ptr N L G s_bh s_n eps".split()
    types = ["*bf16"] * 4 + ["i32", "i32", "i32", "i64", "i64", "fp32"]
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 7, 8)}
    for d, stages, warps in CONFIGS:
        consts = {"C": 64, "D": d, "STAGES": stages, "num_warps": warps}
        sig = {**dict(zip(names, types)), **{k: "constexpr" for k in consts}}
        k = triton.compile(GluonASTSource(fn=walk.walk_kernel, signature=sig, constexprs=consts, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        name = f"walk_d{d}_s{stages}_w{warps}"
        (out / f"{name}.cubin").write_bytes(k.asm["cubin"])
        (out / f"{name}.meta").write_text(f"{k.metadata.name} {k.metadata.shared} {k.metadata.num_warps}\n")
        print(name, "shared", k.metadata.shared)


class _Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name}: CUDA driver error {rc}")


class Cubin:
    """One cubin's kernel, launched on torch's current stream."""

    def __init__(self, cu: _Driver, path: Path) -> None:
        import torch

        self.torch, self.cu = torch, cu
        name, shared, warps = path.with_suffix(".meta").read_text().split()
        self.shared, self.threads = int(shared), 32 * int(warps)
        self.module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuModuleLoadData", ctypes.byref(self.module), path.read_bytes())
        cu("cuModuleGetFunction", ctypes.byref(self.fn), self.module, name.encode())
        cu("cuFuncSetAttribute", self.fn, 8, self.shared)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

    def walk(self, q, k, v, o, segments: int) -> None:
        bh, n, d = q.shape
        rows = -(-n // segments // 64) * 64
        g = -(-n // rows)
        values = [ctypes.c_uint64(t.data_ptr()) for t in (q, k, v, o)]
        values += [ctypes.c_int32(n), ctypes.c_int32(rows), ctypes.c_int32(g), ctypes.c_int64(n * d),
                   ctypes.c_int64(d), ctypes.c_float(1e-6), ctypes.c_uint64(0), ctypes.c_uint64(0)]  # + scratch
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in values])
        stream = ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)
        self.cu("cuLaunchKernel", self.fn, g * bh, 1, 1, self.threads, 1, 1, self.shared, stream, params, None)


def reference(q, k, v, segments: int):
    """float64 causal elu+1 attention within each segment (zero start state)."""
    import torch

    bh, n, d = q.shape
    rows = -(-n // segments // 64) * 64
    out = torch.empty(bh, n, d, dtype=torch.float64, device=q.device)
    for a in range(0, n, rows):
        qf, kf = (torch.where(x > 0, x + 1, torch.exp(x)) for x in (q[:, a:a + rows].double(), k[:, a:a + rows].double()))
        s = (qf @ kf.transpose(1, 2)).tril()
        out[:, a:a + rows] = (s @ v[:, a:a + rows].double()) / (s.sum(-1, keepdim=True) + 1e-6)
    return out


def time_all(cubins: Path) -> None:
    import torch

    import neuralops  # noqa: F401 (registers the ops)
    from neuralops.bench.timing import kernel_spans

    def median_us(fn, match: str, reps: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        spans = kernel_spans(lambda: [fn() for _ in range(reps)])
        return statistics.median(end - start for name, start, end in spans if match in name)

    torch.zeros(1, device="cuda")
    cu = _Driver()
    cu("cuInit", 0)
    kerns = {p.stem: Cubin(cu, p) for p in sorted(cubins.glob("*.cubin"))}
    dim = lambda name: int(name.split("_d")[1].split("_")[0])  # noqa: E731
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, kern in kerns.items():
        for bh, n, segments in ((3, 1000, 1), (5, 2048, 4), (2, 4096, 3)):
            q, k, v = (torch.randn(bh, n, dim(name), device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
            o = torch.full_like(q, float("nan"))
            kern.walk(q, k, v, o, segments)
            ref = reference(q, k, v, segments)
            print(f"check {name} BH{bh} N{n} G{segments}: error {((o.double() - ref).norm() / ref.norm()).item():.2e}")
    op = torch.ops.neuralops.linear_attn_fwd
    for (b, h, n, d), counts in SHAPES:
        q4, k4, v4 = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
        args = (q4, k4, v4, None, None, None, None, "elu+1", True, 1e-6, 1.0, False)
        names = sorted({s[0] for s in kernel_spans(lambda: op(*args))})
        shipped = ", ".join(f"{nm[:20]} {median_us(lambda: op(*args), nm):.1f} us" for nm in names)
        print(f"B{b} H{h} N{n} D{d} neuralops kernels: {shipped}")
        q, k, v = (x.reshape(b * h, n, d) for x in (q4, k4, v4))
        o = torch.empty_like(q)
        for g in counts:
            cells = [f"{name} {median_us(lambda: kern.walk(q, k, v, o, g), 'walk_kernel'):7.1f}"
                     for name, kern in kerns.items() if dim(name) == d]
            print(f"B{b} H{h} N{n} D{d} G{g:3d} programs {g * b * h:5d}: " + "  ".join(cells))


if __name__ == "__main__":
    {"compile": compile_all, "time": time_all}[sys.argv[1]](Path(sys.argv[2]))
