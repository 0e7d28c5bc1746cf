"""``convert_attention_to_linear``: swaps a transformer's softmax attention for ``LinearAttention``.

The converted model starts from the trained projections and needs recovery fine-tuning: linear
attention computes a different function of the same q, k and v (and drops whatever the original
did between the projections, such as rotary embeddings).

Attention modules are found by duck typing: any module with ``q_proj``, ``k_proj``, ``v_proj`` and
``o_proj`` children. Head counts come from the module's attributes (``num_heads``,
``num_kv_heads`` or ``num_key_value_heads``, ``head_dim``), else from its ``config``
(``num_attention_heads``, ``num_key_value_heads``, ``head_dim``) as in Hugging Face's
``LlamaAttention``, else from the projection widths; ``transformers`` is never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from neuralops.nn.attention import LinearAttention
from neuralops.nn._select import Pattern, select_modules, set_submodule

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


class HFLinearAttention(LinearAttention):
    """``LinearAttention`` called the way Hugging Face decoder layers call their attention.

    ``forward(hidden_states [B, N, E], ...) -> (out [B, N, E], None)``: the other arguments
    (attention mask, rotary position embeddings, cache) are accepted and not used. The mask is
    causal; padding masks are not applied, so pad on the right (causal attention never reads
    later positions). Generation through Hugging Face caches is not supported: a call that
    continues a cached sequence raises ``NotImplementedError``; decode with ``LinearAttention``'s
    own cache instead.
    """

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        cache_position = kwargs.get("cache_position")
        if isinstance(cache_position, torch.Tensor) and cache_position.numel() and int(cache_position[0]) != 0:
            raise NotImplementedError(
                "HFLinearAttention: continuing a sequence from a Hugging Face cache is not supported; "
                "call the model with use_cache=False on whole sequences, or decode with LinearAttention's "
                "own cache")
        return super().forward(hidden_states), None


@dataclass
class AttentionConversion:
    """One attention module ``convert_attention_to_linear`` replaced."""

    name: str
    source: str            # the class name of the module replaced
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hf_call: bool          # replaced by HFLinearAttention (returns a tuple) rather than LinearAttention


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _features(proj: nn.Module, attr: str, name: str, module_name: str) -> int:
    value = getattr(proj, attr, None)
    if not isinstance(value, int):
        raise TypeError(f"convert_attention_to_linear: {module_name}.{name} must be a linear layer with "
                        f"{attr} (nn.Linear, LowRankLinear), got {type(proj).__name__}")
    return value


def _geometry(module: nn.Module, name: str) -> tuple[int, int, int, int]:
    """(embed_dim, num_heads, num_kv_heads, head_dim) of an attention module, checked against its projections."""
    config = getattr(module, "config", None)
    q_out = _features(module.q_proj, "out_features", "q_proj", name)
    k_out = _features(module.k_proj, "out_features", "k_proj", name)
    embed_dim = _features(module.q_proj, "in_features", "q_proj", name)
    head_dim = _first(getattr(module, "head_dim", None), getattr(config, "head_dim", None))
    num_heads = _first(getattr(module, "num_heads", None), getattr(config, "num_attention_heads", None))
    if head_dim is None and num_heads is None:
        raise ValueError(f"convert_attention_to_linear: cannot tell the heads of {name} "
                         f"({type(module).__name__}): it has neither num_heads nor head_dim, nor a config with them")
    if num_heads is None:
        num_heads = q_out // head_dim
    if head_dim is None:
        head_dim = q_out // num_heads
    num_kv_heads = _first(getattr(module, "num_kv_heads", None), getattr(module, "num_key_value_heads", None),
                          getattr(config, "num_key_value_heads", None), k_out // head_dim)
    v_out = _features(module.v_proj, "out_features", "v_proj", name)
    expected = {"q_proj.out_features": (q_out, num_heads * head_dim),
                "k_proj.out_features": (k_out, num_kv_heads * head_dim),
                "v_proj.out_features": (v_out, num_kv_heads * head_dim),
                "o_proj.in_features": (_features(module.o_proj, "in_features", "o_proj", name), num_heads * head_dim),
                "o_proj.out_features": (_features(module.o_proj, "out_features", "o_proj", name), embed_dim)}
    for what, (got, want) in expected.items():
        if got != want:
            raise ValueError(f"convert_attention_to_linear: {name}.{what} is {got}, but {num_heads} heads, "
                             f"{num_kv_heads} kv heads of dim {head_dim} and embed_dim {embed_dim} need {want}")
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"convert_attention_to_linear: {name} has {num_heads} heads, not a multiple of its "
                         f"{num_kv_heads} kv heads")
    return embed_dim, num_heads, num_kv_heads, head_dim


def _is_attention(module: nn.Module) -> bool:
    return not isinstance(module, LinearAttention) and all(
        isinstance(getattr(module, p, None), nn.Module) for p in _PROJECTIONS)


def convert_attention_to_linear(
    model: nn.Module,
    *,
    phi: str = "elu+1",
    cosformer: bool = False,
    max_len: int | None = None,
    eps: float = 1e-6,
    include: Pattern | Iterable[Pattern] | None = None,
    exclude: Pattern | Iterable[Pattern] | None = None,
) -> list[AttentionConversion]:
    """Replaces, in place, the attention modules of ``model`` by ``LinearAttention`` layers.

    Each replacement takes over the original's ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj``
    modules themselves (the same parameters, biases and any ``LowRankLinear`` included, so nothing
    is copied and an optimizer built before the conversion still holds them) with the original's
    head counts, and is causal unless the module's ``is_causal`` is False. The model's own
    ``SoftmaxAttention`` (``neuralops.models.transformer``) becomes a ``LinearAttention``, called
    like it; any other module (such as Hugging Face's ``LlamaAttention``) becomes an
    ``HFLinearAttention``, which returns ``(out, None)`` as Hugging Face decoder layers expect.

    phi, cosformer, max_len, eps: the new layers' settings (see ``LinearAttention``).
    include / exclude: module names to select, as in ``replace_linear_with_low_rank``: fnmatch
        strings or compiled regular expressions matching the whole name.

    Returns one report per replaced module, in ``named_modules`` order; an empty list when none
    was found.
    """
    # Imported here: neuralops.models builds on neuralops.nn.
    from neuralops.models.transformer import SoftmaxAttention

    selected = select_modules(model, _is_attention, include, exclude, "convert_attention_to_linear")
    if any(name == "" for name, _ in selected):
        raise ValueError("convert_attention_to_linear: the model is itself an attention module; convert the "
                         "model that holds it")

    # Every module is checked and every layer built before any is replaced: an error (a bad phi, a
    # projection that does not fit) leaves the model as it was. Layers are built on the meta device:
    # their own projections are replaced below, so never allocated.
    layers = []
    for name, module in selected:
        embed_dim, num_heads, num_kv_heads, head_dim = _geometry(module, name)
        cls = LinearAttention if isinstance(module, SoftmaxAttention) else HFLinearAttention
        layers.append(cls(embed_dim, num_heads, num_kv_heads, head_dim, phi=phi,
                          causal=getattr(module, "is_causal", True), cosformer=cosformer, max_len=max_len, eps=eps,
                          device="meta"))
    reports = []
    for (name, module), layer in zip(selected, layers):
        for proj in _PROJECTIONS:
            setattr(layer, proj, getattr(module, proj))
        if hasattr(module, "layer_idx"):
            layer.layer_idx = module.layer_idx
        layer.train(module.training)
        set_submodule(model, name, layer)
        reports.append(AttentionConversion(name, type(module).__name__, layer.num_heads, layer.num_kv_heads,
                                           layer.head_dim, isinstance(layer, HFLinearAttention)))
    return reports
