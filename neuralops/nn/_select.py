"""Selecting a model's submodules by name and replacing them: shared by the model converters
(``replace_linear_with_low_rank`` and ``convert_attention_to_linear``)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Callable, Union

from torch import nn

# A module name pattern: an fnmatch string or a compiled regular expression, matching the whole name.
Pattern = Union[str, "re.Pattern[str]"]


def _as_patterns(patterns: Pattern | Iterable[Pattern] | None, arg: str, caller: str) -> list[Pattern] | None:
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        return [patterns]
    bad = not isinstance(patterns, Iterable)
    if not bad:
        patterns = list(patterns)
        bad = not all(isinstance(p, (str, re.Pattern)) for p in patterns)
    if bad:
        raise TypeError(f"{caller}: {arg} must be a pattern (str for fnmatch, or re.Pattern) or an iterable of "
                        f"them, got {patterns!r}")
    return patterns


def _matches(name: str, patterns: list[Pattern]) -> bool:
    return any(p.fullmatch(name) if isinstance(p, re.Pattern) else fnmatch.fnmatchcase(name, p) for p in patterns)


def select_modules(model: nn.Module, wanted: Callable[[nn.Module], bool],
                   include: Pattern | Iterable[Pattern] | None, exclude: Pattern | Iterable[Pattern] | None,
                   caller: str) -> list[tuple[str, nn.Module]]:
    """(name, module) of each wanted module of ``model`` whose name ``include`` selects (all when
    None) and ``exclude`` does not, in ``named_modules`` order; none inside one already selected."""
    includes, excludes = _as_patterns(include, "include", caller), _as_patterns(exclude, "exclude", caller)
    selected: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if not wanted(module) or any(name.startswith(prev + ".") for prev, _ in selected):
            continue
        if includes is not None and not _matches(name, includes):
            continue
        if excludes is not None and _matches(name, excludes):
            continue
        selected.append((name, module))
    return selected


def set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    """Puts ``module`` at the dotted ``name`` in ``model``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)
