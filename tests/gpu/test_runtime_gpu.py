"""The kernel runtime on real GPUs: each device in any order, several threads at first use, the
cost of the first call. Each case runs in a fresh process, since kernels load once per process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

CHECK = textwrap.dedent("""
    import json, sys, threading, time, torch
    from neuralops.core.triton_kernels import gqa

    def check(device, dtype=torch.bfloat16, d=128):
        k = torch.randn(2, 2, 300, d, device=device, dtype=dtype)
        v = torch.randn(2, 2, 300, d, device=device, dtype=dtype)
        assert gqa.is_supported(k, v, 2, 8)
        ek, ev = gqa.fwd(k, v, 2, 8)
        rk, rv = gqa.bwd(ek, ev, 2, 8)
        torch.cuda.synchronize(device)
        ok = torch.equal(ek, k.repeat_interleave(4, 1)) and torch.equal(rv.float(), (4 * v.float()).to(dtype).float())
        return bool(ok)
""")


def run(body: str) -> dict:
    code = CHECK + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_every_device_in_any_order(order):
    out = run(f"print(json.dumps([check('cuda:%d' % i) for i in {list(order)} + {list(order)}]))")
    assert out == [True] * 4


def test_threads_at_first_use():
    out = run("""
        n_dev = torch.cuda.device_count()
        results, barrier = [], threading.Barrier(8)
        def work(i):
            barrier.wait()
            dtype = (torch.float16, torch.bfloat16, torch.float32)[i % 3]
            results.append(check('cuda:%d' % (i % n_dev), dtype, 64 if i % 2 else 128))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(json.dumps(results))
    """)
    assert out == [True] * 8


def test_first_call_latency():
    out = run("""
        k = torch.randn(2, 2, 300, 128, device='cuda', dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        gqa.fwd(k, k, 2, 8)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(100):
            gqa.fwd(k, k, 2, 8)
        torch.cuda.synchronize()
        print(json.dumps({'first_ms': first * 1e3, 'steady_ms': (time.perf_counter() - t0) * 10}))
    """)
    print(f"first call {out['first_ms']:.2f} ms, then {out['steady_ms']:.3f} ms per call")
    assert out["first_ms"] < 50
