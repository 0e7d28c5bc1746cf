"""The layers on the GPU: LinearAttention forward and backward on the kernels against the same layer
on the CPU fallback in float64, the decode cache on CUDA, repeat_kv on the GQA kernel against Hugging
Face's form, the reference model training and decoding, and the demo and end-to-end benchmark at small
sizes. Tolerances: norm-wise relative errors, bf16 2e-2, fp16 1e-2, fp32 1e-4."""

import copy
import os
import subprocess
import sys

import pytest
import torch

from helpers import rel_error
from neuralops.bench import e2e
from neuralops.core.triton_kernels import gqa, linear_attn
from neuralops.models import TransformerConfig, TransformerLM
from neuralops.nn import LinearAttention, repeat_kv

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float32: 1e-4}


def layer_pair(dtype, **kwargs):
    torch.manual_seed(0)
    cpu = LinearAttention(256, 8, dtype=torch.float64, **kwargs)
    gpu = copy.deepcopy(cpu).to("cuda", dtype)
    return cpu, gpu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal,cosformer,num_kv_heads", [(True, False, 2), (True, True, 4), (False, False, 1),
                                                           (False, True, 8)])
def test_layer_forward_backward_matches_cpu(library_loaded, dtype, causal, cosformer, num_kv_heads):
    cpu, gpu = layer_pair(dtype, num_kv_heads=num_kv_heads, causal=causal, cosformer=cosformer,
                          max_len=300 if cosformer else None)
    x = torch.randn(2, 257, 256, dtype=torch.float64)
    q = torch.empty(2, 8, 257, 32, device="cuda", dtype=dtype)
    assert linear_attn.is_supported(q, q[:, :num_kv_heads], q[:, :num_kv_heads])
    x_cpu = x.clone().requires_grad_(True)
    x_gpu = x.to("cuda", dtype).requires_grad_(True)
    out_cpu, out_gpu = cpu(x_cpu), gpu(x_gpu)
    assert rel_error(out_gpu.cpu(), out_cpu) < TOL[dtype]
    g = torch.randn_like(out_cpu)
    out_cpu.backward(g)
    out_gpu.backward(g.to("cuda", dtype))
    assert rel_error(x_gpu.grad.cpu(), x_cpu.grad) < TOL[dtype]
    for (name, p_cpu), p_gpu in zip(cpu.named_parameters(), gpu.parameters()):
        assert rel_error(p_gpu.grad.cpu(), p_cpu.grad) < TOL[dtype], name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("cosformer", [False, True])
def test_decode_cache_on_cuda_matches_full_sequence(library_loaded, dtype, cosformer):
    _, layer = layer_pair(dtype, num_kv_heads=2, cosformer=cosformer, max_len=200 if cosformer else None)
    x = torch.randn(3, 150, 256, device="cuda", dtype=dtype)
    with torch.no_grad():
        full = layer(x)
        cache = layer.new_cache()
        pieces = [layer(x[:, :100], cache=cache)] + [layer(x[:, i:i + 1], cache=cache) for i in range(100, 140)]
        pieces.append(layer(x[:, 140:], cache=cache))
    assert cache.state.S.dtype == torch.float32 and cache.offset == 150
    assert rel_error(torch.cat(pieces, 1), full) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_rep", [2, 4])
def test_repeat_kv_on_the_kernel(library_loaded, dtype, n_rep):
    x = torch.randn(2, 300, 4, 128, device="cuda", dtype=dtype).transpose(1, 2)  # a projection, viewed
    assert gqa.is_supported(x, x, 4, 4 * n_rep)
    b, h, n, d = x.shape
    ref = x[:, :, None].expand(b, h, n_rep, n, d).reshape(b, h * n_rep, n, d)
    assert torch.equal(repeat_kv(x, n_rep), ref)
    leaf = torch.randn(2, 4, 300, 128, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(2, 4 * n_rep, 300, 128, device="cuda", dtype=dtype)
    (grad,) = torch.autograd.grad(repeat_kv(leaf, n_rep), leaf, g)
    expected = g.float().view(2, 4, n_rep, 300, 128).sum(2)
    assert rel_error(grad, expected) < (1e-2 if dtype != torch.float32 else 1e-6)


def test_reference_model_trains_and_decodes_on_cuda(library_loaded):
    cfg = TransformerConfig(vocab_size=64, d_model=256, num_layers=2, num_heads=8, num_kv_heads=2, max_len=160,
                            attention="linear", cosformer=True)
    torch.manual_seed(0)
    model = TransformerLM(cfg).cuda()
    tokens = torch.randint(0, 64, (4, 129), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model.loss(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():
        full = model(tokens[:, :150])
        cache = model.new_cache()
        steps = [model(tokens[:, :120], cache)] + [model(tokens[:, i:i + 1], cache) for i in range(120, 150)]
    assert rel_error(torch.cat(steps, 1), full) < 1e-4


def test_e2e_benchmark_smoke_on_cuda(library_loaded, tmp_path):
    assert e2e.main(["--smoke", "--json", str(tmp_path / "e2e.json")]) == 0


def test_demo_quick_on_cuda(library_loaded, tmp_path):
    result = subprocess.run([sys.executable, "-m", "neuralops.demo", "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd="/", env=dict(os.environ), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "linear attention runs on: AOT Triton kernels (CUDA)" in result.stdout
    assert "all checks passed" in result.stdout
