"""The README's demo command (``python -m neuralops.demo``), in its quick form, on the fallbacks:
the op checks, the loss falling, cached decoding matching a recompute, compression, conversion and
the plot."""

import os
import re
import subprocess
import sys


def test_demo_quick_trains_decodes_compresses_and_plots(tmp_path):
    result = subprocess.run([sys.executable, "-m", "neuralops.demo", "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd="/", env={**os.environ, "TRITON_INTERPRET": "0"},
                            timeout=600)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for op in ("linear_attn", "low_rank", "gqa"):
        assert f"\n{op} " in "\n" + out, out
    assert "linear attention runs on: PyTorch fallbacks" in out
    first, last = map(float, re.search(r"loss fell from ([\d.]+) \(first 5 steps\) to ([\d.]+)", out).groups())
    assert last < 0.7 * first
    assert re.search(r"cached decoding vs full recompute: max \|logit difference\| \S+ .*\[ok\]", out)
    match = re.search(r"parameters ([\d.]+) M -> ([\d.]+) M", out)
    assert float(match.group(2)) < float(match.group(1))
    assert "converted 2 modules" in out
    assert (tmp_path / "loss.png").stat().st_size > 10_000
    assert "all checks passed" in out


def test_demo_ops_only_and_bad_arguments():
    result = subprocess.run([sys.executable, "-m", "neuralops.demo", "--ops-only"], capture_output=True, text=True,
                            cwd="/", env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=300)
    assert result.returncode == 0 and "all checks passed" in result.stdout, result.stdout + result.stderr
    assert "== data" not in result.stdout
    result = subprocess.run([sys.executable, "-m", "neuralops.demo", "--steps", "3"], capture_output=True, text=True,
                            cwd="/", timeout=300)
    assert result.returncode == 2 and "--steps must be at least 10" in result.stderr


def test_plot_without_matplotlib_says_so(monkeypatch, capsys, tmp_path):
    from neuralops import demo

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert demo.plot({"loss": ([0, 1], [2.0, 1.0])}, {}, {}, tmp_path / "loss.png") is False
    assert "matplotlib is not installed: no plot written" in capsys.readouterr().out
    assert not (tmp_path / "loss.png").exists()
