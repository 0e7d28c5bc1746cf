"""Finds which optional GPU architectures the installed Triton can compile for.

A trivial kernel is compiled for each candidate in parallel; a success is remembered in the cache
(keyed by the Triton version), so warm builds probe nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from pathlib import Path

from . import compiler

_PROBE_KERNEL = Path(__file__).resolve().parent / "probe_kernel.py"


def _task(arch: int) -> compiler.Task:
    return compiler.Task(op="probe", variant_name="probe", kernel_file=str(_PROBE_KERNEL),
                         function="probe_kernel", params=(("ptr", "*fp32"),), constexprs=(),
                         num_warps=1, num_stages=1, arch=arch)


def probe(archs: tuple[int, ...], cache_dir: Path, repo_root: Path) -> dict[int, str | None]:
    """For each arch: None when Triton compiles it, else the error."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    version = compiler.triton_version()
    marker = {a: cache_dir / f"probe-triton{version}-sm{a}.ok" for a in archs}
    result: dict[int, str | None] = {a: None for a in archs if marker[a].exists()}
    todo = [a for a in archs if a not in result]
    if not todo:
        return result
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=len(todo), mp_context=ctx, initializer=compiler._worker_init,
                                initargs=(str(repo_root), str(cache_dir / "triton"))) as pool:
        futures = {a: pool.submit(compiler._compile_in_worker, _task(a)) for a in todo}
        for arch, future in futures.items():
            try:
                future.result()
            except Exception as exc:  # an arch this Triton lacks: report it, build without it
                result[arch] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            else:
                marker[arch].write_text("")
                result[arch] = None
    return result
