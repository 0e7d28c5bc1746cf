"""The ops' Python layer: suitability checks, fallbacks, autograd and torch.compile support."""

from neuralops.core.suitability import check_triton_suitability, kernels_disabled

__all__ = ["check_triton_suitability", "kernels_disabled"]
