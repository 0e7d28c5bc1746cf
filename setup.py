"""Builds the neuralops wheel by driving the CMake build (CMakeLists.txt is the one build description).

    pip install --no-build-isolation .        # torch (and Triton, for the AOT step) must be installed

Environment: NEURALOPS_CUDA_ARCHS ("80;90"), NEURALOPS_AOT_CACHE, NEURALOPS_AOT_JOBS, NEURALOPS_BUILD_DIR.
The CMake build tree persists under build/, so rebuilding an unchanged tree compiles nothing.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def get_ext_filename(self, fullname: str) -> str:
        # A plain shared library loaded with torch.ops.load_library, not a Python module.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext: Extension) -> None:
        import torch

        if shutil.which("cmake") is None:
            raise RuntimeError("neuralops: building needs cmake (pip install cmake) and ninja")
        tag = f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__.replace('+', '-')}"
        build_dir = Path(os.environ.get("NEURALOPS_BUILD_DIR", ROOT / "build" / f"cmake-{tag}"))
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DNEURALOPS_CUDA_ARCHS={os.environ.get('NEURALOPS_CUDA_ARCHS', '')}",
            # torch is loaded before the library in Python; no run path into the build machine.
            "-DCMAKE_SKIP_BUILD_RPATH=ON",
            "-DNEURALOPS_WHEEL=ON",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            args += ["-G", "Ninja"]
        if os.environ.get("CUDA_HOME"):
            args.append(f"-DCUDAToolkit_ROOT={os.environ['CUDA_HOME']}")
        subprocess.check_call(args)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build_dir / "libneuralops.so", dest)
        # The Python fast path (csrc/python/fastcall.cpp), a module of the package itself.
        shutil.copyfile(build_dir / "_fastcall.so", dest.parent.parent / "_fastcall.so")


setup(ext_modules=[CMakeExtension("neuralops.lib.libneuralops")], cmdclass={"build_ext": CMakeBuild})
