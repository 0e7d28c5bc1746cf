"""Test setup: the installed neuralops is tested, kernel sources come from the checkout.

The package under test is the one pip installed (it carries the compiled library); the checkout's
``neuralops/`` has no library, so the repository root is moved behind site-packages on sys.path. It
stays reachable for ``triton_src``, whose kernels the CPU tests run under the Triton interpreter.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Set before anything imports Triton: kernels in tests/cpu run on CPU tensors through the interpreter.
# GPU tests clear it (tests/gpu/conftest.py): torch.compile's inductor kernels must be compiled.
os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT] + [str(ROOT)]

import neuralops  # noqa: E402
import torch  # noqa: E402

if Path(neuralops.__file__).resolve().parent == ROOT / "neuralops":
    raise RuntimeError("tests must run against the installed neuralops (pip install --no-build-isolation .)")


def pytest_report_header(config):
    info = neuralops.build_info()
    return [f"neuralops from {Path(neuralops.__file__).parent}; library loaded: {info['loaded']}",
            f"cuda available: {torch.cuda.is_available()}"]


@pytest.fixture
def library_loaded():
    if not neuralops.build_info()["loaded"]:
        pytest.fail(f"the neuralops library did not load: {neuralops.build_info()['load_error']}")
