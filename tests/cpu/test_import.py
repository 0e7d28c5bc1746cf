"""Importing neuralops: no Triton, no CUDA initialization, and a usable package without the library."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import neuralops


def run_python(code: str, **env: str) -> str:
    # From a neutral directory, so the installed package is imported, not the checkout's.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                            env={**os.environ, **env}, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_import_does_not_import_triton_or_dynamo():
    out = run_python("import sys, json, neuralops; "
                     "print(json.dumps([m for m in ('triton', 'torch._dynamo', 'torch._inductor') if m in sys.modules]))",
                     TRITON_INTERPRET="0")
    assert json.loads(out) == []


def test_import_does_not_initialize_cuda():
    out = run_python("import torch, neuralops; print(torch.cuda.is_initialized())")
    assert out == "False"


def test_library_loads_without_a_gpu_driver():
    info = neuralops.build_info()
    assert info["loaded"], info["load_error"]


def test_missing_library_falls_back_with_reason(tmp_path):
    code = ("import torch, neuralops; from neuralops.core.triton_kernels import gqa; "
            "k = torch.randn(1, 2, 3, 4); ek, _ = gqa.fwd(k, k, 2, 4); "
            "assert torch.equal(ek, k.repeat_interleave(2, 1)); "
            "print(neuralops.build_info()['load_error'])")
    out = run_python(code, NEURALOPS_LIBRARY=str(tmp_path / "missing.so"))
    assert "does not exist" in out and "pip install" in out


def test_info_command_runs():
    result = subprocess.run([sys.executable, "-m", "neuralops.info"], capture_output=True, text=True, cwd="/",
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "architectures: sm_80, sm_90" in result.stdout
    assert "op gqa:" in result.stdout
    assert "RuntimeWarning" not in result.stderr


@pytest.mark.skipif(Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists(), reason="this machine has a driver")
def test_kernel_launch_without_driver_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert "could not load the CUDA driver" in torch.ops.neuralops.driver_status()
