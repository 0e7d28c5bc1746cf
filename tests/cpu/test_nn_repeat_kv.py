"""neuralops.nn.repeat_kv against Hugging Face's repeat_kv (written out here), its gradient, views,
that it runs on the GQA op, and errors."""

import pytest
import torch

from neuralops.core.triton_kernels import gqa
from neuralops.nn import repeat_kv


def hf_repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """transformers.models.llama.modeling_llama.repeat_kv."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


@pytest.mark.parametrize("n_rep", [2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("hkv", [1, 2])
def test_equals_hf_and_its_gradient(n_rep, dtype, hkv):
    x = torch.randn(2, hkv, 5, 12).to(dtype).requires_grad_(True)
    out = repeat_kv(x, n_rep)
    ref = hf_repeat_kv(x, n_rep)
    assert out.shape == (2, hkv * n_rep, 5, 12) and out.dtype == dtype
    assert torch.equal(out, ref)
    g = torch.randn(out.shape).to(dtype)
    (grad,) = torch.autograd.grad(out, x, g)
    (grad_ref,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(grad, grad_ref)


def test_head_h_is_kv_head_h_over_n_rep():
    x = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 2, 4)
    out = repeat_kv(x, 2)
    assert out[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]


def test_n_rep_one_returns_the_input():
    x = torch.randn(1, 4, 3, 8)
    assert repeat_kv(x, 1) is x


def test_transposed_projection_view():
    """A [B, N, Hkv, D] projection output viewed as [B, Hkv, N, D], as attention layers pass it."""
    proj = torch.randn(2, 7, 2, 16)
    x = proj.transpose(1, 2)
    assert torch.equal(repeat_kv(x, 4), hf_repeat_kv(x, 4))


def test_runs_on_the_gqa_op(monkeypatch):
    calls = []
    real = gqa.fwd

    def spy(k, v, num_kv_heads, num_heads, **kwargs):
        calls.append((tuple(k.shape), tuple(v.shape), num_kv_heads, num_heads))
        return real(k, v, num_kv_heads, num_heads, **kwargs)

    monkeypatch.setattr(gqa, "fwd", spy)
    repeat_kv(torch.randn(2, 2, 5, 8), 3)
    # One expansion: the second tensor of the pair is empty, so no work is done twice.
    assert calls == [((2, 2, 5, 8), (2, 2, 0, 8), 2, 6)]


def test_errors():
    with pytest.raises(TypeError, match="hidden_states must be a torch.Tensor"):
        repeat_kv([[1.0]], 2)
    with pytest.raises(ValueError, match=r"must be 4-D \[B, Hkv, N, D\], got shape \(2, 5, 8\)"):
        repeat_kv(torch.randn(2, 5, 8), 2)
    with pytest.raises(ValueError, match="n_rep must be >= 1, got 0"):
        repeat_kv(torch.randn(1, 2, 3, 4), 0)
    with pytest.raises(TypeError, match="n_rep must be an int, got float"):
        repeat_kv(torch.randn(1, 2, 3, 4), 2.0)
    with pytest.raises(TypeError, match="n_rep must be an int, got bool"):
        repeat_kv(torch.randn(1, 2, 3, 4), True)
