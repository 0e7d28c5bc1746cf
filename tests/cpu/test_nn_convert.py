"""convert_attention_to_linear: the reference transformer (weights carried over, decoding, training
after conversion), Hugging Face style attention found by duck typing (LlamaAttention's attributes and
call convention, written out here without transformers), selection, low-rank layers, and errors."""

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import train_losses
from neuralops.models import SoftmaxAttention, TransformerConfig, TransformerLM
from neuralops.nn import (HFLinearAttention, LinearAttention, LowRankLinear, convert_attention_to_linear,
                          replace_linear_with_low_rank)


def small_lm(layers=2, **kwargs) -> TransformerLM:
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=13, d_model=32, num_layers=layers, num_heads=4, num_kv_heads=2, max_len=48,
                            attention="softmax", **kwargs)
    return TransformerLM(cfg)


def test_reference_transformer_converts_with_weights_carried_over():
    model = small_lm()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    projections = [model.blocks[i].attn.q_proj for i in range(2)]
    reports = convert_attention_to_linear(model, phi="relu")
    assert [(r.name, r.source, r.num_heads, r.num_kv_heads, r.head_dim, r.hf_call) for r in reports] == [
        ("blocks.0.attn", "SoftmaxAttention", 4, 2, 8, False), ("blocks.1.attn", "SoftmaxAttention", 4, 2, 8, False)]
    for i, block in enumerate(model.blocks):
        assert type(block.attn) is LinearAttention and block.attn.phi == "relu" and block.attn.causal
        assert block.attn.q_proj is projections[i]
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()  # the same names: q_proj ... o_proj under the same parents
    for name, p in after.items():
        assert torch.equal(p, before[name]), name
        assert p.device.type == "cpu"
    assert convert_attention_to_linear(model) == []  # nothing left to convert


def test_converted_model_decodes_and_trains():
    model = small_lm(cosformer=True)
    convert_attention_to_linear(model, cosformer=True, max_len=48)
    model.double().eval()
    prompt = torch.randint(0, 13, (2, 6))
    assert torch.equal(model.generate(prompt, 10, temperature=0),
                       model.generate(prompt, 10, temperature=0, use_cache=False))
    model.float().train()
    data = torch.arange(33).remainder(13)[None].repeat(4, 1)
    losses = train_losses(model, data, 25)
    assert losses[-1] < 0.5 * losses[0]


def test_optimizer_built_before_conversion_keeps_its_parameters():
    model = small_lm(layers=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    convert_attention_to_linear(model)
    held = {id(p) for group in opt.param_groups for p in group["params"]}
    assert {id(p) for p in model.parameters()} == held


def test_include_exclude():
    model = small_lm(layers=3)
    assert [r.name for r in convert_attention_to_linear(model, exclude="blocks.1.*")] == ["blocks.0.attn",
                                                                                         "blocks.2.attn"]
    assert type(model.blocks[1].attn) is SoftmaxAttention
    model = small_lm(layers=3)
    assert [r.name for r in convert_attention_to_linear(model, include=re.compile(r"blocks\.1\.attn"))] == [
        "blocks.1.attn"]


def test_low_rank_projections_are_kept():
    model = small_lm(layers=1)
    replace_linear_with_low_rank(model, 0.25, include="*.attn.*", rank_multiple=4)
    convert_attention_to_linear(model)
    attn = model.blocks[0].attn
    assert isinstance(attn, LinearAttention) and isinstance(attn.q_proj, LowRankLinear)
    assert model(torch.randint(0, 13, (1, 9))).shape == (1, 9, 13)


# Hugging Face's LlamaAttention as transformers >= 4.48 writes it: head counts in its config, rotary
# embeddings passed in, called with keywords by the decoder layer, returning (output, weights).
class LlamaLikeAttention(nn.Module):
    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.is_causal = True
        h, hkv, d, e = config.num_attention_heads, config.num_key_value_heads, config.head_dim, config.hidden_size
        self.q_proj = nn.Linear(e, h * d, bias=True)  # Qwen2-style: biases on q, k, v only
        self.k_proj = nn.Linear(e, hkv * d, bias=True)
        self.v_proj = nn.Linear(e, hkv * d, bias=True)
        self.o_proj = nn.Linear(h * d, e, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, cache_position=None,
                **kwargs):
        b, n, _ = hidden_states.shape
        c = self.config
        q = self.q_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(self.num_key_value_groups, 1)
        v = v.repeat_interleave(self.num_key_value_groups, 1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, c.num_attention_heads * self.head_dim)), None


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = LlamaLikeAttention(config, layer_idx)

    def forward(self, hidden_states, cache_position=None):
        h, _ = self.self_attn(hidden_states=hidden_states, attention_mask=None, position_ids=None,
                              past_key_values=None, use_cache=False, cache_position=cache_position,
                              position_embeddings=(None, None))
        return hidden_states + h


