"""``python -m neuralops.info [--json]``: prints what this neuralops build contains."""

from __future__ import annotations

import json
import sys

import torch

import neuralops
from neuralops import _library
from neuralops._build_info import build_info


def _describe_devices() -> list[str]:
    from neuralops.core.suitability import device_arch

    if not torch.cuda.is_available():
        return ["no CUDA device: ops run their PyTorch fallbacks"]
    lines = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        arch = device_arch(i) if _library.LOADED else -1
        runs = f"runs the sm_{arch} cubins" if arch >= 0 else "has no cubin: fallbacks only"
        lines.append(f"cuda:{i} {torch.cuda.get_device_name(i)} (sm_{major}{minor}) {runs}")
    return lines


def main() -> int:
    info = build_info()
    if "--json" in sys.argv[1:]:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"neuralops {neuralops.__version__}  (torch {info['runtime_torch']} at run time)")
    print(f"library: {info['library']}")
    if not info["loaded"]:
        print(f"NOT LOADED: {info['load_error']}")
        return 1
    print(f"built against torch {info['torch']}, CUDA toolkit {info['cuda_toolkit']}, "
          f"kernels compiled with Triton {info['triton']}")
    print("architectures: " + ", ".join(f"sm_{a}" for a in info["archs"]))
    for arch, why in info.get("archs_skipped", {}).items():
        print(f"  skipped sm_{arch}: {why}")
    for op, d in info["ops"].items():
        print(f"op {op}: {d['variants']} variants of {', '.join(d['kernels'])}, {d['cubins']} cubins "
              f"({d['cubin_bytes'] / 1e6:.1f} MB)")
    for line in _describe_devices():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
