"""``neuralops.build_info()``: what this build contains and whether it loaded."""

from __future__ import annotations

from typing import Any

import torch

from neuralops import _library


def build_info() -> dict[str, Any]:
    """A dict describing the build and this process.

    Keys: ``loaded`` (whether the compiled library loaded) and ``load_error`` (why not), ``library``
    (its path), ``runtime_torch``; and from the library when loaded: ``version``, ``torch`` and
    ``cuda_toolkit`` (built against), ``triton`` (used for the AOT step), ``archs`` (GPU
    architectures compiled), ``archs_skipped``, ``ops`` (per op: kernels, variants, cubins),
    ``routing`` (per op with a ``backend="auto"`` choice: the limits under which it takes the
    Triton kernels rather than cuBLAS; ``low_rank.route(...)`` answers for one call).
    """
    info: dict[str, Any] = {
        "loaded": _library.LOADED,
        "load_error": _library.LOAD_ERROR,
        "library": str(_library.LIBRARY_PATH),
        "runtime_torch": torch.__version__,
    }
    info.update(_library.BUILD_INFO)
    return info
