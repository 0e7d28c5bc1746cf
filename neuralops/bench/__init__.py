"""Benchmarks of neuralops against its peers: ``python -m neuralops.bench <op> [...]``.

Each op module (``neuralops/bench/<op>.py``) lists its cases: a shape, the bytes and FLOPs it must
move or compute, and the implementations to time side by side (neuralops first, then the peers).
The harness times each with CUDA events (median over many repetitions, L2 flushed between them),
measures the machine's copy bandwidth and matmul rate in the same run, and reports every time next
to the floor those imply.
"""
