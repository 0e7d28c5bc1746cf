"""Two causal forward+backward passes of linear attention in bf16, for a profiler to attach to: the
installed op (its AOT cubins), or with --jit the same kernels through Triton's JIT
(tests/linear_attn_driver.py, which mirrors csrc/ops/linear_attn.cpp).

    ncu --clock-control none --kernel-name regex:la_ --metrics gpu__time_duration.sum \
        python benchmarks/profile_linear_attn.py B H N D [--jit]

The second pass is the one to read (the first loads modules or compiles).
"""

import sys
from pathlib import Path

import torch

b, h, n, d = (int(x) for x in sys.argv[1:5])
q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(4))
if "--jit" in sys.argv:
    ROOT = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    import linear_attn_driver as drv  # noqa: E402

    def step() -> None:
        drv.forward(q, k, v, causal=True)
        drv.backward(do, q, k, v, causal=True)
else:
    from neuralops.core.triton_kernels import linear_attn as la

    def step() -> None:
        torch.autograd.grad(la.fwd(q, k, v, is_causal=True), (q, k, v), do)

for _ in range(2):
    step()
torch.cuda.synchronize()
