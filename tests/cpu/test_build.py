"""The build: every declared kernel for every architecture is in the library, which links no
libcuda and no libpython, and its cubin choice agrees with the Python side."""

import os
import shutil
import subprocess

import pytest
import torch

import neuralops
from neuralops import _library
from neuralops.core.suitability import select_arch, sizes_fit_int32
from triton_src.aot.__main__ import OPTIONAL_ARCHS, REQUIRED_ARCHS, discover_ops, parse_archs


def expected_archs(info: dict) -> set[int]:
    requested = os.environ.get("NEURALOPS_CUDA_ARCHS", "")
    if requested.strip():
        return set(parse_archs(requested))
    return set(REQUIRED_ARCHS) | {a for a in OPTIONAL_ARCHS if str(a) not in info["archs_skipped"]}


def test_build_info_lists_every_arch_and_kernel(library_loaded):
    info = neuralops.build_info()
    archs = set(info["archs"])
    assert archs == expected_archs(info)
    assert set(REQUIRED_ARCHS) <= archs or os.environ.get("NEURALOPS_CUDA_ARCHS")
    for arch in OPTIONAL_ARCHS:  # each optional arch was built or says why not
        assert arch in archs or str(arch) in info["archs_skipped"]
    declared = discover_ops()
    assert set(info["ops"]) == set(declared)
    for op, specs in declared.items():
        # A kernel written for one architecture (spec.archs) has cubins for it alone, and none
        # where it was not requested.
        built_archs = [[a for a in archs if spec.builds_for(a)] for spec in specs]
        assert info["ops"][op]["kernels"] == [spec.name for spec in specs]
        assert info["ops"][op]["variants"] == sum(len(s.variants()) for s, a in zip(specs, built_archs) if a)
        assert info["ops"][op]["cubins"] == sum(len(s.variants()) * len(a) for s, a in zip(specs, built_archs))
    assert info["torch"] == torch.__version__.split("+")[0]
    assert info["routing"]["low_rank"]["decode_max_weight_bytes"] == 9 << 20
    assert info["routing"]["low_rank"]["decode_multiple_of"] == 16
    assert info["routing"]["low_rank"]["otherwise"] == "cublas"


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf")
def test_library_links_neither_libcuda_nor_libpython_and_shares_libstdcxx():
    dynamic = subprocess.run(["readelf", "-d", str(_library.LIBRARY_PATH)], capture_output=True, text=True,
                             check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed, dynamic
    assert not any(n.startswith("libcuda.so") for n in needed), needed
    assert not any(n.startswith("libpython") for n in needed), needed
    # A statically linked libstdc++ has its own exception runtime: C++ errors would crash the process.
    assert "libstdc++.so.6" in needed, needed
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic


def test_arch_selection_agrees_with_the_runtime(library_loaded):
    archs = _library.BUILT_ARCHS
    for cc in range(50, 130):
        assert select_arch(archs, cc) == torch.ops.neuralops.arch_for_capability(cc), cc
    assert select_arch((80, 90), 86) == 80
    assert select_arch((80, 90), 89) == 80
    assert select_arch((80, 90), 90) == 90
    assert select_arch((80, 90), 100) == -1   # sm_90a cubins do not run on Blackwell
    assert select_arch((80, 90), 75) == -1


def test_sizes_fit_int32_is_sufficient_only():
    assert sizes_fit_int32(torch.empty(3, 4), torch.empty(1))
    # A zero-size tensor says nothing about its other sizes: the ops then take their exact test.
    assert not sizes_fit_int32(torch.empty(3, 4), torch.empty(0, 5))
    assert not sizes_fit_int32(torch.empty(1), torch.empty(1), torch.empty(2**31, dtype=torch.uint8, device="meta"))
