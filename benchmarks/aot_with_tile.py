"""AOT output with tiles of triton_src/linear_attn/spec.py replaced, for sweeping tiles that Triton's
JIT on the GPU machine cannot run (its 3.6 faults on dq/dk feature tiles narrower than D): build one
output per candidate here, carry them, and install each on the GPU machine with
NEURALOPS_AOT_PREBUILT=<dir> before timing it.

    TILE=C,T,WARPS,STAGES python benchmarks/aot_with_tile.py VALUE_TILES bf16 128 OUT_DIR \
        [TABLE:DTYPE:BLOCK=C,T,WARPS,STAGES ...]

Further tables after OUT_DIR change together with the first (twenty-eighth session: TILES and
VALUE_TILES at 256). TABLE is a name in spec.TABLES; the tile replaces its entry on every
architecture (spec.replace_tile, ARCH_TILES included). ARCHS (default 90) picks the architectures,
e.g. ARCHS=80 to check that a tile fits sm_80's shared memory.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton_src.linear_attn import spec  # noqa: E402


def _tile(text: str) -> tuple:
    return tuple(int(x) for x in text.split(","))


# At module level: the AOT build compiles in spawned processes, which import this file again.
spec.replace_tile(sys.argv[1], (sys.argv[2], int(sys.argv[3])), _tile(os.environ["TILE"]))
for _arg in sys.argv[5:]:
    _where, _value = _arg.split("=")
    _table, _dtype, _block = _where.split(":")
    spec.replace_tile(_table, (_dtype, int(_block)), _tile(_value))

if __name__ == "__main__":
    from triton_src.aot.__main__ import main
    main(["--out", sys.argv[4], "--archs", os.environ.get("ARCHS", "90"), "--cache", "build/aot-cache", "--quiet"])
