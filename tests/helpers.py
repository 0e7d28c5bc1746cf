"""Shared test utilities."""

from __future__ import annotations

import pytest
import torch


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Norm-wise relative error ||out - ref|| / ||ref||, computed in float64."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    denom = ref64.norm().item()
    err = (out64 - ref64).norm().item()
    return err / denom if denom > 0 else err


def poison_allocator(device: str = "cuda", nbytes: int = 1 << 28) -> None:
    """Fill a block of the caching allocator with NaN and free it, so that outputs allocated next
    likely start as NaN: an element a kernel forgets to write then fails the comparison."""
    block = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block


def phi_reference(x: torch.Tensor, phi: str) -> torch.Tensor:
    """The linear-attention feature maps, plainly: elu+1, relu, and identity (softmax_free too)."""
    if phi == "elu+1":
        return torch.where(x > 0, x + 1, torch.exp(x))
    if phi == "relu":
        return x.clamp_min(0)
    return x


def assert_compiled_matches_eager(fn, inputs, **compile_kwargs) -> None:
    """``fn`` (inputs -> a scalar loss) under ``torch.compile(fullgraph=True)`` gives eager's loss and
    the same gradients for every input."""
    out = torch.compile(fn, fullgraph=True, **compile_kwargs)(*inputs)
    grads = torch.autograd.grad(out, inputs)
    ref = fn(*inputs)
    ref_grads = torch.autograd.grad(ref, inputs)
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def train_losses(model: torch.nn.Module, data: torch.Tensor, steps: int, lr: float = 1e-2) -> list[float]:
    """Next-token training of a language model (``model.loss(inputs, targets)``) on rows of tokens
    with AdamW: the loss after each step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = model.loss(data[:, :-1], data[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _interpreter_indexes_scalars() -> bool:
    """Triton's interpreter before 3.7 turns run-time scalars into 1-element arrays, which NumPy 2.4+
    refuses to use as an index (``range(0, D, BLOCK)`` in a kernel then fails). Kernels are fine.
    Reads versions without importing Triton: an import here, under the CPU tests' TRITON_INTERPRET=1,
    would leave Triton's own jit functions interpreted, and torch.compile in the GPU tests fails."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        triton, numpy = version("triton"), version("numpy")
    except PackageNotFoundError:
        return False
    major_minor = lambda v: tuple(int(x) for x in v.split(".")[:2])  # noqa: E731
    return major_minor(triton) >= (3, 7) or major_minor(numpy) < (2, 4)


requires_interpreter = pytest.mark.skipif(
    not _interpreter_indexes_scalars(),
    reason="this Triton's interpreter cannot index with run-time scalars under this NumPy (CI has Triton 3.8)")
