"""A small decoder-only transformer language model, with softmax or linear attention.

The reference model of the demo, the conversion helper and the end-to-end benchmark: token and
learned position embeddings, pre-norm blocks (RMSNorm, attention, SwiGLU MLP) and a linear head.
Attention is either ``SoftmaxAttention`` (SDPA, grouped-query with ``repeat_kv``, a preallocated
KV cache for decoding) or ``neuralops.nn.LinearAttention`` (native GQA, a fixed-size state for
decoding). Layer names follow Hugging Face's Llama (``q_proj`` ... ``o_proj``, ``gate_proj``,
``up_proj``, ``down_proj``), so the same patterns select layers in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

import torch
import torch.nn.functional as F
from torch import nn

from neuralops.nn.attention import LinearAttention, LinearAttentionCache
from neuralops.nn.gqa import repeat_kv as neuralops_repeat_kv

ATTENTIONS = ("softmax", "linear")
REPEAT_KV = ("neuralops", "torch")


def torch_repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Hugging Face's ``repeat_kv`` in plain PyTorch: ``[B, Hkv, N, D] -> [B, Hkv * n_rep, N, D]``."""
    b, h, n, d = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    return hidden_states[:, :, None, :, :].expand(b, h, n_rep, n, d).reshape(b, h * n_rep, n, d)


