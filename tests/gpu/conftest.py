import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _compiled_triton(monkeypatch):
    """GPU tests run real kernels: torch.compile's inductor must compile its Triton kernels, not
    hand them to the interpreter the CPU tests enable."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