def llama_like(num_layers=2) -> nn.Module:
    torch.manual_seed(0)
    config = SimpleNamespace(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = nn.Module()
    model.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(num_layers))
    return model


def run(model, x, cache_position=None):
    for layer in model.layers:
        x = layer(x, cache_position)
    return x


def test_hugging_face_style_attention_by_duck_typing():
    model = llama_like()
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    reports = convert_attention_to_linear(model)
    assert [(r.name, r.source, r.num_heads, r.num_kv_heads, r.head_dim, r.hf_call) for r in reports] == [
        (f"layers.{i}.self_attn", "LlamaLikeAttention", 4, 2, 16, True) for i in range(2)]
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        assert type(attn) is HFLinearAttention and attn.layer_idx == i and attn.head_dim == 16
        assert attn.q_proj.bias is not None and attn.o_proj.bias is None
    for name, p in model.named_parameters():
        assert torch.equal(p, weights[name]), name

    # The converted layers compute LinearAttention with the carried weights, called the HF way.
    x = torch.randn(2, 11, 48)
    plain = LinearAttention(48, 4, 2, 16, bias=True)
    plain.o_proj = nn.Linear(64, 48, bias=False)
    expected = x
    for layer in model.layers:
        plain.load_state_dict(layer.self_attn.state_dict())
        expected = expected + plain(expected)
    torch.testing.assert_close(run(model, x, torch.arange(11)), expected)


def test_hugging_face_cache_continuation_is_refused():
    model = llama_like(1)
    convert_attention_to_linear(model)
    with pytest.raises(NotImplementedError, match="use_cache=False"):
        run(model, torch.randn(1, 1, 48), cache_position=torch.tensor([5]))


def test_older_attribute_names():
    """transformers < 4.48: num_heads and num_key_value_heads on the module, no config."""
    attn = nn.Module()
    attn.num_heads, attn.num_key_value_heads, attn.head_dim = 8, 2, 4
    attn.q_proj, attn.k_proj = nn.Linear(32, 32, bias=False), nn.Linear(32, 8, bias=False)
    attn.v_proj, attn.o_proj = nn.Linear(32, 8, bias=False), nn.Linear(32, 32, bias=False)
    model = nn.Sequential(attn)
    (report,) = convert_attention_to_linear(model)
    assert (report.name, report.num_heads, report.num_kv_heads, report.head_dim) == ("0", 8, 2, 4)
    out, weights = model[0](torch.randn(1, 3, 32))
    assert out.shape == (1, 3, 32) and weights is None


def test_errors_name_the_module():
    attn = nn.Module()
    attn.q_proj, attn.k_proj = nn.Linear(32, 32), nn.Linear(32, 8)
    attn.v_proj, attn.o_proj = nn.Linear(32, 8), nn.Linear(32, 32)
    with pytest.raises(ValueError, match=r"cannot tell the heads of 0 \(Module\)"):
        convert_attention_to_linear(nn.Sequential(attn))
    attn.num_heads, attn.num_kv_heads = 4, 2
    attn.k_proj, attn.v_proj = nn.Linear(32, 16), nn.Linear(32, 12)
    with pytest.raises(ValueError, match=r"0.v_proj.out_features is 12, but 4 heads, 2 kv heads of dim 8"):
        convert_attention_to_linear(nn.Sequential(attn))
    with pytest.raises(ValueError, match="the model is itself an attention module"):
        convert_attention_to_linear(small_lm(layers=1).blocks[0].attn)


def test_a_failed_conversion_changes_nothing():
    model = small_lm()
    with pytest.raises(ValueError, match="phi must be one of"):
        convert_attention_to_linear(model, phi="softmax")
    with pytest.raises(ValueError, match="cosformer=True needs max_len"):
        convert_attention_to_linear(model, cosformer=True)
    assert all(type(b.attn) is SoftmaxAttention for b in model.blocks)
