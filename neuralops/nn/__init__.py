"""Layers built on neuralops' ops."""

from neuralops.nn.low_rank import LowRankLinear, LowRankReplacement, replace_linear_with_low_rank

__all__ = ["LowRankLinear", "LowRankReplacement", "replace_linear_with_low_rank"]
