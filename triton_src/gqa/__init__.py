"""GQA head expansion kernels (kernels.py) and the specializations built (spec.py)."""
