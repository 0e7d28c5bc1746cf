"""What the AOT signature costs against Triton's own integer specialization: the linear attention
forward (state pass, scan and forward kernel) through Triton's JIT on a GPU
(tests/linear_attn_driver.py), with the state pass and forward kernels redeclared by
`triton.jit(do_not_specialize=...)`:

    jit       Triton's specialization (integers equal to 1 compiled in, 16-divisible ones hinted)
    aotlike   every integer the AOT build leaves unhinted left unspecialized
    aot+ones  as aotlike, but phi, the part count, normalize and has_s specialized (FEAT's share)
    aot+div   as aotlike, but the 16-divisibility of sizes and strides specialized

A development tool (it needs Triton and a GPU; neuralops does not). The seventh session's run is in
benchmarks/results/linear_attn.md.

    python benchmarks/jit_specialization.py      # from the repo root
"""

import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import linear_attn_driver as drv  # noqa: E402
from triton_src.linear_attn import kernels as K  # noqa: E402

ORIGINAL = {name: getattr(K, name) for name in ("la_fwd_kernel", "la_state_kernel")}
UNHINTED = {
    "la_fwd_kernel": ["H", "HKV", "N", "DS", "DVS", "G", "L", "phi_kind", "normalize", "n_parts", "has_s",
                      "write_final", "stats", "part", "sw_b", "ss_bh", "ss_g", "sz_bh", "sz_g"],
    "la_state_kernel": ["HKV", "N", "DS", "DVS", "G", "L", "phi_kind", "n_parts", "normalize", "sw_b", "EP"],
}
SWITCHES = {"phi_kind", "n_parts", "normalize", "has_s"}
MODES = {
    "aotlike": lambda args: args,
    "aot+ones": lambda args: [a for a in args if a not in SWITCHES],
    "aot+div": lambda args: [a for a in args if a in SWITCHES or a in ("write_final", "stats")],
}


def use(mode: str, kernels: dict) -> None:
    for name, fn in ORIGINAL.items():
        setattr(K, name, fn if mode == "jit" else kernels[name, mode])


def main() -> None:
    # FEAT 0 keeps phi and the part count run-time arguments, as the AOT build had them before FEAT.
    drv.feature_key = lambda phi_kind, n_parts: 0
    kernels = {(name, mode): triton.jit(do_not_specialize=pick(UNHINTED[name]))(fn.fn)
               for name, fn in ORIGINAL.items() for mode, pick in MODES.items()}
    for causal, shapes in ((False, [(4, 16, 4096, 128), (1, 16, 65536, 128)]),
                           (True, [(4, 16, 4096, 64), (1, 16, 65536, 128)])):
        for b, h, n, d in shapes:
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
            use("jit", kernels)
            ref = drv.forward(q, k, v, causal=causal)[0].float()
            for mode in ("jit", *MODES):
                use(mode, kernels)
                out = drv.forward(q, k, v, causal=causal)[0].float()
                diff = ((out - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench_cudagraph(lambda: drv.forward(q, k, v, causal=causal), rep=40,
                                                       return_mode="median")
                print(f"{'causal' if causal else 'bidir'} B{b} H{h} N{n} D{d} {mode:8s}: {ms:.4f} ms "
                      f"(against jit {diff:.1e})", flush=True)
    use("jit", kernels)


if __name__ == "__main__":
    main()
