"""Triton kernel sources of neuralops, compiled ahead of time during the build (see triton_src/aot)."""
