"""The benchmark timer on a real GPU, in a fresh process (the state a benchmark script starts from)."""

import os
import subprocess
import sys
import textwrap


def test_timer_calibration_ignores_the_first_launch():
    # The cover before each repetition is sized in GPU clock cycles from the constructor's
    # calibration; a process's first _sleep also loads its module, which a calibration that
    # included it counted as sleep (20x too few cycles per ms on the H200).
    code = textwrap.dedent("""
        from neuralops.bench.timing import Timer
        first, second = Timer(reps=1), Timer(reps=1)
        print(first._cycles_per_ms / second._cycles_per_ms)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    ratio = float(result.stdout.strip().splitlines()[-1])
    assert 0.8 < ratio < 1.25, ratio
