"""AOT output for sm_90 with one tile of triton_src/linear_attn/spec.py replaced, for sweeping tiles
that Triton's JIT on the GPU machine cannot run (its 3.6 faults on dq/dk feature tiles narrower
than D): build one output per candidate here, carry them, and install each on the GPU machine with
NEURALOPS_AOT_PREBUILT=<dir> before timing it.

    TILE=C,T,WARPS,STAGES python benchmarks/aot_with_tile.py VALUE_TILES bf16 128 OUT_DIR
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton_src.linear_attn import spec  # noqa: E402

# At module level: the AOT build compiles in spawned processes, which import this file again.
_TABLE, _DTYPE, _BLOCK = sys.argv[1], sys.argv[2], int(sys.argv[3])
getattr(spec, _TABLE)[_DTYPE, _BLOCK] = tuple(int(x) for x in os.environ["TILE"].split(","))

if __name__ == "__main__":
    from triton_src.aot.__main__ import main
    main(["--out", sys.argv[4], "--archs", "90", "--cache", "build/aot-cache", "--quiet"])
