"""``python -m neuralops.bench.e2e [--quick] [--json PATH] [--markdown PATH]``: one transformer language
model trained and decoded end to end, built from neuralops layers and from plain PyTorch.

The model is ``neuralops.models.TransformerLM`` (pre-norm blocks, SwiGLU MLP, GQA); by default d_model
1024, 16 heads, 4 kv heads, 8 layers, vocabulary 32768, bf16 weights, batch 8 of 2048 tokens. Variants:

- ``pytorch``: softmax attention (SDPA, causal) with Hugging Face's ``repeat_kv`` and ``nn.Linear``;
- ``neuralops repeat_kv``: the same with ``neuralops.nn.repeat_kv`` (the GQA kernel);
- ``neuralops linear``: ``neuralops.nn.LinearAttention`` (elu+1, GQA read in the kernel);
- ``neuralops linear + low-rank``: that, with every linear layer of the blocks a ``LowRankLinear``
  (rank a quarter of the full rank; random weights: speed only).

Measured per variant: a training step (forward, backward, AdamW; median wall time, CUDA synchronized),
the prefill of a prompt into the decode cache, and greedy decode tokens/s after it (one token per
sequence per step, eager PyTorch), with peak memory. On a machine without CUDA it exits with a message;
``--smoke`` runs a tiny size on the CPU to check the code paths.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable

import torch
from torch import nn

import neuralops
from neuralops.core.triton_kernels import gqa, linear_attn, low_rank
from neuralops.models import TransformerConfig, TransformerLM
from neuralops.nn import LowRankLinear

VARIANTS = ("pytorch", "neuralops repeat_kv", "neuralops linear", "neuralops linear + low-rank")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class Sizes:
    d_model: int = 1024
    num_layers: int = 8
    num_heads: int = 16
    num_kv_heads: int = 4
    vocab_size: int = 32768
    batch: int = 8
    seq_len: int = 2048
    prompt_len: int = 2048
    decode_tokens: int = 256
    rank_ratio: float = 0.25


@dataclass
class Row:
    variant: str
    params: int
    train_step_ms: float
    train_tokens_per_s: float
    prefill_ms: float
    decode_tokens_per_s: float
    decode_ms_per_step: float
    peak_train_gb: float
    error: str = ""


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], object], device: str, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _low_rank_blocks(model: TransformerLM, ratio: float) -> None:
    """Every nn.Linear of the blocks becomes a LowRankLinear of rank ratio * min(in, out) (multiple of 16)."""
    for block in model.blocks:
        for name, module in list(block.named_modules()):
            if type(module) is not nn.Linear:
                continue
            rank = max(16, int(ratio * min(module.in_features, module.out_features)) // 16 * 16)
            parent, _, child = name.rpartition(".")
            setattr(block.get_submodule(parent) if parent else block, child,
                    LowRankLinear(module.in_features, module.out_features, rank, bias=module.bias is not None,
                                  device=module.weight.device, dtype=module.weight.dtype))


def build(variant: str, sizes: Sizes, device: str, dtype: torch.dtype) -> TransformerLM:
    cfg = TransformerConfig(vocab_size=sizes.vocab_size, d_model=sizes.d_model, num_layers=sizes.num_layers,
                            num_heads=sizes.num_heads, num_kv_heads=sizes.num_kv_heads,
                            max_len=max(sizes.seq_len, sizes.prompt_len + sizes.decode_tokens),
                            attention="softmax" if variant in VARIANTS[:2] else "linear",
                            repeat_kv="torch" if variant == "pytorch" else "neuralops")
    torch.manual_seed(0)
    with torch.device(device):  # initialized where it runs: no host-side init of the weights
        model = TransformerLM(cfg).to(dtype)
    if variant == "neuralops linear + low-rank":
        _low_rank_blocks(model, sizes.rank_ratio)
    return model


def _train(model: TransformerLM, tokens: torch.Tensor, device: str, warmup: int, reps: int) -> tuple[float, float]:
    """(median training step ms, peak GiB); the optimizer and its state are freed on return."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
        opt.step()

    model.train()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ms = _median_ms(step, device, warmup, reps)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    model.zero_grad(set_to_none=True)
    return ms, peak


@torch.no_grad()
def _decode(model: TransformerLM, prompt: torch.Tensor, steps: int, device: str) -> tuple[float, float]:
    """(prefill ms, ms for ``steps`` greedy decode steps) from a fresh cache."""
    model.eval()
    cache = model.new_cache()
    _sync(device)
    start = time.perf_counter()
    logits = model(prompt, cache)[:, -1]
    _sync(device)
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        logits = model(logits.argmax(-1, keepdim=True), cache)[:, -1]
    _sync(device)
    return prefill * 1e3, (time.perf_counter() - start) * 1e3


