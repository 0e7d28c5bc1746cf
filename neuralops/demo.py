"""``python -m neuralops.demo``: neuralops in a small language model, on the GPU when there is one,
else on the PyTorch fallbacks (it prints which ran).

1. checks every op, forward and backward, against plain PyTorch;
2. trains a character-level transformer LM built on ``neuralops.nn.LinearAttention`` (GQA in the
   kernel) on a generated corpus, printing the loss as it falls;
3. generates text with the decode cache and checks the cached logits against a full recompute;
4. compresses the model's linear layers into ``LowRankLinear`` and reports parameters, speed and
   loss before and after, then fine-tunes to recover;
5. trains the same model with softmax attention (SDPA, ``neuralops.nn.repeat_kv``), converts it to
   linear attention with ``convert_attention_to_linear`` and fine-tunes it;
6. plots the loss curves to ``<out>/loss.png``.

``--quick`` runs a smaller version (under a minute on two CPU cores); ``--ops-only`` only step 1.
The exit status is 0 when every check passed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import neuralops
from neuralops.core.suitability import check_triton_suitability
from neuralops.core.triton_kernels import gqa, linear_attn, low_rank
from neuralops.models import CharTokenizer, TransformerConfig, TransformerLM, generate_corpus
from neuralops.nn import LinearAttention, convert_attention_to_linear, replace_linear_with_low_rank


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_ms(fn: Callable[[], object], reps: int = 10) -> float:
    fn()
    _sync()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - start) / reps * 1e3


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _path(supported: bool) -> str:
    return "AOT Triton kernels" if supported else "PyTorch fallback"


def check_ops(device: str) -> bool:
    """Each op forward (and linear attention backward) against a float64 PyTorch reference."""
    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    tol = 2e-2 if cuda else 1e-5
    ok = True

    b, h, hkv, n, d = (4, 16, 4, 4096, 64) if cuda else (2, 4, 2, 512, 32)
    q = torch.randn(b, h, n, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, n, d, device=device, dtype=dtype, requires_grad=True)
    out = linear_attn.fwd(q, k, v, True)
    out.float().square().sum().backward()
    ref = linear_attn.linear_attn_pytorch_fallback(*(t.detach().double() for t in (q, k, v)), True)
    err = _rel(out, ref)
    ms = _time_ms(lambda: linear_attn.fwd(q, k, v, True))
    ok &= err <= tol and q.grad is not None and torch.isfinite(k.grad).all().item()
    print(f"linear_attn causal B{b} H{h} Hkv{hkv} N{n} D{d} {dtype}: {_path(linear_attn.is_supported(q, k, v))}; "
          f"error vs float64 {err:.1e}; gradients reached q, k, v; {ms:.3f} ms")

    m, n_in, n_out, r = (8192, 4096, 4096, 256) if cuda else (256, 512, 512, 64)
    x = torch.randn(m, n_in, device=device, dtype=dtype)
    layer = neuralops.nn.LowRankLinear.from_linear(torch.nn.Linear(n_in, n_out), rank=r).to(device, dtype)
    y = layer(x)
    ref = F.linear(F.linear(x.double(), layer.V.double()), layer.U.double(), layer.bias.double())
    err = _rel(y, ref)
    ms = _time_ms(lambda: layer(x))
    ok &= err <= tol
    print(f"low_rank M{m} {n_in}->{n_out} r{r} {dtype}: {_path(low_rank.is_supported(x, layer.U, layer.V))}; "
          f"error vs float64 {err:.1e}; {ms:.3f} ms ({sum(p.numel() for p in layer.parameters()) / 1e6:.2f} M "
          f"parameters instead of {(n_in * n_out + n_out) / 1e6:.2f} M)")

    ek, _ = gqa.fwd(k, v, hkv, h)
    exact = torch.equal(ek, torch.repeat_interleave(k, h // hkv, dim=1))
    ok &= exact
    ms = _time_ms(lambda: gqa.fwd(k, v, hkv, h))
    print(f"gqa Hkv{hkv}->H{h} N{n} D{d} {dtype}: {_path(gqa.is_supported(k, v, hkv, h))}; exact: {exact}; "
          f"{ms:.3f} ms")
    return ok


@dataclass
class Settings:
    """The sizes of one demo run."""

    corpus_chars: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    seq_len: int
    batch: int
    steps: int
    finetune_steps: int
    decode_tokens: int
    eval_batches: int
    lr: float = 3e-3
    rank_ratio: float = 0.25

    @classmethod
    def full(cls) -> "Settings":
        return cls(corpus_chars=200_000, d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, seq_len=128,
                   batch=16, steps=300, finetune_steps=60, decode_tokens=96, eval_batches=8)

    @classmethod
    def quick(cls) -> "Settings":
        return cls(corpus_chars=40_000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2, seq_len=64,
                   batch=8, steps=150, finetune_steps=30, decode_tokens=24, eval_batches=4)


class Data:
    """Random windows of a token sequence: ``(inputs, targets)`` pairs ``[batch, seq_len]``."""

    def __init__(self, ids: torch.Tensor, seq_len: int, batch: int, device: str, seed: int) -> None:
        self.ids, self.seq_len, self.batch, self.device = ids, seq_len, batch, device
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, len(self.ids) - self.seq_len - 1, (self.batch,), generator=self.gen)
        rows = torch.stack([self.ids[s:s + self.seq_len + 1] for s in starts.tolist()])
        rows = rows.to(self.device)
        return rows[:, :-1], rows[:, 1:]


def train(model: TransformerLM, data: Data, steps: int, lr: float, label: str, log_every: int) -> list[float]:
    """AdamW with a short warmup and cosine decay; returns the loss of every step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, steps // 15)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    model.train()
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        x, y = data.sample()
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == steps - 1:
            rate = (step + 1) * x.numel() / (time.perf_counter() - start)
            print(f"  [{label}] step {step:4d}  loss {losses[-1]:.3f}  ({rate:,.0f} train tokens/s)")
    model.eval()
    return losses


