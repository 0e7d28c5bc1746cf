"""Selecting a model's submodules by name and replacing them: shared by the model converters
(``replace_linear_with_low_rank`` and ``convert_attention_to_linear``)."""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, Iterable, Union

from torch import nn

# A module name pattern: an fnmatch string or a compiled regular expression, matching the whole name.
Pattern = Union[str, "re.Pattern[str]"]


def _as_patterns(patterns: Pattern | Iterable[Pattern] | None) -> list[Pattern] | None:
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        return [patterns]
    return list(patterns)


def _matches(name: str, patterns: list[Pattern], caller: str) -> bool:
    for p in patterns:
        if isinstance(p, re.Pattern):
            if p.fullmatch(name):
                return True
        elif isinstance(p, str):
            if fnmatch.fnmatchcase(name, p):
                return True
        else:
            raise TypeError(f"{caller}: patterns must be str (fnmatch) or re.Pattern, got {type(p).__name__}")
    return False


def select_modules(model: nn.Module, wanted: Callable[[nn.Module], bool],
                   include: Pattern | Iterable[Pattern] | None, exclude: Pattern | Iterable[Pattern] | None,
                   caller: str) -> list[tuple[str, nn.Module]]:
    """(name, module) of each wanted module of ``model`` whose name ``include`` selects (all when
    None) and ``exclude`` does not, in ``named_modules`` order; none inside one already selected."""
    includes, excludes = _as_patterns(include), _as_patterns(exclude)
    selected: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if not wanted(module) or any(name.startswith(prev + ".") for prev, _ in selected):
            continue
        if includes is not None and not _matches(name, includes, caller):
            continue
        if excludes is not None and _matches(name, excludes, caller):
            continue
        selected.append((name, module))
    return selected


def set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    """Puts ``module`` at the dotted ``name`` in ``model``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)
