"""Loads the compiled library that registers ``torch.ops.neuralops``.

The library (``lib/libneuralops.so``) holds the C++ ops and the AOT-compiled kernels. It is loaded
with ``torch.ops.load_library``; Triton is never imported. If it is missing or cannot be loaded
(built against another torch, say), ``LOADED`` is False, ``LOAD_ERROR`` says why, and every op
runs its PyTorch fallback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

LIBRARY_PATH = Path(os.environ.get("NEURALOPS_LIBRARY", Path(__file__).parent / "lib" / "libneuralops.so"))


def _load() -> str | None:
    if not LIBRARY_PATH.exists():
        return (f"{LIBRARY_PATH} does not exist: neuralops was installed without its compiled "
                "library; reinstall from source with `pip install --no-build-isolation .`")
    try:
        torch.ops.load_library(str(LIBRARY_PATH))
    except (OSError, RuntimeError) as exc:
        return (f"loading {LIBRARY_PATH} failed ({exc}); it must be built against the installed "
                f"torch {torch.__version__}: rebuild with `pip install --no-build-isolation --force-reinstall .`")
    return None


LOAD_ERROR: str | None = _load()
LOADED: bool = LOAD_ERROR is None

# What the library reports about itself (see neuralops.info); empty when it is not loaded.
BUILD_INFO: dict = json.loads(torch.ops.neuralops.build_info()) if LOADED else {}
BUILT_ARCHS: tuple[int, ...] = tuple(BUILD_INFO.get("archs", ()))


def _load_fastcall() -> Any:
    try:
        from neuralops import _fastcall
    except ImportError:  # a library built without it (C++ builds); the overloads serve alone
        return None
    return _fastcall


_FASTCALL = _load_fastcall() if LOADED else None
FASTCALL: bool = _FASTCALL is not None


class Op(NamedTuple):
    """One op, two ways to call it (see ``op``)."""

    overload: Any  # torch.ops.neuralops.<name>.default: traceable (torch.compile, FX)
    eager: Callable[..., Any]  # the fast path, or the overload where there is none


def op(name: str) -> Op:
    """The op ``torch.ops.neuralops.<name>`` for the Python layer's calls.

    ``eager`` takes the schema's arguments all positionally, keyword-only ones too, in schema order,
    and calls the op through its typed dispatcher handle (csrc/python/fastcall.cpp): a few
    microseconds less per call than the overload, whose boxed call parses the arguments against the
    schema. What it cannot take exactly (a Tensor subclass, a torch function mode, other argument
    types) goes to the overload. Dynamo does not trace it: under ``torch.compile`` call ``overload``.
    """
    overload = getattr(torch.ops.neuralops, name).default
    if _FASTCALL is None:
        kw_only = [a.name for a in overload._schema.arguments if a.kwarg_only]

        def eager(*args: Any) -> Any:
            split = len(args) - len(kw_only)
            return overload(*args[:split], **dict(zip(kw_only, args[split:])))

        return Op(overload, eager)
    return Op(overload, _FASTCALL.bind(overload._schema.name, overload))
