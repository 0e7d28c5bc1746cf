"""Low-rank projection kernels (kernels.py) and the specializations built (spec.py)."""
