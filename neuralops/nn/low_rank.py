"""``LowRankLinear``: a linear layer factored through rank r, and tools to compress models into it.

``LowRankLinear(in, out, r)`` holds ``V [r, in]``, ``U [out, r]`` and ``bias [out]`` and computes
``y = (x @ V.T) @ U.T + bias`` with ``neuralops.core.triton_kernels.low_rank`` (the Triton kernels
on CUDA, PyTorch elsewhere). ``in * out`` weights become ``r * (in + out)``.

``LowRankLinear.from_linear(linear, r)`` takes the best rank-r approximation of ``linear.weight``
(truncated SVD, ``W ~ (U_r sqrt(S_r)) (sqrt(S_r) V_r)``: the singular values split evenly between
the two factors, so neither dominates their scale). ``replace_linear_with_low_rank(model, ratio)``
does that for a model's ``nn.Linear`` layers, chosen by name, and reports per layer the parameters
before and after and the relative reconstruction error ``||W - U V||_F / ||W||_F``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import nn

from neuralops.core.triton_kernels import low_rank
from neuralops.nn._select import Pattern, select_modules, set_submodule


class LowRankLinear(nn.Module):
    """``y = (x @ V.T) @ U.T + bias`` with ``U [out_features, rank]`` and ``V [rank, in_features]``.

    Initialized so that the entries of ``U @ V`` have the variance of ``nn.Linear``'s weight, and
    the bias as ``nn.Linear``'s.
    """

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features), ("rank", rank)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"LowRankLinear: {name} must be a positive int, got {value!r}")
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        factory = {"device": device, "dtype": dtype}
        self.U = nn.Parameter(torch.empty(out_features, rank, **factory))
        self.V = nn.Parameter(torch.empty(rank, in_features, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's weight has per-entry variance 1 / (3 * in). Entries of U @ V have variance
        # rank * var(U) * var(V): V as nn.Linear's weight and var(U) = 1 / rank match it.
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.V, -bound, bound)
        nn.init.uniform_(self.U, -math.sqrt(3.0 / self.rank), math.sqrt(3.0 / self.rank))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return low_rank.fwd(x, self.U, self.V, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
                f"bias={self.bias is not None}")

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int) -> "LowRankLinear":
        """The rank-``rank`` truncated SVD of ``linear`` (same device and dtype, bias copied).

        The SVD runs in float32 (float64 for float64 weights) on the weight's device.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"LowRankLinear.from_linear: expected an nn.Linear, got {type(linear).__name__}")
        full = min(linear.in_features, linear.out_features)
        if not isinstance(rank, int) or not 1 <= rank <= full:
            raise ValueError(f"LowRankLinear.from_linear: rank must be an int in [1, min(in_features, "
                             f"out_features)] = [1, {full}], got {rank!r}")
        weight = linear.weight.detach()
        module = cls(linear.in_features, linear.out_features, rank, bias=linear.bias is not None,
                     device=weight.device, dtype=weight.dtype)
        u, v = _svd_factors(weight, rank)
        with torch.no_grad():
            module.U.copy_(u)
            module.V.copy_(v)
            if linear.bias is not None:
                module.bias.copy_(linear.bias.detach())
        return module


def _svd_factors(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    work = weight.double() if weight.dtype == torch.float64 else weight.float()
    u, s, vh = torch.linalg.svd(work, full_matrices=False)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, root[:, None] * vh[:rank]


def reconstruction_error(weight: torch.Tensor, U: torch.Tensor, V: torch.Tensor) -> float:
    """``||W - U @ V||_F / ||W||_F``, in float64 (0 for a zero W reproduced exactly)."""
    w = weight.detach().double()
    err = (w - U.detach().double() @ V.detach().double()).norm().item()
    norm = w.norm().item()
    return err / norm if norm > 0 else err


@dataclass
class LowRankReplacement:
    """What ``replace_linear_with_low_rank`` did with one selected ``nn.Linear``."""

    name: str
    in_features: int
    out_features: int
    rank: int
    params_before: int
    params_after: int          # equal to params_before when the layer was kept
    rel_error: float           # ||W - U V||_F / ||W||_F; 0.0 when the layer was kept
    replaced: bool
    reason: str = ""           # why a selected layer was kept

    @property
    def params_saved(self) -> int:
        return self.params_before - self.params_after


def replace_linear_with_low_rank(
    model: nn.Module,
    rank_ratio: float,
    *,
    include: Pattern | Iterable[Pattern] | None = None,
    exclude: Pattern | Iterable[Pattern] | None = None,
    rank_multiple: int = 16,
    only_if_smaller: bool = True,
) -> list[LowRankReplacement]:
    """Replaces, in place, the ``nn.Linear`` layers of ``model`` by ``LowRankLinear.from_linear``.

    rank_ratio: the rank kept, as a fraction of each layer's full rank ``min(in, out)``: rank =
        ``ceil(rank_ratio * min(in, out))`` rounded up to a multiple of ``rank_multiple`` (16 by
        default: the kernels' fast paths need ranks that are multiples of 16) and capped at the
        full rank.
    include / exclude: layer names (as ``model.named_modules()`` gives them) to select; each is a
        pattern or a list of them. A ``str`` is an fnmatch pattern (``"layers.*.mlp.*"``); an
        ``re.Pattern`` (``re.compile(...)``) must match the whole name. By default every layer is
        included; a name matching ``exclude`` is skipped.
    only_if_smaller: keep a layer whose factored form would not have fewer parameters.

    Only exact ``nn.Linear`` instances are considered (subclasses, such as the output projection
    ``nn.MultiheadAttention`` reads directly, are left alone). Returns one report per selected
    layer, in ``named_modules`` order.
    """
    if not isinstance(rank_ratio, (int, float)) or not 0 < rank_ratio <= 1:
        raise ValueError(f"replace_linear_with_low_rank: rank_ratio must be in (0, 1], got {rank_ratio!r}")
    if not isinstance(rank_multiple, int) or rank_multiple < 1:
        raise ValueError(f"replace_linear_with_low_rank: rank_multiple must be a positive int, got {rank_multiple!r}")
    selected = select_modules(model, lambda m: type(m) is nn.Linear, include, exclude,
                              "replace_linear_with_low_rank")

    reports = []
    for name, linear in selected:
        full = min(linear.in_features, linear.out_features)
        rank = math.ceil(rank_ratio * full)
        rank = min(full, -(-rank // rank_multiple) * rank_multiple)
        before = linear.weight.numel() + (linear.bias.numel() if linear.bias is not None else 0)
        after = rank * (linear.in_features + linear.out_features) + (linear.out_features if linear.bias is not None else 0)
        report = LowRankReplacement(name, linear.in_features, linear.out_features, rank, before, after, 0.0, False)
        if only_if_smaller and after >= before:
            report.params_after = before
            report.reason = f"rank {rank} would not save parameters ({after} >= {before})"
        else:
            replacement = LowRankLinear.from_linear(linear, rank)
            replacement.train(linear.training)
            report.rel_error = reconstruction_error(linear.weight, replacement.U, replacement.V)
            report.replaced = True
            set_submodule(model, name, replacement)
        reports.append(report)
    return reports
