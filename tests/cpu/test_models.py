"""The reference transformer (neuralops.models): softmax attention against an explicit reference,
its KV cache against the full sequence, both repeat_kv implementations, cached generation in both
attention types, and the generated corpus."""

import pytest
import torch

from helpers import train_losses
from neuralops.models import (CharTokenizer, SoftmaxAttention, TransformerConfig, TransformerLM, generate_corpus,
                              torch_repeat_kv)
from neuralops.nn import LinearAttention


def softmax_reference(attn: SoftmaxAttention, x: torch.Tensor) -> torch.Tensor:
    b, n, _ = x.shape
    h, hkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = (x @ attn.q_proj.weight.T).view(b, n, h, d).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, 1)
    v = (x @ attn.v_proj.weight.T).view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, 1)
    s = (q @ k.transpose(-1, -2)) / d**0.5
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, -1) @ v
    return out.transpose(1, 2).reshape(b, n, h * d) @ attn.o_proj.weight.T


@pytest.mark.parametrize("impl", ["neuralops", "torch"])
def test_softmax_attention_and_its_kv_cache(impl):
    torch.manual_seed(0)
    attn = SoftmaxAttention(32, 4, 2, max_len=40, repeat_kv=impl).double()
    x = torch.randn(2, 25, 32, dtype=torch.float64)
    with torch.no_grad():
        full = attn(x)
        torch.testing.assert_close(full, softmax_reference(attn, x), rtol=1e-10, atol=1e-10)
        cache = attn.new_cache()
        pieces = [attn(x[:, :6], cache=cache)] + [attn(x[:, i:i + 1], cache=cache) for i in range(6, 18)]
        pieces.append(attn(x[:, 18:], cache=cache))  # a chunk after decoding: the bottom-right mask
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-10, atol=1e-10)
    assert cache.offset == 25 and cache.k.shape == (2, 2, 40, 8)


def test_torch_repeat_kv_matches_repeat_interleave():
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(torch_repeat_kv(x, 4), x.repeat_interleave(4, 1))
    assert torch_repeat_kv(x, 1) is x


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_cached_generation_equals_recomputation(attention):
    cfg = TransformerConfig(vocab_size=11, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, max_len=32,
                            attention=attention, cosformer=attention == "linear")
    torch.manual_seed(0)
    model = TransformerLM(cfg).double().eval()
    prompt = torch.randint(0, 11, (2, 5))
    cached = model.generate(prompt, 12, temperature=0)
    assert torch.equal(cached, model.generate(prompt, 12, temperature=0, use_cache=False))
    kinds = {type(b.attn) for b in model.blocks}
    assert kinds == {LinearAttention if attention == "linear" else SoftmaxAttention}
    with pytest.raises(ValueError, match="exceed max_len"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_model_trains():
    cfg = TransformerConfig(vocab_size=7, d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, max_len=16)
    torch.manual_seed(0)
    model = TransformerLM(cfg)
    data = torch.arange(17).remainder(7)[None].repeat(4, 1)  # a periodic sequence: easy to learn
    losses = train_losses(model, data, 30)
    assert losses[-1] < 0.3 * losses[0]


def test_corpus_is_deterministic_and_tokenizes():
    text = generate_corpus(5000, seed=3)
    assert text == generate_corpus(5000, seed=3) and text != generate_corpus(5000, seed=4)
    assert 5000 <= len(text) < 5400
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode(text[:200])) == text[:200]
    with pytest.raises(ValueError, match="'#' is not in the vocabulary"):
        tok.encode("#")
