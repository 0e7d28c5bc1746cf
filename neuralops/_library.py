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
