"""The benchmark timing helpers that need no GPU to check: the serving-like graph of layers."""

import torch

from neuralops.bench import timing


def test_graph_of_layers_gives_each_call_its_own_weights(monkeypatch):
    monkeypatch.setattr(timing, "graphed", lambda fn: fn)   # no CUDA graph on the CPU: run fn as is
    monkeypatch.setattr(timing, "_LAYERS_MIN_BYTES", 1000)
    U, V = torch.randn(8, 4), torch.randn(4, 8)              # 256 bytes a layer: 4 layers exceed 1000
    seen = []
    impls = {}
    timing.add_graphed_layers(impls, "op", lambda u, v: seen.append((u, v)), (U, V))
    (name, fn), = impls.items()
    assert name == "op, graph of 4 layers"
    assert isinstance(fn, timing.PerCall) and fn.calls == 4
    assert fn.keep is not None and len(fn.keep) == 4     # the graph's weights live as long as its replay
    fn()
    assert len(seen) == 4
    pointers = {t.data_ptr() for pair in seen for t in pair} | {U.data_ptr(), V.data_ptr()}
    assert len(pointers) == 10                               # distinct copies, none the original
    assert all(torch.equal(u, U) and torch.equal(v, V) for u, v in seen)
