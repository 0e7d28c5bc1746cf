"""``python -m neuralops.bench <op> [<op> ...] [--quick] [--json PATH] [--markdown PATH]``."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys

import torch

import neuralops
from neuralops.bench import harness, timing

OPS = ("gqa", "low_rank", "linear_attn")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuralops.bench", description=__doc__)
    parser.add_argument("ops", nargs="*", default=list(OPS), help=f"ops to benchmark, of {OPS}")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    parser.add_argument("--json", help="write every row and the ceilings here")
    parser.add_argument("--markdown", help="write the table here")
    args = parser.parse_args(argv)
    unknown = set(args.ops) - set(OPS)
    if unknown:
        parser.error(f"unknown ops {sorted(unknown)}; choose from {OPS}")
    if not torch.cuda.is_available():
        print("neuralops.bench needs a CUDA GPU", file=sys.stderr)
        return 2

    timer = timing.Timer(warmup=5 if args.quick else 10, reps=50 if args.quick else 100)
    bandwidth = timing.copy_bandwidth(timer)
    flop_rate = timing.matmul_rate(timer)
    device = torch.cuda.get_device_name()
    print(f"{device}: copy {bandwidth / 1e12:.2f} TB/s, bf16 matmul {flop_rate / 1e12:.0f} TFLOP/s "
          f"(measured now; the floors below use these)")
    rows = []
    for op in args.ops:
        module = importlib.import_module(f"neuralops.bench.{op}")
        rows += harness.run(module.cases(args.quick), timer, bandwidth, flop_rate)
        torch.cuda.empty_cache()

    table = harness.markdown(rows)
    header = (f"{device}, torch {torch.__version__}, neuralops {neuralops.__version__}; "
              f"ceilings measured in this run: copy {bandwidth / 1e12:.2f} TB/s, "
              f"bf16 matmul {flop_rate / 1e12:.0f} TFLOP/s.")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(header + "\n\n" + table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "bandwidth": bandwidth,
                       "flop_rate": flop_rate, "build_info": neuralops.build_info(),
                       "rows": [dataclasses.asdict(r) for r in rows]}, f, indent=1)
    print(header)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
