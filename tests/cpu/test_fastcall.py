"""The ops' eager fast path (neuralops._fastcall, csrc/python/fastcall.cpp) against their overloads.

Every op has CPU kernels, so both paths run here on CPU tensors: the same results and gradients,
the same errors, and the overload's behaviour wherever the fast path hands a call over to it.
"""

import threading

import pytest
import torch
from torch.overrides import TorchFunctionMode

from neuralops import _library
from neuralops.core import suitability
from neuralops.core.triton_kernels import gqa, low_rank
from neuralops.core.triton_kernels import linear_attn as la

pytestmark = pytest.mark.usefixtures("library_loaded")

OPS = ("linear_attn_fwd", "linear_attn_bwd", "low_rank_fwd", "low_rank_fwd_hidden", "low_rank_bwd", "gqa_fwd",
       "gqa_bwd")


def _args(name: str, gen: torch.Generator) -> tuple:
    """Positional arguments for op `name` on small CPU tensors (keyword-only ones last)."""
    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    if name == "linear_attn_fwd":
        return (r(2, 4, 7, 16), r(2, 2, 7, 16), r(2, 2, 7, 8), None, None, None, None, "elu+1", True, 1e-6, 0.5,
                True)
    if name == "linear_attn_bwd":
        return (r(2, 4, 7, 8), r(2, 4, 7, 16), r(2, 2, 7, 16), r(2, 2, 7, 8), None, None, None, None, None, None,
                "relu", False, 1e-6, 1.0, False, None)
    if name in ("low_rank_fwd", "low_rank_fwd_hidden"):
        return r(3, 5, 24), r(20, 6), r(6, 24), r(20), "auto"
    if name == "low_rank_bwd":
        return r(3, 5, 24), r(20, 6), r(6, 24), r(3, 5, 20), None, True, "auto"
    if name == "gqa_fwd":
        return r(2, 2, 5, 8), r(2, 2, 5, 8), 2, 6
    return r(2, 6, 5, 8), r(2, 6, 5, 8), 2, 6


def _flat(result) -> list:
    return list(result) if isinstance(result, tuple) else [result]


def _same(a, b) -> None:
    a, b = _flat(a), _flat(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x is None) == (y is None)
        if x is not None:
            assert type(x) is type(y) and x.shape == y.shape and x.dtype == y.dtype
            torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_the_module_is_built():
    assert _library.FASTCALL, "neuralops/_fastcall.so is missing from the installed package"
    assert type(la._FWD.eager).__name__ == "builtin_function_or_method"


def test_bind_refuses_an_op_it_does_not_know():
    with pytest.raises(KeyError, match="no fast path"):
        _library._FASTCALL.bind("neuralops::build_info", torch.ops.neuralops.build_info.default)


@pytest.mark.parametrize("name", OPS)
def test_same_results_as_the_overload(name):
    op = _library.op(name)
    args = _args(name, torch.Generator().manual_seed(0))
    schema = op.overload._schema.arguments
    kw_only = {a.name: v for a, v in zip(schema, args) if a.kwarg_only}
    positional = args[:len(args) - len(kw_only)]
    _same(op.eager(*args), op.overload(*positional, **kw_only))
    # Keyword arguments, fewer arguments (schema defaults) and ints for floats: handed to the overload.
    if kw_only:
        _same(op.eager(*positional, **kw_only), op.overload(*positional, **kw_only))
        _same(op.eager(*positional), op.overload(*positional))


def test_ints_for_floats_and_parameters():
    op = _library.op("linear_attn_fwd")
    args = list(_args("linear_attn_fwd", torch.Generator().manual_seed(1)))
    expected = op.eager(*args)
    args[9], args[10] = 0, 0.5  # eps as an int: converted by the overload
    _same(op.eager(*args), op.overload(*args[:9], 0.0, *args[10:]))
    args[9] = 1e-6
    args[0] = torch.nn.Parameter(args[0])
    _same(tuple(t.detach() for t in op.eager(*args)), expected)


def test_errors_match_the_overload():
    op = _library.op("linear_attn_fwd")
    args = list(_args("linear_attn_fwd", torch.Generator().manual_seed(2)))
    for position, bad in ((7, "gelu"), (1, torch.randn(2, 3, 7, 16, dtype=torch.float64))):
        wrong = args.copy()
        wrong[position] = bad
        with pytest.raises(ValueError) as fast:
            op.eager(*wrong)
        with pytest.raises(ValueError) as slow:
            op.overload(*wrong)
        assert str(fast.value) == str(slow.value)
    wrong = [*args[:7], 7, *args[8:]]  # a wrong Python type: the overload's own parsing error
    with pytest.raises(RuntimeError) as fast:
        op.eager(*wrong)
    with pytest.raises(RuntimeError) as slow:
        op.overload(*wrong)
    assert str(fast.value) == str(slow.value)


