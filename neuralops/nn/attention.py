"""``LinearAttention``: a multi-head attention block on neuralops' linear-attention kernels.

``LinearAttention(embed_dim, num_heads, num_kv_heads)`` projects ``x [B, N, E]`` to queries with
``num_heads`` heads and keys and values with ``num_kv_heads`` heads (grouped-query attention: the
kernel reads each kv head for its group of query heads, nothing is expanded), runs
``linear_attn.fwd`` and projects back. The projections are named as in Hugging Face's attention
modules (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``), so weights move over by name and
``replace_linear_with_low_rank`` patterns read the same.

Decoding: a ``LinearAttentionCache`` carries the kernel's state (``S``, ``z``: fixed size, whatever
the length decoded) and the position reached; a prefill and then one token at a time through the
same cache give the outputs of one full-sequence call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from neuralops.core.triton_kernels import linear_attn
from neuralops.core.triton_kernels.linear_attn import LinearAttnState


@dataclass
class LinearAttentionCache:
    """Decoding state of one ``LinearAttention`` layer, updated in place by each forward it is given.

    state: the kernel's running sums after ``offset`` positions (``None`` before the first call).
        They are fp32 (fp64 for fp64 models) and keep their autograd history: under ``no_grad``
        (generation) there is none; when training through a cache, detach between pieces yourself.
    offset: positions consumed so far; Cosformer weights of the next piece start there.
    """

    state: LinearAttnState | None = None
    offset: int = 0

    def reset(self) -> None:
        self.state, self.offset = None, 0


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"LinearAttention: {name} must be a positive int, got {value!r}")
    return value


class LinearAttention(nn.Module):
    """Multi-head linear attention with q/k/v/out projections, GQA, causal or bidirectional.

    Args:
        embed_dim: E, the width of the input and of the output.
        num_heads: H, query heads.
        num_kv_heads: Hkv, key/value heads (default H); H must be a multiple of it.
        head_dim: D, per head (default E // H, which must then divide evenly).
        phi: the feature map, one of ``linear_attn.PHIS`` (``"elu+1"``, ``"relu"``, ``"identity"``,
            ``"softmax_free"``).
        causal: position i attends to positions <= i; otherwise to the whole sequence.
        cosformer: weight scores by Cosformer's ``cos(pi (i - j) / (2 M))`` with ``M = max_len``,
            which it then requires; positions must stay below ``max_len``.
        max_len: the Cosformer horizon M (unused without Cosformer).
        bias: biases on the four projections.
        eps: added to the normalizer (the kernels' eps).
        scale: multiplies ``phi(q) . phi(k)``; it cancels against the normalizer except for eps,
            and matters with ``"softmax_free"``.

    Shapes: ``forward(x [B, N, E]) -> [B, N, E]``; q ``[B, H, N, D]``, k and v ``[B, Hkv, N, D]``
    reach the kernel as transposed views of the projections (read in place, not copied).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        phi: str = "elu+1",
        causal: bool = True,
        cosformer: bool = False,
        max_len: int | None = None,
        bias: bool = False,
        eps: float = 1e-6,
        scale: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _positive_int("embed_dim", embed_dim)
        _positive_int("num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else _positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"LinearAttention: num_heads ({num_heads}) must be a multiple of "
                             f"num_kv_heads ({num_kv_heads})")
        if head_dim is None:
            if embed_dim % num_heads != 0:
                raise ValueError(f"LinearAttention: embed_dim ({embed_dim}) must be a multiple of num_heads "
                                 f"({num_heads}), or pass head_dim")
            head_dim = embed_dim // num_heads
        _positive_int("head_dim", head_dim)
        if phi not in linear_attn.PHIS:
            raise ValueError(f"LinearAttention: phi must be one of {linear_attn.PHIS}, got {phi!r}")
        if cosformer:
            if max_len is None:
                raise ValueError("LinearAttention: cosformer=True needs max_len, the horizon of the position "
                                 "weights (the longest sequence, prompt and generated tokens together)")
            _positive_int("max_len", max_len)
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, num_kv_heads, head_dim
        self.phi, self.causal, self.cosformer, self.max_len = phi, bool(causal), bool(cosformer), max_len
        self.eps, self.scale = float(eps), float(scale)
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias, **factory)
        self.o_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias, **factory)

    def new_cache(self) -> LinearAttentionCache:
        """An empty decoding cache for this layer (causal layers only)."""
        if not self.causal:
            raise ValueError("LinearAttention: a decoding cache needs causal=True; a bidirectional layer "
                             "attends to positions that have not been decoded yet")
        return LinearAttentionCache()

    def forward(self, x: torch.Tensor, *, cache: LinearAttentionCache | None = None) -> torch.Tensor:
        """``x [B, N, E] -> [B, N, E]``.

        cache: continue from the positions it holds and record the new ones in it (a prefill, then
            decode steps of N = 1). The output equals that of one call on the whole sequence.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"LinearAttention: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"LinearAttention: x must be [B, N, embed_dim] = [B, N, {self.embed_dim}], got "
                             f"shape {tuple(x.shape)}")
        if cache is not None:
            if not isinstance(cache, LinearAttentionCache):
                raise TypeError(f"LinearAttention: cache must be a LinearAttentionCache, got {type(cache).__name__}")
            if not self.causal:
                raise ValueError("LinearAttention: a decoding cache needs causal=True; a bidirectional layer "
                                 "attends to positions that have not been decoded yet")
        b, n, _ = x.shape
        offset = cache.offset if cache is not None else 0
        q = self.q_proj(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos = sin = None
        if self.cosformer:
            if offset + n > self.max_len:
                raise ValueError(f"LinearAttention: positions up to {offset + n} exceed max_len ({self.max_len}), "
                                 "the Cosformer horizon")
            # fp32 weights, or fp64 for fp64 inputs: the precision the kernels compute in.
            wdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
            cos, sin = linear_attn.cosformer_weights(n, self.max_len, start=offset, device=x.device, dtype=wdtype)
        kwargs = {"scale": self.scale}
        if cache is not None:
            kwargs.update(initial_state=cache.state, return_state=True)
        out = linear_attn.fwd(q, k, v, self.causal, self.phi, self.eps, cos, sin, **kwargs)
        if cache is not None:
            out, cache.state = out
            cache.offset = offset + n
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))

    def extra_repr(self) -> str:
        extras = f", cosformer=True, max_len={self.max_len}" if self.cosformer else ""
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, phi={self.phi!r}, causal={self.causal}{extras}")