@torch.no_grad()
def evaluate(model: TransformerLM, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """(mean loss, forward tokens/s) over fixed validation batches."""
    model.eval()
    _sync()
    start = time.perf_counter()
    total = sum(model.loss(x, y).item() for x, y in batches)
    _sync()
    tokens = sum(x.numel() for x, _ in batches)
    return total / len(batches), tokens / (time.perf_counter() - start)


@torch.no_grad()
def decode(model: TransformerLM, prompt: torch.Tensor, new_tokens: int,
           gen: torch.Generator) -> tuple[torch.Tensor, float, bool]:
    """Samples ``new_tokens`` with the decode cache. Returns the sequence, the largest difference between
    a cached step's logits and a full recompute's, and whether it is within float32 rounding. The
    recompute is one forward of the final sequence: causal, so its logits at each position are what a
    fresh call on that prefix gives."""
    cache = model.new_cache()
    seq, step_logits = prompt, []
    logits = model(prompt, cache)[:, -1]
    for i in range(new_tokens):
        step_logits.append(logits)
        nxt = torch.multinomial(torch.softmax(logits.float() / 0.8, -1).cpu(), 1, generator=gen).to(prompt.device)
        seq = torch.cat([seq, nxt], 1)
        if i < new_tokens - 1:
            logits = model(nxt, cache)[:, -1]
    full = model(seq)[:, prompt.shape[1] - 1:-1].float()
    diff = (torch.stack(step_logits, 1).float() - full).abs().max().item()
    # The cache sums the sequence in another order than the chunked full pass: rounding differs.
    tol = (1e-3 if prompt.is_cuda else 1e-4) * max(1.0, full.abs().max().item())
    return seq, diff, diff <= tol


@torch.no_grad()
def decode_rate(model: TransformerLM, prompt: torch.Tensor, new_tokens: int, use_cache: bool) -> float:
    """Greedy decode tokens/s, with the cache or recomputing the whole sequence every step."""
    model.generate(prompt, 2, temperature=0, use_cache=use_cache)
    _sync()
    start = time.perf_counter()
    model.generate(prompt, new_tokens, temperature=0, use_cache=use_cache)
    _sync()
    return prompt.shape[0] * new_tokens / (time.perf_counter() - start)


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


Curve = tuple[list[int], list[float]]


def _curve(losses: list[float]) -> Curve:
    return list(range(len(losses))), losses


def _verdict(ok: bool) -> str:
    return "[ok]" if ok else "[FAILED]"


def plot(curves: dict[str, Curve], recovery: dict[str, Curve], levels: dict[str, float], path: Path) -> bool:
    """Two panels of loss curves (smoothed over 10 steps) to a PNG, ``levels`` as dashed lines on the
    second; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install -r requirements.txt installs it)")
        return False

    def smooth(values: list[float], width: int = 10) -> list[float]:
        return [sum(values[max(0, i - width + 1):i + 1]) / (i + 1 - max(0, i - width + 1)) for i in range(len(values))]

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (label, value), color in zip(levels.items(), ("C0", "C1")):
        axes[1].axhline(value, color=color, linestyle="--", linewidth=1, label=label)
    for ax, group, title in ((axes[0], curves, "training from scratch"),
                             (axes[1], recovery, "recovery fine-tuning")):
        for (label, (xs, ys)), color in zip(group.items(), ("C0", "C1")):
            ax.plot(xs, smooth(ys), color=color, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (10-step mean)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _kernel_path(device: str, cfg: TransformerConfig) -> str:
    dtype = torch.float32
    head_dim = cfg.d_model // cfg.num_heads
    probe = torch.empty(1, cfg.num_heads, 1, head_dim, device=device, dtype=dtype)
    ok, why = check_triton_suitability(probe, "linear_attn", head_dim=head_dim)
    return "AOT Triton kernels (CUDA)" if ok else f"PyTorch fallbacks ({why})"


@dataclass
class Context:
    """What the sections of the model demo share."""

    settings: Settings
    device: str
    tok: CharTokenizer
    train_data: Data
    val_batches: list[tuple[torch.Tensor, torch.Tensor]]
    prompt: torch.Tensor
    gen: torch.Generator
    seed: int


def train_linear_model(ctx: Context) -> tuple[TransformerLM, list[float], float, bool]:
    """Trains the LinearAttention LM from scratch: (model, losses, validation loss, whether the loss fell)."""
    s = ctx.settings
    cfg = TransformerConfig(vocab_size=ctx.tok.vocab_size, d_model=s.d_model, num_layers=s.num_layers,
                            num_heads=s.num_heads, num_kv_heads=s.num_kv_heads, max_len=s.seq_len + s.decode_tokens,
                            attention="linear")
    torch.manual_seed(ctx.seed)
    model = TransformerLM(cfg).to(ctx.device)
    print(f"\n== language model on neuralops layers: {s.num_layers} blocks of LinearAttention "
          f"({s.num_heads} query heads, {s.num_kv_heads} kv heads read in the kernel, phi {cfg.phi}) and a "
          f"SwiGLU MLP ({cfg.d_ff}); d_model {s.d_model}; {_params(model) / 1e6:.2f} M parameters; "
          f"{s.steps} steps of {s.batch} x {s.seq_len} tokens")
    print(f"  linear attention runs on: {_kernel_path(ctx.device, cfg)}")
    val_before, _ = evaluate(model, ctx.val_batches)
    start = time.perf_counter()
    losses = train(model, ctx.train_data, s.steps, s.lr, "linear attention", max(1, s.steps // 10))
    train_s = time.perf_counter() - start
    val_loss, _ = evaluate(model, ctx.val_batches)
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    fell = last < 0.7 * first and val_loss < 0.7 * val_before
    print(f"  loss fell from {first:.3f} (first 5 steps) to {last:.3f} (last 10); validation loss "
          f"{val_before:.3f} -> {val_loss:.3f}; {train_s:.1f} s  {_verdict(fell)}")
    return model, losses, val_loss, fell


def generate_section(ctx: Context, model: TransformerLM) -> bool:
    print("\n== generation with the decode cache (LinearAttentionCache: a fixed-size state per layer)")
    seq, diff, match = decode(model, ctx.prompt, ctx.settings.decode_tokens, ctx.gen)
    cached = decode_rate(model, ctx.prompt, ctx.settings.decode_tokens, use_cache=True)
    recompute = decode_rate(model, ctx.prompt, ctx.settings.decode_tokens, use_cache=False)
    print(f"  sample: {ctx.tok.decode(seq[0])!r}")
    print(f"  cached decoding vs full recompute: max |logit difference| {diff:.1e}  {_verdict(match)}")
    print(f"  decode: {cached:,.0f} tokens/s with the cache, {recompute:,.0f} tokens/s recomputing every step")
    return match


def compress_section(ctx: Context, model: TransformerLM, val_loss: float) -> tuple[list[float], bool]:
    """Low-rank compression and fine-tuning, reported before and after: (fine-tune losses, ok)."""
    s = ctx.settings
    print(f"\n== low-rank compression: replace_linear_with_low_rank(rank_ratio={s.rank_ratio}), lm_head kept")
    params_before = _params(model)
    _, fwd_rate = evaluate(model, ctx.val_batches)
    decode_before = decode_rate(model, ctx.prompt, s.decode_tokens, use_cache=True)
    reports = replace_linear_with_low_rank(model, s.rank_ratio, exclude="lm_head")
    replaced = [r for r in reports if r.replaced]
    params_after = _params(model)
    val_compressed, fwd_rate_c = evaluate(model, ctx.val_batches)
    decode_after = decode_rate(model, ctx.prompt, s.decode_tokens, use_cache=True)
    mean_err = sum(r.rel_error for r in replaced) / max(1, len(replaced))
    print(f"  replaced {len(replaced)} of {len(reports)} linear layers (ranks {sorted({r.rank for r in replaced})}, "
          f"mean relative weight error {mean_err:.2f})")
    losses = train(model, ctx.train_data, s.finetune_steps, s.lr / 3, "low-rank fine-tune",
                   max(1, s.finetune_steps // 3))
    val_ft, _ = evaluate(model, ctx.val_batches)
    print(f"  {'':24s} {'parameters':>12s} {'val loss':>9s} {'fwd tokens/s':>13s} {'decode tokens/s':>16s}")
    print(f"  {'before':24s} {params_before:12,d} {val_loss:9.3f} {fwd_rate:13,.0f} {decode_before:16,.0f}")
    print(f"  {'compressed':24s} {params_after:12,d} {val_compressed:9.3f} {fwd_rate_c:13,.0f} {decode_after:16,.0f}")
    print(f"  {f'+ {s.finetune_steps} fine-tune steps':24s} {params_after:12,d} {val_ft:9.3f}")
    ok = params_after < params_before and math.isfinite(val_ft)
    print(f"  parameters {params_before / 1e6:.3f} M -> {params_after / 1e6:.3f} M "
          f"({100 * (1 - params_after / params_before):.0f}% fewer); validation loss {val_loss:.3f} before, "
          f"{val_compressed:.3f} compressed, {val_ft:.3f} after fine-tuning  {_verdict(ok)}")
    return losses, ok


def convert_section(ctx: Context, cfg: TransformerConfig) -> tuple[list[float], list[float], float, bool]:
    """Trains a softmax model, converts it, fine-tunes it: (its losses, fine-tune losses, its val loss, ok)."""
    s = ctx.settings
    print("\n== conversion: a softmax-attention model (SDPA, neuralops.nn.repeat_kv) converted to LinearAttention")
    torch.manual_seed(ctx.seed)
    model = TransformerLM(TransformerConfig(**{**cfg.__dict__, "attention": "softmax"})).to(ctx.device)
    losses = train(model, ctx.train_data, s.steps, s.lr, "softmax attention", max(1, s.steps // 5))
    val_soft, _ = evaluate(model, ctx.val_batches)
    conversions = convert_attention_to_linear(model, phi="elu+1")
    converted = sum(isinstance(b.attn, LinearAttention) for b in model.blocks)
    val_conv, _ = evaluate(model, ctx.val_batches)
    ft_losses = train(model, ctx.train_data, s.finetune_steps, s.lr / 3, "converted fine-tune",
                      max(1, s.finetune_steps // 3))
    val_ft, _ = evaluate(model, ctx.val_batches)
    _, diff, match = decode(model, ctx.prompt, min(16, s.decode_tokens), ctx.gen)
    ok = converted == len(conversions) == s.num_layers and math.isfinite(val_ft) and match
    first = conversions[0]
    print(f"  converted {len(conversions)} modules ({', '.join(c.name for c in conversions)}): {first.source} -> "
          f"LinearAttention, {first.num_heads} heads / {first.num_kv_heads} kv heads of {first.head_dim}, "
          f"q/k/v/o weights carried over")
    print(f"  validation loss: softmax {val_soft:.3f}; converted {val_conv:.3f}; after {s.finetune_steps} "
          f"fine-tune steps {val_ft:.3f}; cached vs recomputed logits differ by {diff:.1e}  {_verdict(ok)}")
    return losses, ft_losses, val_soft, ok


def run_model_demo(s: Settings, device: str, out: Path, seed: int) -> bool:
    text = generate_corpus(s.corpus_chars, seed=seed)
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    split = int(0.9 * len(ids))
    val_data = Data(ids[split:], s.seq_len, s.batch, device, seed + 1)
    ctx = Context(s, device, tok, Data(ids[:split], s.seq_len, s.batch, device, seed),
                  [val_data.sample() for _ in range(s.eval_batches)], tok.encode("The old fox ").to(device)[None],
                  torch.Generator().manual_seed(seed), seed)
    print(f"\n== data: a generated corpus of {len(text):,} characters ({tok.vocab_size} symbols), "
          f"{split:,} for training, {len(ids) - split:,} for validation")
    print("  " + text[:150].replace("\n", " ") + " ...")

    model, losses, val_loss, ok = train_linear_model(ctx)
    ok &= generate_section(ctx, model)
    ft_losses, compressed_ok = compress_section(ctx, model, val_loss)
    soft_losses, conv_losses, val_soft, converted_ok = convert_section(ctx, model.config)

    png = out / "loss.png"
    if plot({"linear attention (neuralops)": _curve(losses), "softmax attention (SDPA, repeat_kv)": _curve(soft_losses)},
            {f"low-rank, rank ratio {s.rank_ratio}": _curve(ft_losses),
             "softmax -> linear conversion": _curve(conv_losses)},
            {"validation loss before compression": val_loss, "validation loss before conversion": val_soft}, png):
        print(f"\nloss curves written to {png}")
    return ok and compressed_ok and converted_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuralops.demo", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller model and fewer steps (< 1 min on CPU)")
    parser.add_argument("--steps", type=int, help="training steps of the linear-attention model")
    parser.add_argument("--out", default="demo_out", help="directory for loss.png (default: demo_out)")
    parser.add_argument("--ops-only", action="store_true", help="only check the ops against PyTorch")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 10:
        parser.error("--steps must be at least 10")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is available")

    start = time.perf_counter()
    info = neuralops.build_info()
    torch.manual_seed(args.seed)
    where = torch.cuda.get_device_name() if device == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"neuralops {neuralops.__version__}: library loaded: {info['loaded']}; device: {device} ({where})")
    if not info["loaded"]:
        print(f"  the ops run on their PyTorch fallbacks: {info['load_error']}")
    print("\n== ops against PyTorch")
    ok = check_ops(device)
    if not args.ops_only:
        settings = Settings.quick() if args.quick else Settings.full()
        if args.steps is not None:
            settings.steps = args.steps
        ok &= run_model_demo(settings, device, Path(args.out), args.seed)
    print(f"\n{'all checks passed' if ok else 'CHECKS FAILED'} ({time.perf_counter() - start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
