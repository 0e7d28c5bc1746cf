"""The benchmark timing helpers that need no GPU to check: the serving-like graph of layers."""

import contextlib
import gc
import weakref

import torch

from neuralops.bench import timing


class _FakeStream:
    def wait_stream(self, other):
        pass


class _FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on the CPU: captures nothing, replays nothing."""

    def replay(self):
        pass


def test_graph_of_layers_gives_each_call_its_own_weights_and_keeps_them(monkeypatch):
    # The real timing.graphed, with CUDA's streams and graphs faked: it calls fn 3 times to warm up,
    # then once inside the (fake) capture.
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())
    monkeypatch.setattr(timing, "_LAYERS_MIN_BYTES", 1000)
    U, V = torch.randn(8, 4), torch.randn(4, 8)              # 256 bytes a layer: 4 layers exceed 1000
    seen = []
    impls = {}
    timing.add_graphed_layers(impls, "op", lambda u, v: seen.append((u, v)), (U, V))
    (name, fn), = impls.items()
    assert name == "op, graph of 4 layers"
    assert isinstance(fn, timing.PerCall) and fn.calls == 4
    assert len(seen) == 16
    captured = seen[-4:]
    pointers = {t.data_ptr() for pair in captured for t in pair} | {U.data_ptr(), V.data_ptr()}
    assert len(pointers) == 10                               # distinct copies, none the original
    assert all(torch.equal(u, U) and torch.equal(v, V) for u, v in captured)
    # The graph's weights live as long as its replay: nothing else references them.
    refs = [weakref.ref(t) for pair in captured for t in pair]
    del seen, captured
    gc.collect()
    assert all(r() is not None for r in refs)
    del impls, fn
    gc.collect()
    assert all(r() is None for r in refs)                    # and no longer: the replay held them
