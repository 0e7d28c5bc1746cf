"""Programmatic dependent launch (PDL, sm_90 and newer) inside kernels.

An op that runs several kernels in a row launches each after the first as a programmatic dependent
of the one before (csrc/runtime LaunchConfig::programmatic_dependency): the driver may start it
while the previous kernel's last programs still run, so the launch latency between them overlaps.
A dependent kernel calls ``wait_for_primary`` before it reads anything the previous kernel wrote;
a kernel calls ``launch_dependents`` once the next kernel may be scheduled. A kernel launched as
the dependent of a kernel it does not know (another op's, as the low-rank decode pair's first is)
may write nothing and read nothing before its wait but prefetch into L2 (``l2_prefetch``), and
calls ``launch_dependents`` only after it, since its own dependent may load before its wait. Launched plainly, both
are no-ops in effect: the wait returns at once, as stream order already holds.
"""

import triton
import triton.language as tl  # noqa: F401 (the interpreter looks for it among a jit function's globals)
from triton import knobs
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
from triton.language.target_info import cuda_capability_geq
from triton.runtime.jit import constexpr_function


@constexpr_function
def _has_grid_dependency_control():
    # griddepcontrol exists from sm_90 on (sm_80 has no such instruction). The interpreter runs no
    # PTX, whatever GPU the machine has.
    return not knobs.runtime.interpret and cuda_capability_geq(9, 0)


@triton.jit
def launch_dependents():
    """Lets the next kernel in the stream, when launched as a programmatic dependent, start once
    every program of this grid has called this (or exited)."""
    if _has_grid_dependency_control():
        gdc_launch_dependents()


@triton.jit
def wait_for_primary():
    """Waits until the previous kernel in the stream has completed and its writes are visible
    (returns at once when this kernel was launched as a plain, stream-ordered, launch)."""
    if _has_grid_dependency_control():
        gdc_wait()
