"""Compiles kernel variants to cubins with ``triton.tools.compile``: in parallel, cached by content.

A cubin's cache key covers everything that determines it: the op's kernel sources, the kernel
function, its signature with hints and constexprs, warps, stages, the architecture and the Triton
version. An unchanged kernel is never compiled twice; the cache check itself imports no Triton.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .spec import Variant

AOT_FORMAT = 2  # bump when the cached record's layout or the compile options change


@dataclass(frozen=True)
class Task:
    """One variant for one architecture, in plain data a worker process can receive."""

    op: str
    variant_name: str
    kernel_file: str
    function: str
    params: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int
    arch: int
    stages_constexpr: str = ""  # KernelSpec.stages_constexpr
    ptxas_options: str = ""  # KernelSpec.ptxas_options

    def describe(self) -> str:
        return f"{self.variant_name} for sm_{self.arch}"


@dataclass(frozen=True)
class Compiled:
    task: Task
    cubin: Path
    function: str
    shared: int
    num_warps: int
    scratch_args: int
    cached: bool


def shared_limit(arch: int) -> int:
    """The most shared memory one block of a cubin built for `arch` may take: 227 KB on sm_90 and
    sm_10x, else 99 KB, the opt-in limit of sm_86, sm_89 and sm_120 (an sm_80 cubin runs on 8.x)."""
    return 232448 if arch // 10 in (9, 10) else 101376


def triton_version() -> str:
    return importlib.metadata.version("triton")


COMMON_DIR = Path(__file__).resolve().parent.parent / "common"


def source_hash(op_dir: Path, common_dir: Path = COMMON_DIR) -> str:
    """Hash of the kernel sources of one op: every .py in its directory except the spec, and the
    helpers in triton_src/common that kernels import."""
    h = hashlib.sha256()
    paths = sorted(op_dir.glob("*.py")) + sorted(common_dir.glob("*.py"))
    for path in paths:
        if path.name in ("spec.py", "__init__.py"):
            continue
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def make_task(op: str, op_dir: Path, variant: Variant, arch: int) -> Task:
    return Task(
        op=op,
        variant_name=variant.name,
        kernel_file=str(op_dir / variant.spec.source),
        function=variant.spec.function,
        params=tuple(variant.param_types()),
        constexprs=tuple(sorted(variant.constexprs(arch).items())),
        num_warps=variant.num_warps(arch),
        num_stages=variant.num_stages(arch),
        arch=arch,
        stages_constexpr=variant.spec.stages_constexpr,
        ptxas_options=variant.ptxas_options(arch),
    )


def cache_key(task: Task, sources: str, triton: str) -> str:
    record = {
        "format": AOT_FORMAT,
        "sources": sources,
        "function": task.function,
        "params": task.params,
        "constexprs": task.constexprs,
        "num_warps": task.num_warps,
        "num_stages": task.num_stages,
        "arch": task.arch,
        "triton": triton,
    }
    if task.stages_constexpr:  # absent otherwise, so that the other kernels' cached cubins stay valid
        record["stages_constexpr"] = task.stages_constexpr
    if task.ptxas_options:  # likewise
        record["ptxas_options"] = task.ptxas_options
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]


def _signature(arg_names: list[str], task: Task) -> str:
    params = dict(task.params)
    constexprs = dict(task.constexprs)
    if task.stages_constexpr:
        constexprs[task.stages_constexpr] = task.num_stages
    missing = [a for a in arg_names if a not in params and a not in constexprs]
    extra = sorted((set(params) | set(constexprs)) - set(arg_names))
    if missing or extra:
        raise ValueError(f"the spec does not match the kernel's arguments: missing {missing}, unknown {extra}")
    order = [a for a in arg_names if a in params]
    if order != [n for n, _ in task.params]:
        raise ValueError(f"spec params {[n for n, _ in task.params]} are not in kernel order {order}")
    return ", ".join(params[a] if a in params else str(constexprs[a]) for a in arg_names)


def compile_task(task: Task):
    """Compiles one task with triton.tools.compile: (Triton's compiled kernel, with its PTX and cubin
    in ``asm``; the generated C launcher's source; the signature string it was compiled with).
    Needs TRITON_INTERPRET unset in this process."""
    import importlib.util

    import triton
    import triton.tools.compile as aot

    from . import offline_driver

    offline_driver.activate(task.arch)
    module_spec = importlib.util.spec_from_file_location("_neuralops_kernels", task.kernel_file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    signature = _signature(getattr(module, task.function).arg_names, task)

    captured = []
    real_compile = triton.compile

    def capture(*args, **kwargs):
        # triton.tools.compile takes no ptxas flags; its options dict reaches the backend here.
        if task.ptxas_options:
            kwargs["options"] = {**kwargs["options"], "ptx_options": task.ptxas_options}
        compiled = real_compile(*args, **kwargs)
        captured.append(compiled)
        return compiled

    triton.compile = capture
    try:
        with tempfile.TemporaryDirectory() as tmp:
            args = aot.CompileArgs(
                path=task.kernel_file,
                kernel_name=task.function,
                signature=signature,
                grid="1,1,1",
                num_warps=task.num_warps,
                num_stages=1 if task.stages_constexpr else task.num_stages,
                out_name=task.function,
                out_path=Path(tmp) / task.function,
            )
            _, files = aot.compile_kernel(args)
            launcher = next(Path(f).read_text() for f in files if str(f).endswith(".c"))
    finally:
        triton.compile = real_compile
    return captured[-1], launcher, signature


def _compile_in_worker(task: Task) -> dict:
    """Runs in a worker process: compile one task, return its metadata."""
    compiled, launcher, signature = compile_task(task)
    # The generated launcher passes the user's arguments followed by Triton's scratch pointers;
    # count them there, so the runtime matches whatever this Triton version appends.
    total = int(re.search(r"void \*args\[(\d+)\]", launcher).group(1))
    meta = compiled.metadata
    return {
        "cubin": compiled.asm["cubin"],
        "function": meta.name,
        "shared": int(meta.shared),
        "num_warps": int(meta.num_warps),
        "scratch_args": total - len(task.params),
        "signature": signature,
    }


def _worker_init(repo_root: str, triton_cache: str) -> None:
    sys.path.insert(0, repo_root)
    os.environ["TRITON_CACHE_DIR"] = triton_cache
    # Line tables triple a cubin's size and serve only profilers; the wheel stays small without.
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    # The interpreter (used by the CPU tests) cannot compile; AOT always needs the real compiler.
    os.environ.pop("TRITON_INTERPRET", None)


class Progress:
    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.hits, self.quiet = total, 0, 0, quiet
        self.start = time.monotonic()

    def step(self, task: Task, cached: bool, seconds: float = 0.0) -> None:
        self.done += 1
        self.hits += cached
        if not self.quiet and not cached:
            print(f"[neuralops aot] {self.done}/{self.total} compiled {task.describe()} ({seconds:.1f} s)",
                  flush=True)

    def summary(self) -> str:
        return (f"[neuralops aot] {self.total} kernels: {self.total - self.hits} compiled, "
                f"{self.hits} from cache, {time.monotonic() - self.start:.1f} s")


def compile_tasks(tasks: list[Task], sources: dict[str, str], cache_dir: Path, jobs: int,
                  repo_root: Path, quiet: bool = False) -> list[Compiled]:
    """Compile every task not already in the cache; raise naming the first kernel that fails.

    A task's num_stages is a ceiling: a cubin whose block needs more shared memory than its
    architecture allows (shared_limit) is compiled again with one stage fewer, until it fits.
    Triton compiles such a kernel without complaint and only its launch fails, on the GPUs of that
    architecture alone (the sm_80 cubins also run on sm_86 and sm_89, which allow 99 KB: the
    linear-attention dv kernel took 104-130 KB there with the stages tuned on the H200). A kernel
    that does not fit with one stage fails the build."""
    compiled = dict(zip(tasks, _compile_all(tasks, sources, cache_dir, jobs, repo_root, quiet)))
    stages = {t: t.num_stages for t in tasks}
    over = [t for t in tasks if compiled[t].shared > shared_limit(t.arch)]
    while over:
        for task in over:
            if stages[task] <= 1:
                raise RuntimeError(
                    f"neuralops: {task.describe()} needs {compiled[task].shared} bytes of shared memory per "
                    f"block with one pipeline stage, over the {shared_limit(task.arch)} that sm_{task.arch} GPUs "
                    f"allow ({task.function} in {task.kernel_file}): shrink its tiles in the spec")
            stages[task] -= 1
        fewer = [dataclasses.replace(t, num_stages=stages[t]) for t in over]
        for task, result in zip(over, _compile_all(fewer, sources, cache_dir, jobs, repo_root, quiet)):
            compiled[task] = dataclasses.replace(result, task=task)  # the declared variant, built so
        over = [t for t in over if compiled[t].shared > shared_limit(t.arch)]
    return [compiled[t] for t in tasks]


def _compile_all(tasks: list[Task], sources: dict[str, str], cache_dir: Path, jobs: int,
                 repo_root: Path, quiet: bool) -> list[Compiled]:
    cache_dir.mkdir(parents=True, exist_ok=True)
    triton = triton_version()
    progress = Progress(len(tasks), quiet)
    results: dict[Task, Compiled] = {}
    todo: list[tuple[Task, str]] = []
    for task in tasks:
        key = cache_key(task, sources[task.op], triton)
        hit = _load_cached(task, cache_dir, key)
        if hit is not None:
            results[task] = hit
            progress.step(task, cached=True)
        else:
            todo.append((task, key))

    if todo:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo))), mp_context=ctx,
                                    initializer=_worker_init,
                                    initargs=(str(repo_root), str(cache_dir / "triton"))) as pool:
            started = time.monotonic()
            futures = {pool.submit(_compile_in_worker, task): (task, key)
                       for task, key in todo}
            for future in cf.as_completed(futures):
                task, key = futures[future]
                try:
                    record = future.result()
                except Exception as exc:  # name the kernel, then stop the build
                    for f in futures:
                        f.cancel()
                    raise RuntimeError(f"neuralops: failed to compile {task.describe()} "
                                       f"({task.function} in {task.kernel_file}): {exc}") from exc
                results[task] = _store(task, cache_dir, key, record)
                progress.step(task, cached=False, seconds=time.monotonic() - started)
    print(progress.summary(), flush=True)
    return [results[t] for t in tasks]


def _load_cached(task: Task, cache_dir: Path, key: str) -> Compiled | None:
    meta_path = cache_dir / f"{key}.json"
    cubin = cache_dir / f"{key}.cubin"
    if not (meta_path.exists() and cubin.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    return Compiled(task, cubin, meta["function"], meta["shared"], meta["num_warps"],
                    meta["scratch_args"], cached=True)


def _store(task: Task, cache_dir: Path, key: str, record: dict) -> Compiled:
    cubin = cache_dir / f"{key}.cubin"
    _atomic_write(cubin, record["cubin"])
    meta = {k: v for k, v in record.items() if k != "cubin"}
    meta["variant"] = task.variant_name
    meta["arch"] = task.arch
    _atomic_write(cache_dir / f"{key}.json", json.dumps(meta, indent=1).encode())
    return Compiled(task, cubin, meta["function"], meta["shared"], meta["num_warps"],
                    meta["scratch_args"], cached=False)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
