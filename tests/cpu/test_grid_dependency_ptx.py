"""The decode pair's first kernel is launched as a programmatic dependent of whatever kernel precedes it
(another op's, which may be writing its inputs or weights). Its PTX for sm_90 must touch no global
memory before griddepcontrol.wait but prefetch into L2, and let its own dependent (the second kernel,
whose loads come before its wait) start only after that wait. GPU tests cannot see a violation
reliably (it shows only when the timing is unlucky), so the order is checked in the compiled code."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_COMPILE = """
import json, sys
from pathlib import Path
from triton_src.aot import compiler
from triton_src.low_rank.spec import KERNELS
spec = next(s for s in KERNELS if s.name == "low_rank_decode_partial")
for variant in spec.variants():
    key = dict(variant.key)
    if key["dtype"] == "bf16" and key["BLOCK_M"] == 16:
        task = compiler.make_task("low_rank", Path("triton_src/low_rank"), variant, 90)
        compiled, _, _ = compiler.compile_task(task)
        print(json.dumps(compiled.asm["ptx"]))
        break
"""


_COMPILE_WGMMA = """
import json
from pathlib import Path
from triton_src.aot import compiler
from triton_src.linear_attn.spec import KERNELS
for spec in KERNELS:
    if spec.name.endswith("_wgmma"):
        for variant in spec.variants():
            task = compiler.make_task("linear_attn", Path("triton_src/linear_attn"), variant, 90)
            compiled, _, _ = compiler.compile_task(task)
            print(json.dumps([variant.name, compiled.asm["ptx"]]))
"""


def _instruction_lines(ptx: str) -> list[str]:
    """PTX instructions, without comments and with guard predicates (``@%p1``, ``@!%p2``) removed."""
    lines = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]
    return [re.sub(r"^@!?%\w+\s+", "", line) for line in lines]


def test_decode_partial_kernel_reads_nothing_before_its_wait():
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _COMPILE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = _instruction_lines(json.loads(run.stdout.strip().splitlines()[-1]))
    wait = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait"))
    launch = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.launch_dependents"))
    before = lines[:wait]
    assert any(line.startswith("prefetch.global.L2") for line in before), "no L2 prefetch before the wait"
    memory = [line for line in before if line.startswith(("ld.global", "st.global", "cp.async", "atom.", "red."))]
    assert not memory, f"global memory accessed before griddepcontrol.wait: {memory[:5]}"
    assert launch > wait, "launch_dependents precedes the wait: the second kernel's U loads could race"


def test_wgmma_kernels_wait_before_memory_and_release_after_their_stores():
    """The Gluon kernels (the forward with its stats variants, dq, dv and dk; no interpreter runs
    them on CPU) are chained by PDL like the Triton kernels: in every variant's PTX, griddepcontrol.wait
    precedes every global access (states, den and dl are earlier kernels' outputs) and
    launch_dependents follows every store."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _COMPILE_WGMMA], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    outputs = [json.loads(line) for line in run.stdout.strip().splitlines()]
    kernels = sorted(name.rsplit("_bf16", 1)[0] for name, _ in outputs)
    # spec.py: dk with dv 3 + 3, dq 4 + 4 (with the stats, _wgmma_dq_built, and
    # softmax_free's plain one), the forward 21 (causal at blocks 64, 128 and 256 with their stats
    # variants, bidirectional at 256).
    assert kernels == ["la_bwd_dk_wgmma"] * 6 + ["la_bwd_dq_wgmma"] * 8 + ["la_fwd_wgmma"] * 21
    for name, ptx in outputs:
        lines = _instruction_lines(ptx)
        assert "wgmma.mma_async" in ptx, name
        wait = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait"))
        launch = max(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.launch_dependents"))
        memory = [i for i, line in enumerate(lines) if line.startswith(("ld.global", "cp.async.ca", "cp.async.cg"))]
        stores = [i for i, line in enumerate(lines) if line.startswith("st.global")]
        assert memory and min(memory) > wait, f"{name}: global memory read before griddepcontrol.wait"
        assert stores and max(stores) < launch, f"{name}: a store after launch_dependents"
