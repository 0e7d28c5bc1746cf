"""One causal forward and backward of the linear attention kernels through the Triton JIT (via
tests/linear_attn_driver.py), for a profiler to attach to:

    ncu --clock-control none --kernel-name regex:la_ --launch-skip 6 --launch-count 6 \
        python benchmarks/profile_linear_attn.py B H N D
"""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import linear_attn_driver as drv  # noqa: E402

b, h, n, d = (int(x) for x in sys.argv[1:5])
q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
for _ in range(2):  # the first pass compiles; the profiler skips it
    drv.forward(q, k, v, causal=True)
    drv.backward(do, q, k, v, causal=True)
torch.cuda.synchronize()
