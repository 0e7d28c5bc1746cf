"""neuralops: fast GPU kernels for PyTorch, compiled ahead of time.

Ops (see each module's docstring for shapes and semantics):
    neuralops.core.triton_kernels.linear_attn  linear attention: causal and bidirectional, Cosformer, GQA
    neuralops.core.triton_kernels.gqa          GQA head expansion and its backward
    neuralops.core.triton_kernels.low_rank     low-rank projection y = (x @ V.T) @ U.T + bias
    neuralops.nn                               layers: LowRankLinear and model conversion

Each op has ``fwd``, ``bwd`` and ``is_supported`` and a pure-PyTorch fallback that runs wherever
the kernels cannot (CPU tensors, no GPU, ``NEURALOPS_DISABLE_KERNELS=1``). ``build_info()`` says
what was compiled and whether the library loaded; ``python -m neuralops.info`` prints it.
"""

from neuralops import _library
from neuralops.core import check_triton_suitability, kernels_disabled
from neuralops import nn
from neuralops._build_info import build_info
from neuralops.core.triton_kernels import gqa, linear_attn, low_rank

__version__ = "0.1.0"

__all__ = ["build_info", "check_triton_suitability", "gqa", "kernels_disabled", "linear_attn", "low_rank", "nn", "__version__"]
