"""Plots a results file's latest tables: each case's time over its floor, per implementation.

    python benchmarks/plot_results.py benchmarks/results/linear_attn.md benchmarks/results/linear_attn.png

Reads the markdown tables of the file's first section (up to its second ``## `` heading) that have the
columns op, shape, implementation, median ms and x floor (the benchmark harness's, or a subset of
them); a case measured in two tables keeps its first row. Needs matplotlib (requirements.txt).
"""

from __future__ import annotations

import sys
from pathlib import Path

COLUMNS = ("op", "shape", "implementation", "median ms", "x floor")


def latest_rows(text: str) -> list[dict[str, str]]:
    """Rows of the tables before the second level-2 heading, first occurrence of each case kept."""
    lines = text.splitlines()
    level2 = [i for i, line in enumerate(lines) if line.startswith("## ")]
    section = lines[: level2[1]] if len(level2) > 1 else lines
    rows, seen, header = [], set(), None
    for line in section:
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells) <= {"---", "---:", ":---", ":---:"} or not set(COLUMNS) <= set(header):
            continue
        row = dict(zip(header, cells))
        key = (row["op"], row["shape"], row["implementation"])
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


def plot(rows: list[dict[str, str]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys((r["op"], r["shape"]) for r in rows))
    impls = list(dict.fromkeys(r["implementation"] for r in rows))
    colors = {impl: f"C{n % 10}" for n, impl in enumerate(impls)}
    fig, ax = plt.subplots(figsize=(11, 0.28 * len(rows) + 0.5 * len(cases) + 1.5))
    y, ticks = 0.0, []
    for case in cases:
        group = [r for r in rows if (r["op"], r["shape"]) == case]
        ticks.append(y + (len(group) - 1) / 2)
        for r in group:
            bar = ax.barh([y], [float(r["x floor"])], height=0.85, color=colors[r["implementation"]])
            ax.bar_label(bar, labels=[f"{float(r['median ms']):.3g} ms  {r['implementation']}"], fontsize=7,
                         padding=2)
            y += 1
        y += 0.8
    ax.set_yticks(ticks, [f"{op}\n{shape}" for op, shape in cases], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(2.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time / floor (the larger of memory and FLOP floors; 1 = the floor, dashed = 2x)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    rows = latest_rows(source.read_text())
    if not rows:
        raise SystemExit(f"no table with columns {COLUMNS} in the first section of {source}")
    plot(rows, out, f"{source.name}: H200, latest run (median ms beside each bar)")
    print(f"wrote {out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
