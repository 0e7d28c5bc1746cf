"""Registers, spills and tensor-core instructions of built cubins, read offline (no GPU).

    python benchmarks/cubin_stats.py <AOT output dir> [name filter]

For each cubin: registers per thread, stack bytes (spills land there), the instruction count of each
loop (backward branches, outermost first: a chunk loop that holds another loop is not software-
pipelined by Triton), and how many warpgroup (HGMMA, sm_90) and warp-level (HMMA) matrix
instructions its SASS holds, by operand type. Uses the
cuobjdump that ships with Triton.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

import triton


def _cuobjdump() -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def stats(cubin: Path) -> str:
    usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", str(cubin)], capture_output=True, text=True).stdout
    reg = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    sass = subprocess.run([_cuobjdump(), "-sass", str(cubin)], capture_output=True, text=True).stdout
    mma = collections.Counter(re.findall(r"\b(HGMMA\.\S+?|HMMA\.\S+?)[\s;]", sass))
    kinds = collections.Counter()
    for ins, n in mma.items():
        kinds[ins.split(".")[0] + "." + ins.split(".")[-1] if ins.startswith("HMMA") else ".".join(ins.split(".")[:2])] += n
    summary = " ".join(f"{k}x{v}" for k, v in sorted(kinds.items())) or "no mma"
    return (f"{cubin.stem:42s} reg {reg.group(1) if reg else '?':>3} stack {stack.group(1) if stack else '?':>4}  "
            f"loops {loop_sizes(sass)}  {summary}")


def loop_sizes(sass: str) -> list[int]:
    """Instructions spanned by each backward branch, largest first."""
    addrs = [int(m.group(1), 16) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+\S", sass)]
    sizes = []
    for m in re.finditer(r"/\*([0-9a-f]{4,})\*/[^\n]*?\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", sass):
        at, target = int(m.group(1), 16), int(m.group(2), 16)
        if target < at:
            sizes.append(sum(1 for a in addrs if target <= a <= at))
    return sorted(sizes, reverse=True)


def main() -> None:
    out = Path(sys.argv[1])
    pattern = sys.argv[2] if len(sys.argv) > 2 else ""
    for cubin in sorted(out.glob("cubins/*.cubin")):
        if pattern in cubin.name:
            print(stats(cubin))


if __name__ == "__main__":
    main()
