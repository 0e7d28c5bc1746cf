"""The C++ package: build and install neuralops with CMake, build examples/cpp against the installed
package with find_package(neuralops), and run its ctest suite (the CUDA test runs where a GPU is)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "cpp-package"  # kept between runs: rebuilding an unchanged tree is quick


def run(*cmd: str) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "TRITON_INTERPRET": "0"})
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_installed_package_builds_and_runs_the_example():
    prefix, lib_build, example_build = BUILD / "install", BUILD / "lib", BUILD / "example"
    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (lib_build / "CMakeCache.txt").exists() else []
    run("cmake", "-S", str(ROOT), "-B", str(lib_build), *generator, "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}", f"-DPython3_EXECUTABLE={sys.executable}")
    run("cmake", "--build", str(lib_build), "-j", str(os.cpu_count() or 1))
    run("cmake", "--install", str(lib_build), "--prefix", str(prefix))
    assert (prefix / "include" / "neuralops" / "neuralops.h").exists()
    assert (prefix / "lib" / "cmake" / "neuralops" / "neuralopsConfig.cmake").exists()

    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (example_build / "CMakeCache.txt").exists() else []
    run("cmake", "-S", str(ROOT / "examples" / "cpp"), "-B", str(example_build), *generator,
        f"-DCMAKE_PREFIX_PATH={prefix}")
    run("cmake", "--build", str(example_build))
    out = run("ctest", "--test-dir", str(example_build), "--output-on-failure", "-V")
    assert "ops_cpu" in out and "all passed" in out
    if torch.cuda.is_available():
        assert "on cuda" in out, out[-3000:]
    print(out[-6000:])
