"""neuralops.nn.LinearAttention on CPU: against an explicit O(N^2) float64 reference of the whole
block (projections included), gradients, GQA against expanded heads, the decode cache against the
full sequence (Cosformer included), what the kernel is handed, and errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import phi_reference
from neuralops.core.triton_kernels import linear_attn
from neuralops.nn import LinearAttention, LinearAttentionCache

E = 32


def reference(layer: LinearAttention, x: torch.Tensor) -> torch.Tensor:
    """The block written out in float64: projections, phi, masked scores, normalizer, out projection."""
    b, n, _ = x.shape
    h, hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim

    def proj(lin, heads):
        y = F.linear(x.double(), lin.weight.double(), None if lin.bias is None else lin.bias.double())
        return y.view(b, n, heads, d).transpose(1, 2)

    q, k, v = proj(layer.q_proj, h), proj(layer.k_proj, hkv), proj(layer.v_proj, hkv)
    k, v = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    s = layer.scale * phi_reference(q, layer.phi) @ phi_reference(k, layer.phi).transpose(-1, -2)
    if layer.cosformer:
        angle = torch.arange(n, dtype=torch.float64) * math.pi / (2 * layer.max_len)
        s = s * torch.cos(angle[:, None] - angle[None, :])
    if layer.causal:
        s = s.tril()
    out = s @ v
    if layer.phi != "softmax_free":
        out = out / (s.sum(-1, keepdim=True) + layer.eps)
    return F.linear(out.transpose(1, 2).reshape(b, n, h * d), layer.o_proj.weight.double(),
                    None if layer.o_proj.bias is None else layer.o_proj.bias.double())


def make_layer(dtype=torch.float64, seed=0, **kwargs) -> LinearAttention:
    torch.manual_seed(seed)
    kwargs.setdefault("num_heads", 4)
    return LinearAttention(E, dtype=dtype, **kwargs)


def make_x(b=2, n=37, dtype=torch.float64, seed=1):
    return torch.randn(b, n, E, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("phi", ["elu+1", "relu", "softmax_free"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_matches_explicit_reference(phi, causal, cosformer, num_kv_heads):
    layer = make_layer(num_kv_heads=num_kv_heads, phi=phi, causal=causal, cosformer=cosformer,
                       max_len=80 if cosformer else None, bias=num_kv_heads == 2, scale=0.5)
    x = make_x(n=70 if causal else 37)  # causal: more than one 64-row chunk of the fallback
    torch.testing.assert_close(layer(x), reference(layer, x), rtol=1e-10, atol=1e-10)


def test_head_dim_other_than_embed_dim_over_heads():
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=24)
    assert layer.q_proj.out_features == 48 and layer.k_proj.out_features == 24
    x = make_x()
    torch.testing.assert_close(layer(x), reference(layer, x), rtol=1e-10, atol=1e-10)


def test_gradients_match_reference():
    layer = make_layer(num_kv_heads=2, cosformer=True, max_len=40, bias=True)
    x = make_x(n=33).requires_grad_(True)
    layer(x).square().sum().backward()
    got = [x.grad] + [p.grad for p in layer.parameters()]
    x.grad = None
    layer.zero_grad()
    reference(layer, x).square().sum().backward()
    want = [x.grad] + [p.grad for p in layer.parameters()]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)


def test_gqa_equals_expanded_heads():
    """Hkv = 2 with the kernel's native GQA = Hkv = H with each kv head's weights repeated."""
    grouped = make_layer(num_kv_heads=2)
    full = make_layer(num_kv_heads=4, seed=5)
    d, rep = grouped.head_dim, 2
    with torch.no_grad():
        for name in ("q_proj", "o_proj"):
            getattr(full, name).weight.copy_(getattr(grouped, name).weight)
        for name in ("k_proj", "v_proj"):
            w = getattr(grouped, name).weight.view(2, d, E).repeat_interleave(rep, 0).reshape(4 * d, E)
            getattr(full, name).weight.copy_(w)
    x = make_x()
    torch.testing.assert_close(grouped(x), full(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cosformer", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_decode_cache_matches_full_sequence(cosformer, dtype, tol):
    layer = make_layer(dtype=dtype, num_kv_heads=2, cosformer=cosformer, max_len=40 if cosformer else None)
    x = make_x(n=30, dtype=dtype)
    with torch.no_grad():
        full = layer(x)
        cache = layer.new_cache()
        pieces = [layer(x[:, :7], cache=cache)]                         # prefill
        pieces += [layer(x[:, i:i + 1], cache=cache) for i in range(7, 24)]  # one token at a time
        pieces.append(layer(x[:, 24:], cache=cache))                   # a chunk after decoding
    assert cache.offset == 30
    s_shape = (2, 2, 2, 8, 8) if cosformer else (2, 2, 8, 8)
    assert tuple(cache.state.S.shape) == s_shape
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=tol, atol=tol)


def test_cache_reset_and_separate_caches():
    layer = make_layer(num_kv_heads=2)
    x = make_x(n=12)
    with torch.no_grad():
        cache = layer.new_cache()
        first = layer(x, cache=cache)
        cache.reset()
        assert cache.state is None and cache.offset == 0
        torch.testing.assert_close(layer(x, cache=cache), first)
        other = LinearAttentionCache()
        torch.testing.assert_close(layer(x[:, :5], cache=other), first[:, :5])


def test_kernel_reads_projections_as_transposed_views(monkeypatch):
    seen = {}
    real = linear_attn.fwd

    def spy(q, k, v, *args, **kwargs):
        seen.update(q=q, k=k, v=v)
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(linear_attn, "fwd", spy)
    layer = make_layer(num_kv_heads=2)
    layer(make_x(b=2, n=9))
    h, d = 4, 8
    assert seen["q"].shape == (2, h, 9, d) and seen["q"].stride() == (9 * h * d, d, h * d, 1)
    assert seen["k"].shape == (2, 2, 9, d) and seen["k"].stride() == (9 * 2 * d, d, 2 * d, 1)
    assert not seen["v"].is_contiguous() and seen["v"].stride(-1) == 1


def test_bidirectional_layer_refuses_a_cache():
    layer = make_layer(causal=False)
    with pytest.raises(ValueError, match="causal=True"):
        layer.new_cache()
    with pytest.raises(ValueError, match="causal=True"):
        layer(make_x(), cache=LinearAttentionCache())


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_heads=4, num_kv_heads=3), "multiple of num_kv_heads"),
    (dict(num_heads=5), "embed_dim .32. must be a multiple of num_heads"),
    (dict(num_heads=0), "num_heads must be a positive int"),
    (dict(num_heads=4, phi="softmax"), "phi must be one of"),
    (dict(num_heads=4, cosformer=True), "cosformer=True needs max_len"),
    (dict(num_heads=4, head_dim=-1), "head_dim must be a positive int"),
])
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LinearAttention(E, **kwargs)


def test_forward_errors():
    layer = make_layer(cosformer=True, max_len=16)
    with pytest.raises(ValueError, match=r"x must be \[B, N, embed_dim\] = \[B, N, 32\]"):
        layer(torch.randn(2, 5, 31, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x must be \[B, N, embed_dim\]"):
        layer(torch.randn(5, E, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        layer([[0.0] * E])
    with pytest.raises(TypeError, match="cache must be a LinearAttentionCache"):
        layer(make_x(), cache={})
    with pytest.raises(ValueError, match="exceed max_len"):
        layer(make_x(n=17))
    cache = layer.new_cache()
    layer(make_x(n=16), cache=cache)
    with pytest.raises(ValueError, match="positions up to 17 exceed max_len"):
        layer(make_x(n=1), cache=cache)
