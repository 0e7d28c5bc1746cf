"""Checks of plain (non-tensor) arguments that more than one op makes."""

from __future__ import annotations

from typing import Any


def check_int(value: Any, name: str, caller: str) -> None:
    """Raise TypeError unless value is an integer: anything usable as an index (a NumPy integer, an
    integer 0-d tensor, a SymInt under tracing), but not a bool or a float."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{caller}: {name} must be an int, got {type(value).__name__}")
