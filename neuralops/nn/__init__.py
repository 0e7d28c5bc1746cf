"""Layers built on neuralops' ops, and tools to put them into models."""

from neuralops.nn.attention import LinearAttention, LinearAttentionCache
from neuralops.nn.convert import AttentionConversion, HFLinearAttention, convert_attention_to_linear
from neuralops.nn.gqa import repeat_kv
from neuralops.nn.low_rank import LowRankLinear, LowRankReplacement, replace_linear_with_low_rank

__all__ = ["AttentionConversion", "HFLinearAttention", "LinearAttention", "LinearAttentionCache", "LowRankLinear",
           "LowRankReplacement", "convert_attention_to_linear", "repeat_kv", "replace_linear_with_low_rank"]
