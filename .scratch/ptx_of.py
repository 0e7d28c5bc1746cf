"""Dump the PTX of linear_attn variants matching a filter (sm_90) to .scratch/ptx/<name>.ptx."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from triton_src.aot import compiler
from triton_src.linear_attn import spec
out = Path(__file__).resolve().parent / "ptx"; out.mkdir(exist_ok=True)
op_dir = Path(spec.__file__).parent
for k in spec.KERNELS:
    for v in k.variants():
        if all(f in v.name for f in sys.argv[1:]):
            t = compiler.make_task("linear_attn", op_dir, v, 90)
            c, _, _ = compiler.compile_task(t)
            (out / f"{v.name}.ptx").write_text(c.asm["ptx"])
            print(v.name, c.metadata.shared)
