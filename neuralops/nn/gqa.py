"""``repeat_kv``: Hugging Face's GQA helper, on neuralops' GQA expansion kernel."""

from __future__ import annotations

import torch

from neuralops.core.arguments import check_int
from neuralops.core.triton_kernels import gqa


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeats each key/value head ``n_rep`` times: ``[B, Hkv, N, D] -> [B, Hkv * n_rep, N, D]``.

    A drop-in for ``transformers.models.llama.modeling_llama.repeat_kv``: output head ``h`` is input
    head ``h // n_rep`` (``torch.repeat_interleave(x, n_rep, dim=1)``). With ``n_rep == 1`` the input
    is returned as it is. Otherwise the GQA kernel writes a new contiguous tensor on CUDA (fp16, bf16,
    fp32); elsewhere PyTorch expands it (with a single kv head into a broadcast view, as Hugging
    Face's does). Differentiable: the gradient sums each group of heads. The input may be any view
    with a unit last stride, such as a projection's ``[B, N, Hkv, D]`` output transposed to
    ``[B, Hkv, N, D]``; it is read in place.
    """
    if not isinstance(hidden_states, torch.Tensor):
        raise TypeError(f"repeat_kv: hidden_states must be a torch.Tensor, got {type(hidden_states).__name__}")
    if hidden_states.dim() != 4:
        raise ValueError(f"repeat_kv: hidden_states must be 4-D [B, Hkv, N, D], got shape "
                         f"{tuple(hidden_states.shape)}")
    check_int(n_rep, "n_rep", "repeat_kv")
    if n_rep < 1:
        raise ValueError(f"repeat_kv: n_rep must be >= 1, got {n_rep}")
    if n_rep == 1:
        return hidden_states
    heads = hidden_states.shape[1]
    if heads == 0:
        raise ValueError(f"repeat_kv: hidden_states must have at least one head in dim 1, got shape "
                         f"{tuple(hidden_states.shape)}")
    # gqa.fwd expands a (k, v) pair; an empty second tensor costs no launch and no memory.
    expanded, _ = gqa.fwd(hidden_states, hidden_states[:, :, :0], heads, heads * n_rep)
    return expanded
