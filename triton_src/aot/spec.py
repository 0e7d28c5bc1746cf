"""How an op declares the kernel specializations the build compiles.

Each op directory ``triton_src/<op>/`` holds ``kernels.py`` (the ``@triton.jit`` kernels) and
``spec.py`` with ``KERNELS: list[KernelSpec]``. That list is the single source of truth: the AOT
build compiles exactly the variants it expands to, for every requested GPU architecture, and
generates the C++ dispatcher (``<op>_kernels.h``) that the op's C++ code calls.

A ``KernelSpec`` names the Triton function, its run-time parameters with their types, and the
dispatch keys: the cartesian product of the key values gives the variants. Keys whose values are
dtype names (``fp16``, ``bf16``, ``fp32``) become ``c10::ScalarType`` in C++, int keys become
``int64_t``. Constexpr arguments of the kernel are derived from the key by ``constexprs``; it, and
``num_warps`` and ``num_stages`` where they are callables, receive the key with one more entry,
``arch`` (the sm_ target being compiled), so that a kernel can take a larger tile where an
architecture allows it. The generated ``<name>_constexprs(key, device)`` returns those of the cubin
that runs on the device.

Parameters listed in ``aligned`` get Triton's divisibility hint (``:16``: a pointer aligned to 16
bytes, an integer divisible by 16) in an extra, preferred variant; the generated dispatcher picks it
only when the actual arguments satisfy the hints, and the plain variant otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

DTYPES: dict[str, str] = {"fp16": "at::kHalf", "bf16": "at::kBFloat16", "fp32": "at::kFloat"}

# Run-time parameter types (Triton signature syntax) and the C++ types that carry them.
SCALAR_TYPES: dict[str, str] = {"i32": "int32_t", "i64": "int64_t", "fp32": "float", "fp64": "double"}

KeyValue = Any  # str (a dtype name) or int


@dataclass(frozen=True)
class Variant:
    """One compiled specialization of a kernel (before the per-architecture fan-out)."""

    spec: "KernelSpec"
    key: tuple[tuple[str, KeyValue], ...]
    aligned: bool

    @property
    def key_dict(self) -> dict[str, KeyValue]:
        return dict(self.key)

    @property
    def name(self) -> str:
        parts = [self.spec.name] + [f"{k}{v}" if isinstance(v, int) else str(v) for k, v in self.key]
        if self.aligned:
            parts.append("a16")
        return "_".join(parts)

    def _arch_key(self, arch: int) -> dict[str, KeyValue]:
        return {**self.key_dict, "arch": arch}

    def constexprs(self, arch: int) -> dict[str, int]:
        return dict(self.spec.constexprs(self._arch_key(arch)))

    def param_types(self) -> list[tuple[str, str]]:
        """(name, Triton type) of each run-time parameter, with hints, in kernel order."""
        key = self.key_dict
        out = []
        for name, template in self.spec.params:
            ty = template.format(**key)
            if self.aligned and name in self.spec.aligned:
                ty += ":16"
            out.append((name, ty))
        return out

    def num_warps(self, arch: int) -> int:
        return _resolve(self.spec.num_warps, self._arch_key(arch))

    def num_stages(self, arch: int) -> int:
        stages = _resolve(self.spec.num_stages, self._arch_key(arch))
        return min(stages, self.spec.max_stages.get(arch, stages))

    def ptxas_options(self, arch: int) -> str:
        return self.spec.ptxas_options(self._arch_key(arch))


def _resolve(value: int | Callable[[dict], int], key: dict) -> int:
    return int(value(key)) if callable(value) else int(value)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per declaration
class KernelSpec:
    """The specializations of one Triton kernel that the build compiles.

    name: the C++ entry point, ``neuralops::aot::<name>(key, config, args...)``.
    function: the ``@triton.jit`` function in the op's ``kernels.py``.
    params: the run-time arguments, in the kernel's order: (name, type) where type is ``*{dtype}``
        or ``*fp32`` (a pointer), ``i32``, ``i64``, ``fp32`` or ``fp64``; ``{key}`` is substituted.
    keys: dispatch keys and the values to build.
    constexprs: the kernel's constexpr arguments for one key (with ``arch``: see the module's
        docstring); the same names for every key and architecture.
    max_stages: per architecture, a ceiling on num_stages (a pipeline Triton cannot build there).
    source: the file in the op's directory that defines ``function`` (a Gluon kernel has its own,
        so that importing ``kernels.py`` never needs Gluon).
    archs: the architectures the kernel can be built for (a Gluon kernel written for one
        generation's instructions); empty: every requested one. The dispatcher's
        ``<name>_runs_on(key, device)`` says whether a variant has a cubin for a device.
    stages_constexpr: the constexpr that takes num_stages, for a kernel that pipelines its own
        copies (Gluon); Triton's pipeliner then gets one stage. Either way the build lowers the
        stages where a block needs more shared memory than its architecture allows.
    ptxas_options: extra ptxas flags for one key (with ``arch``), after Triton's own; empty for
        most. For variants where ptxas -O3 gives up on register allocation (see the op's spec).
    """

    name: str
    function: str
    params: tuple[tuple[str, str], ...]
    keys: Mapping[str, tuple[KeyValue, ...]]
    constexprs: Callable[[dict], Mapping[str, int]]
    num_warps: int | Callable[[dict], int] = 4
    num_stages: int | Callable[[dict], int] = 3
    max_stages: Mapping[int, int] = field(default_factory=dict)
    aligned: tuple[str, ...] = ()
    include: Callable[[dict], bool] = field(default=lambda key: True)
    source: str = "kernels.py"
    archs: tuple[int, ...] = ()
    stages_constexpr: str = ""
    ptxas_options: Callable[[dict], str] = field(default=lambda key: "")

    def builds_for(self, arch: int) -> bool:
        return not self.archs or arch in self.archs

    def __post_init__(self) -> None:
        names = [n for n, _ in self.params]
        unknown = set(self.aligned) - set(names)
        if unknown:
            raise ValueError(f"{self.name}: aligned names unknown parameters {sorted(unknown)}")
        for _, ty in self.params:
            base = ty.split(":")[0]
            if not (base.startswith("*") or base in SCALAR_TYPES):
                raise ValueError(f"{self.name}: unsupported parameter type {ty!r}")
        for k, values in self.keys.items():
            kinds = {_key_kind(v) for v in values}
            if len(kinds) != 1:
                raise ValueError(f"{self.name}: key {k} mixes value kinds {values}")

    def key_kinds(self) -> dict[str, str]:
        """'dtype' or 'int' for each key, in declaration order."""
        return {k: _key_kind(v[0]) for k, v in self.keys.items()}

    def variants(self) -> list[Variant]:
        names = list(self.keys)
        out = []
        for combo in itertools.product(*(self.keys[k] for k in names)):
            key = tuple(zip(names, combo))
            if not self.include(dict(key)):
                continue
            # The aligned variant comes first: the dispatcher takes the first whose hints hold.
            for aligned in ((True, False) if self.aligned else (False,)):
                out.append(Variant(self, key, aligned))
        return out


def _key_kind(value: KeyValue) -> str:
    if isinstance(value, str):
        if value not in DTYPES:
            raise ValueError(f"string key values must be dtype names {sorted(DTYPES)}, got {value!r}")
        return "dtype"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"key values must be dtype names or ints, got {value!r}")
    return "int"
