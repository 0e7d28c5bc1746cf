"""benchmarks/plot_results.py: the committed results files parse, and a plot is written."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("plot_results", ROOT / "benchmarks" / "plot_results.py")
plot_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_results)

SAMPLE = """# x
## Latest
| op | shape | implementation | median ms | x floor |
| --- | --- | --- | ---: | ---: |
| a fwd | B1 | neuralops | 0.5 | 2.0 |
| a fwd | B1 | peer | 1.0 | 4.0 |

| op | shape | implementation | median ms | TB/s | x floor |
| --- | --- | --- | ---: | ---: | ---: |
| a fwd | B1 | neuralops | 0.6 | 1.0 | 2.4 |
| a bwd | B1 | neuralops | 0.7 | 1.0 | 3.0 |

| M | us |
| --- | ---: |
| 16 | 8.0 |
## Older
| op | shape | implementation | median ms | x floor |
| --- | --- | --- | ---: | ---: |
| old | B1 | neuralops | 9.0 | 9.0 |
"""


def test_latest_rows_keep_the_first_measurement_of_each_case_and_skip_older_sections():
    rows = plot_results.latest_rows(SAMPLE)
    assert [(r["op"], r["implementation"], r["median ms"]) for r in rows] == [
        ("a fwd", "neuralops", "0.5"), ("a fwd", "peer", "1.0"), ("a bwd", "neuralops", "0.7")]


@pytest.mark.parametrize("name", ["linear_attn", "low_rank"])
def test_committed_results_plot(name, tmp_path):
    pytest.importorskip("matplotlib")
    rows = plot_results.latest_rows((ROOT / "benchmarks" / "results" / f"{name}.md").read_text())
    assert any(r["implementation"].startswith("neuralops") for r in rows)
    out = tmp_path / f"{name}.png"
    plot_results.plot(rows, out, name)
    assert out.read_bytes()[:4] == b"\x89PNG"