def test_gradients_match_the_overload():
    op = _library.op("linear_attn_fwd")
    args = _args("linear_attn_fwd", torch.Generator().manual_seed(3))
    grads = []
    for call in (op.eager, op.overload):
        q, k, v = (t.clone().requires_grad_(True) for t in args[:3])
        out, s, z = call(q, k, v, *args[3:])
        (out.square().sum() + s.sum() + z.sum()).backward()
        grads.append([q.grad, k.grad, v.grad])
    _same(tuple(grads[0]), tuple(grads[1]))


class _Tagged(torch.Tensor):
    calls: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_subclasses_and_modes_reach_the_overload():
    op = _library.op("gqa_fwd")
    k, v, n_kv, n = _args("gqa_fwd", torch.Generator().manual_seed(4))
    _Tagged.calls.clear()
    out = op.eager(k.as_subclass(_Tagged), v, n_kv, n)
    assert op.overload in _Tagged.calls
    _same(tuple(t.as_subclass(torch.Tensor) for t in out), op.overload(k, v, n_kv, n))

    seen = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Mode():
        op.eager(k, v, n_kv, n)
    assert seen == [op.overload]


def test_threads():
    op = _library.op("low_rank_fwd")
    args = _args("low_rank_fwd", torch.Generator().manual_seed(5))
    expected = op.overload(*args[:4], backend="auto")
    errors = []

    def work():
        try:
            for _ in range(200):
                torch.testing.assert_close(op.eager(*args), expected, rtol=0, atol=0)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_without_the_module(monkeypatch):
    """A library without neuralops._fastcall (a CMake build run by hand): the overloads serve, with
    the same positional form."""
    monkeypatch.setattr(_library, "_FASTCALL", None)
    op = _library.op("low_rank_fwd")
    assert op.eager is not op.overload
    args = _args("low_rank_fwd", torch.Generator().manual_seed(6))
    _same(op.eager(*args), op.overload(*args[:4], backend=args[4]))


@pytest.mark.parametrize("ready,entry", [(suitability.READY, "eager"), (suitability.READY_TRACED, "traced")])
def test_the_layer_picks_the_entry_kernels_ready_names(monkeypatch, ready, entry):
    """kernels_ready's answer picks the entry (one is_compiling() per call): the fast path eagerly,
    the overload (positionally, through Op.traced) while torch.compile traces; each op's fwd and
    bwd, with the op's own checks."""
    calls = []

    def recording(result):
        return _library.Op(lambda *a, **k: calls.append("overload") or result,
                           lambda *a: calls.append("eager") or result,
                           lambda *a: calls.append("traced") or result)

    x = torch.randn(2, 1, 4, 16)
    monkeypatch.setattr(la, "kernels_ready", lambda t: ready)
    monkeypatch.setattr(la, "_FWD", recording((x, None, None)))
    monkeypatch.setattr(la, "_BWD", recording((x, x, x, None, None)))
    la.fwd(x, x, x, True)
    la.bwd(x, x, x, x, True)
    lr_x, U, V = torch.randn(3, 16), torch.randn(8, 4), torch.randn(4, 16)
    monkeypatch.setattr(low_rank, "kernels_ready", lambda t: ready)
    monkeypatch.setattr(low_rank, "_FWD", recording(torch.randn(3, 8)))
    monkeypatch.setattr(low_rank, "_BWD", recording((lr_x, U, V, None)))
    low_rank.fwd(lr_x, U, V)
    low_rank.bwd(lr_x, U, V, torch.randn(3, 8))
    kv = torch.randn(1, 2, 4, 8)
    monkeypatch.setattr(gqa, "kernels_ready", lambda t: ready)
    monkeypatch.setitem(gqa._OPS, "gqa_fwd", recording((kv, kv)))
    gqa.fwd(kv, kv, 2, 4)
    assert calls == [entry] * 5


def test_traced_entry_compiles_without_graph_breaks():
    """The entry the layer calls while torch.compile traces takes the same positional form as the
    fast path, keyword-only arguments too (low_rank_fwd's backend), and Dynamo traces it whole."""
    op = _library.op("low_rank_fwd")
    x, U, V = torch.randn(3, 16), torch.randn(8, 4), torch.randn(4, 16)

    def f(x, U, V):
        return op.entry(suitability.READY_TRACED)(x, U, V, None, "auto")

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, U, V), op.overload(x, U, V, None, backend="auto"), rtol=0, atol=0)