def measure(variant: str, sizes: Sizes, device: str, dtype: torch.dtype, warmup: int, reps: int) -> Row:
    model = build(variant, sizes, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator(device=device).manual_seed(0)
    length = max(sizes.seq_len + 1, sizes.prompt_len)
    tokens = torch.randint(0, sizes.vocab_size, (sizes.batch, length), device=device, generator=gen)
    step_ms, peak = _train(model, tokens[:, :sizes.seq_len + 1], device, warmup, reps)
    prompt = tokens[:, :sizes.prompt_len]
    _decode(model, prompt, min(8, sizes.decode_tokens), device)
    runs = [_decode(model, prompt, sizes.decode_tokens, device) for _ in range(max(1, min(reps, 3)))]
    prefill_ms = statistics.median(r[0] for r in runs)
    decode_ms = statistics.median(r[1] for r in runs)
    return Row(variant, params, step_ms, sizes.batch * sizes.seq_len / step_ms * 1e3, prefill_ms,
               sizes.batch * sizes.decode_tokens / decode_ms * 1e3, decode_ms / sizes.decode_tokens, peak)


def kernel_paths(sizes: Sizes, device: str, dtype: torch.dtype) -> dict[str, bool]:
    """Whether each op runs on its AOT kernels at these sizes (else its PyTorch fallback)."""
    d = sizes.d_model // sizes.num_heads
    q = torch.empty(1, sizes.num_heads, 1, d, device=device, dtype=dtype)
    k = torch.empty(1, sizes.num_kv_heads, 1, d, device=device, dtype=dtype)
    x = torch.empty(1, sizes.d_model, device=device, dtype=dtype)
    u = torch.empty(sizes.d_model, 16, device=device, dtype=dtype)
    v = torch.empty(16, sizes.d_model, device=device, dtype=dtype)
    return {"linear_attn": linear_attn.is_supported(q, k, k),
            "gqa": gqa.is_supported(k, k, sizes.num_kv_heads, sizes.num_heads),
            "low_rank": low_rank.is_supported(x, u, v)}


def markdown(rows: list[Row], sizes: Sizes) -> str:
    base = next((r for r in rows if r.variant == "pytorch" and not r.error), None)
    out = [f"| model | params | train step ms | train tokens/s | vs pytorch | prefill {sizes.prompt_len} ms | "
           f"decode tokens/s | vs pytorch | decode ms/step | peak train GiB |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.error:
            out.append(f"| {r.variant} | failed: {r.error} |||||||||")
            continue
        train_x = f"{base.train_step_ms / r.train_step_ms:.2f}x" if base else ""
        decode_x = f"{r.decode_tokens_per_s / base.decode_tokens_per_s:.2f}x" if base else ""
        out.append(f"| {r.variant} | {r.params / 1e6:.1f} M | {r.train_step_ms:.1f} | {r.train_tokens_per_s:,.0f} | "
                   f"{train_x} | {r.prefill_ms:.1f} | {r.decode_tokens_per_s:,.0f} | {decode_x} | "
                   f"{r.decode_ms_per_step:.2f} | {r.peak_train_gb:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuralops.bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and decode steps")
    parser.add_argument("--smoke", action="store_true", help="a tiny size on whatever device there is (CPU too)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), metavar="VARIANT",
                        help=f"of {VARIANTS}")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--json", help="write the rows, sizes and environment here")
    parser.add_argument("--markdown", help="write the table here")
    for field, default in asdict(Sizes()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=None,
                            help=f"default {default}")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("neuralops.bench.e2e needs a CUDA GPU (--smoke runs a tiny size on the CPU)", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    dtype = DTYPES[args.dtype] if cuda else torch.float32
    sizes = Sizes()
    if args.smoke:
        sizes = Sizes(d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, vocab_size=128, batch=2, seq_len=64,
                      prompt_len=32, decode_tokens=8)
    elif args.quick:
        sizes.decode_tokens = 64
    for field in asdict(sizes):
        value = getattr(args, field)
        if value is not None:
            setattr(sizes, field, value)
    warmup, reps = (1, 2) if args.smoke else (2, 5) if args.quick else (3, 10)

    where = torch.cuda.get_device_name() if cuda else "cpu"
    paths = kernel_paths(sizes, device, dtype)
    header = (f"{where}, torch {torch.__version__}, neuralops {neuralops.__version__}, {str(dtype).split('.')[-1]}, "
              f"eager; d_model {sizes.d_model}, {sizes.num_layers} layers, {sizes.num_heads} heads / "
              f"{sizes.num_kv_heads} kv heads, vocabulary {sizes.vocab_size}; training batch {sizes.batch} x "
              f"{sizes.seq_len}; decode: batch {sizes.batch}, {sizes.decode_tokens} tokens after a "
              f"{sizes.prompt_len}-token prompt; low-rank ratio {sizes.rank_ratio}. Ops on their kernels: "
              + ", ".join(f"{op} {'yes' if ok else 'no (fallback)'}" for op, ok in paths.items()) + ".")
    print(header)
    rows = []
    for variant in args.variants:
        try:
            row = measure(variant, sizes, device, dtype, warmup, reps)
            print(f"{variant:30s} train step {row.train_step_ms:9.2f} ms ({row.train_tokens_per_s:12,.0f} tokens/s)  "
                  f"prefill {row.prefill_ms:8.2f} ms  decode {row.decode_tokens_per_s:10,.0f} tokens/s  "
                  f"peak {row.peak_train_gb:.1f} GiB", flush=True)
        except Exception as exc:  # noqa: BLE001 - one variant failing (out of memory, say) must not lose the others
            traceback.print_exc()
            row = Row(variant, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, error=f"{type(exc).__name__}: {exc}"[:200])
        rows.append(row)
        if cuda:
            torch.cuda.empty_cache()

    table = markdown(rows, sizes)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(header + "\n\n" + table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": where, "torch": torch.__version__, "dtype": str(dtype), "sizes": asdict(sizes),
                       "kernel_paths": paths, "build_info": neuralops.build_info(),
                       "rows": [asdict(r) for r in rows]}, f, indent=1)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
