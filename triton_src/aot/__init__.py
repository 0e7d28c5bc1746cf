"""Ahead-of-time compilation of the Triton kernels in triton_src/ (run as ``python -m triton_src.aot``)."""
