"""A Triton driver that needs no GPU, so the AOT build runs on CPU-only machines.

``triton.tools.compile`` asks the active driver for the target; its own ``--target`` flag is broken
(it builds the target from strings, see the project NOTES). Activating this driver, whose target is
the architecture being built, lets ``compile_kernel`` run with no GPU and no CUDA driver.
"""

from __future__ import annotations


def activate(arch: int) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver
    from triton.runtime.driver import driver

    class OfflineCudaDriver(CudaDriver):
        def __init__(self) -> None:  # CudaDriver.__init__ would load libcuda
            pass

        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", arch, 32)

        def get_current_device(self) -> int:
            return 0

        @staticmethod
        def is_active() -> bool:
            return True

    driver.set_active(OfflineCudaDriver())
