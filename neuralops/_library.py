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


# kernels_ready's answers other than 0 (neuralops.core.suitability): how an op is to be called.
# Eagerly through its fast path, or, while torch.compile traces, through its overload.
READY = 1
READY_TRACED = 2


class Op(NamedTuple):
    """One op, called positionally (the schema's arguments in order, keyword-only ones too)."""

    overload: Any  # torch.ops.neuralops.<name>.default
    eager: Callable[..., Any]  # the fast path, or ``traced`` where there is none
    traced: Callable[..., Any]  # the overload, keyword-only arguments passed as keywords: traceable

    def entry(self, ready: int) -> Callable[..., Any]:
        """The callable for kernels_ready's answer ``ready`` (READY or READY_TRACED)."""
        return self.traced if ready == READY_TRACED else self.eager


def op(name: str) -> Op:
    """The op ``torch.ops.neuralops.<name>`` for the Python layer's calls.

    ``eager`` calls the op through its typed dispatcher handle (csrc/python/fastcall.cpp): a few
    microseconds less per call than the overload, whose boxed call parses the arguments against the
    schema. What it cannot take exactly (a Tensor subclass, a torch function mode, other argument
    types) goes to the overload. Dynamo does not trace it: under ``torch.compile`` call ``traced``.
    """
    overload = getattr(torch.ops.neuralops, name).default
    kw_only = [a.name for a in overload._schema.arguments if a.kwarg_only]
    if kw_only:
        def traced(*args: Any) -> Any:
            split = len(args) - len(kw_only)
            return overload(*args[:split], **dict(zip(kw_only, args[split:])))
    else:
        traced = overload
    eager = traced if _FASTCALL is None else _FASTCALL.bind(overload._schema.name, overload)
    return Op(overload, eager, traced)