@dataclass
class KVCache:
    """Decoding state of one ``SoftmaxAttention`` layer: keys and values ``[B, Hkv, max_len, D]``,
    allocated on the first call, of which the first ``offset`` positions are filled."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    offset: int = 0


class SoftmaxAttention(nn.Module):
    """Causal softmax attention (``scaled_dot_product_attention``) with GQA through ``repeat_kv``.

    ``forward(x [B, N, E], *, cache=None) -> [B, N, E]``; q ``[B, H, N, D]``, k and v
    ``[B, Hkv, N, D]`` expanded to H heads before SDPA, as Hugging Face's Llama does.
    ``repeat_kv``: ``"neuralops"`` (the GQA kernel) or ``"torch"`` (expand and reshape).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                 max_len: int = 2048, repeat_kv: str = "neuralops", bias: bool = False) -> None:
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        head_dim = head_dim or embed_dim // num_heads
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"SoftmaxAttention: num_heads ({num_heads}) must be a multiple of "
                             f"num_kv_heads ({num_kv_heads})")
        if repeat_kv not in REPEAT_KV:
            raise ValueError(f"SoftmaxAttention: repeat_kv must be one of {REPEAT_KV}, got {repeat_kv!r}")
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, num_kv_heads, head_dim
        self.max_len = max_len
        self.repeat_kv = repeat_kv
        self._repeat: Callable[[torch.Tensor, int], torch.Tensor] = (
            neuralops_repeat_kv if repeat_kv == "neuralops" else torch_repeat_kv)
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias)

    def new_cache(self) -> KVCache:
        return KVCache()

    def forward(self, x: torch.Tensor, *, cache: KVCache | None = None) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        offset = 0
        if cache is not None:
            offset = cache.offset
            if offset + n > self.max_len:
                raise ValueError(f"SoftmaxAttention: positions up to {offset + n} exceed the KV cache's "
                                 f"max_len ({self.max_len})")
            if cache.k is None:
                cache.k = k.new_empty(b, self.num_kv_heads, self.max_len, self.head_dim)
                cache.v = v.new_empty(b, self.num_kv_heads, self.max_len, self.head_dim)
            cache.k[:, :, offset:offset + n] = k
            cache.v[:, :, offset:offset + n] = v
            k, v = cache.k[:, :, :offset + n], cache.v[:, :, :offset + n]
            cache.offset = offset + n
        n_rep = self.num_heads // self.num_kv_heads
        k, v = self._repeat(k, n_rep), self._repeat(v, n_rep)
        if offset == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif n == 1:  # one new query sees every cached position
            out = F.scaled_dot_product_attention(q, k, v)
        else:  # SDPA's is_causal aligns the mask top-left; continuing pieces need it bottom-right
            mask = torch.ones(n, offset + n, dtype=torch.bool, device=x.device).tril(offset)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, repeat_kv={self.repeat_kv!r}")


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``, as in Llama."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@dataclass
class TransformerConfig:
    """Sizes and choices of ``TransformerLM``.

    attention: ``"softmax"`` (``SoftmaxAttention``) or ``"linear"`` (``LinearAttention``).
    d_ff: the SwiGLU width, by default 8/3 of d_model rounded up to a multiple of 32.
    max_len: the longest sequence (prompt and generated tokens): position embeddings, KV cache size
        and the Cosformer horizon.
    repeat_kv: the GQA expansion of softmax attention, ``"neuralops"`` or ``"torch"``.
    phi, cosformer: linear attention's feature map and position weighting.
    """

    vocab_size: int
    d_model: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    d_ff: int | None = None
    max_len: int = 256
    attention: str = "linear"
    repeat_kv: str = "neuralops"
    phi: str = "elu+1"
    cosformer: bool = False

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"TransformerConfig: attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.d_ff is None:
            self.d_ff = -(-self.d_model * 8 // 3 // 32) * 32


Attention = Union[SoftmaxAttention, LinearAttention]


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.attn_norm = nn.RMSNorm(c.d_model)
        if c.attention == "softmax":
            self.attn: nn.Module = SoftmaxAttention(c.d_model, c.num_heads, c.num_kv_heads, max_len=c.max_len,
                                                    repeat_kv=c.repeat_kv)
        else:
            self.attn = LinearAttention(c.d_model, c.num_heads, c.num_kv_heads, phi=c.phi, causal=True,
                                        cosformer=c.cosformer, max_len=c.max_len)
        self.mlp_norm = nn.RMSNorm(c.d_model)
        self.mlp = SwiGLU(c.d_model, c.d_ff)

    def forward(self, x: torch.Tensor, cache: KVCache | LinearAttentionCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cache=cache)
        return x + self.mlp(self.mlp_norm(x))


@dataclass
class DecodeCache:
    """One cache per layer (whatever its attention) and the number of positions consumed."""

    layers: list = field(default_factory=list)
    offset: int = 0


class TransformerLM(nn.Module):
    """Decoder-only language model: ``forward(idx [B, N] int64, cache=None) -> logits [B, N, vocab]``."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_embed = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = nn.RMSNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def new_cache(self) -> DecodeCache:
        """An empty decoding cache: each layer's attention makes its own."""
        return DecodeCache([block.attn.new_cache() for block in self.blocks])

    def forward(self, idx: torch.Tensor, cache: DecodeCache | None = None) -> torch.Tensor:
        """Logits ``[B, N, vocab]`` for tokens ``idx [B, N]``; with a cache, continuing from it."""
        n = idx.shape[1]
        offset = cache.offset if cache is not None else 0
        if offset + n > self.config.max_len:
            raise ValueError(f"TransformerLM: positions up to {offset + n} exceed max_len ({self.config.max_len})")
        pos = torch.arange(offset, offset + n, device=idx.device)
        x = self.embed(idx) + self.pos_embed(pos)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.offset = offset + n
        return self.lm_head(self.norm(x))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (in fp32) of ``forward(idx)`` against ``targets [B, N]``."""
        logits = self(idx)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
        """Extends ``idx [B, N0]`` by ``max_new_tokens`` sampled tokens (greedy at temperature 0).

        With ``use_cache`` the prompt is run once and each new token is one step through the cache;
        without, every step recomputes the whole sequence (the reference the cache must match).
        """
        cache = self.new_cache() if use_cache else None
        step = idx
        for _ in range(max_new_tokens):
            logits = self(step, cache)[:, -1] if use_cache else self(idx)[:, -1]
            if temperature == 0:
                step = logits.argmax(-1, keepdim=True)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)
                step = torch.multinomial(probs, 1, generator=generator)
            idx = torch.cat([idx, step], dim=1)
        return idx
