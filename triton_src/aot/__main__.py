"""The AOT build step: ``python -m triton_src.aot --out DIR``.

Compiles every kernel variant declared in ``triton_src/<op>/spec.py`` for every requested GPU
architecture and generates the C++ sources that embed and dispatch them (see codegen.py). CMake runs
it (CMakeLists.txt); setup.py drives CMake, so the wheel and the C++ package share this one step.

Architectures come from ``--archs`` or ``NEURALOPS_CUDA_ARCHS`` (``"80;90"``, commas also accepted).
Unset, the default is sm_80 and sm_90, plus sm_100 and sm_120 where the installed Triton compiles
them. An architecture asked for explicitly that cannot be compiled fails the build.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from pathlib import Path

from . import codegen, compiler, probe
from .spec import KernelSpec

TRITON_SRC = Path(__file__).resolve().parent.parent
REPO_ROOT = TRITON_SRC.parent
REQUIRED_ARCHS = (80, 90)
OPTIONAL_ARCHS = (100, 120)


def discover_ops() -> dict[str, list[KernelSpec]]:
    ops = {}
    for spec_file in sorted(TRITON_SRC.glob("*/spec.py")):
        op = spec_file.parent.name
        if op == "aot":
            continue
        module = importlib.import_module(f"triton_src.{op}.spec")
        ops[op] = list(module.KERNELS)
    return ops


def parse_archs(text: str) -> list[int]:
    archs = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip().lower().removeprefix("sm_").removeprefix("sm").rstrip("a")
        if not part:
            continue
        if not part.isdigit():
            raise SystemExit(f"neuralops: NEURALOPS_CUDA_ARCHS entry {part!r} is not an architecture "
                             "number such as 80 or 90")
        archs.append(int(part))
    if not archs:
        raise SystemExit("neuralops: NEURALOPS_CUDA_ARCHS is empty")
    return sorted(set(archs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triton_src.aot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="directory for the generated sources")
    parser.add_argument("--archs", default=os.environ.get("NEURALOPS_CUDA_ARCHS", ""))
    parser.add_argument("--cache", type=Path,
                        default=Path(os.environ.get("NEURALOPS_AOT_CACHE", REPO_ROOT / "build" / "aot-cache")))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("NEURALOPS_AOT_JOBS", os.cpu_count() or 1)))
    parser.add_argument("--list-ops", action="store_true", help="print the ops, ';'-separated, and exit")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO_ROOT))
    ops = discover_ops()
    if args.list_ops:
        print(";".join(ops))
        return 0
    if args.out is None:
        parser.error("--out is required")

    skipped: dict[int, str] = {}
    if args.archs.strip():
        archs = parse_archs(args.archs)
    else:
        archs = list(REQUIRED_ARCHS)
        for arch, error in probe.probe(OPTIONAL_ARCHS, args.cache, REPO_ROOT).items():
            if error is None:
                archs.append(arch)
            else:
                skipped[arch] = error
                print(f"[neuralops aot] sm_{arch} skipped: this Triton cannot compile it ({error})", flush=True)

    tasks, sources, by_op = [], {}, {}
    for op, specs in ops.items():
        sources[op] = compiler.source_hash(TRITON_SRC / op)
        variants = [v for spec in specs for v in spec.variants()]
        by_op[op] = variants
        tasks += [compiler.make_task(op, TRITON_SRC / op, v, arch) for v in variants for arch in archs
                  if v.spec.builds_for(arch)]
    print(f"[neuralops aot] {len(tasks)} kernels ({', '.join(f'{op}: {len(v)} variants' for op, v in by_op.items())}) "
          f"for {', '.join(f'sm_{a}' for a in archs)} with Triton {compiler.triton_version()}, "
          f"{args.jobs} jobs", flush=True)
    results = compiler.compile_tasks(tasks, sources, args.cache, args.jobs, REPO_ROOT, quiet=args.quiet)

    out: Path = args.out
    cubin_dir = out / "cubins"
    cubin_dir.mkdir(parents=True, exist_ok=True)
    by_task = {}
    keep = set()
    for result in results:
        # Copied next to the generated sources, so the build does not depend on the cache surviving.
        dest = cubin_dir / f"{result.task.variant_name}.sm{result.task.arch}.cubin"
        data = result.cubin.read_bytes()
        if not dest.exists() or dest.read_bytes() != data:
            shutil.copyfile(result.cubin, dest)
        keep.add(dest.name)
        by_task[result.task] = compiler.Compiled(result.task, dest, result.function, result.shared,
                                                 result.num_warps, result.scratch_args, result.cached)
    for stale in cubin_dir.glob("*.cubin"):
        if stale.name not in keep:
            stale.unlink()

    info = {"triton": compiler.triton_version(), "archs": archs,
            "archs_skipped": {str(a): e for a, e in skipped.items()}, "ops": {}}
    for op, variants in by_op.items():
        built = {}
        for v in variants:
            images = [by_task[compiler.make_task(op, TRITON_SRC / op, v, arch)] for arch in archs
                      if v.spec.builds_for(arch)]
            if images:  # a variant with no architecture requested is left out of the dispatcher
                built[v] = images
        codegen.generate(out, op, ops[op], built)
        info["ops"][op] = {
            "kernels": [spec.name for spec in ops[op]],
            "variants": len(built),
            "cubins": sum(len(images) for images in built.values()),
            "cubin_bytes": sum(c.cubin.stat().st_size for cs in built.values() for c in cs),
        }
    codegen.generate_info(out, info)
    (out / "aot.stamp").write_text("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
