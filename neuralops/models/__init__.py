"""A small reference transformer language model and the generated text the demo trains it on."""

from neuralops.models.corpus import CharTokenizer, generate_corpus
from neuralops.models.transformer import (DecodeCache, KVCache, SoftmaxAttention, TransformerConfig, TransformerLM,
                                          torch_repeat_kv)

__all__ = ["CharTokenizer", "DecodeCache", "KVCache", "SoftmaxAttention", "TransformerConfig", "TransformerLM",
           "generate_corpus", "torch_repeat_kv"]
