"""Triton helpers shared by the ops' kernels (not an op: no spec.py). Every op's AOT cache key covers
these files (triton_src/aot/compiler.py source_hash)."""
