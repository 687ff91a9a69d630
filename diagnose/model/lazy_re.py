"""A module-level regular expression compiled at its first use, not at import (issue 37).

Every `analyze` process imports ~70 module-level patterns; about a third are never searched on a given trace (a
Gloo group, a Kineto file name, an AMD device, a cuBLAS template), and compiling each costs 30-200 µs before a
byte is read. `lazy_compile(p, flags)` returns a stand-in whose first attribute look-up compiles `p` with
`re.compile` (so `re`'s own cache and errors apply) and keeps the bound methods on the stand-in itself: later
`X.search(s)` calls cost what they cost on the pattern. Typed as the `re.Pattern` it stands for; it is not one
(`re.sub(X, ...)` and `isinstance` need the pattern: use `X.sub(...)`), so only method and attribute uses go
through it. `compiled(X)` says whether it was compiled (tests/unit/test_startup_imports.py).
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

# What a use reads from the pattern: bound once on the stand-in, so a later look-up finds it in its own dict.
_KEPT = ("search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer", "scanner", "pattern",
         "flags", "groups", "groupindex")


class _Lazy:
    """The pattern's text and flags until something reads from it."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self._args: tuple[Any, int] = (pattern, flags)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy/pickle probing dunders: not the pattern's to answer
            raise AttributeError(name)
        p = re.compile(*self._args)
        for k in _KEPT:
            self.__dict__[k] = getattr(p, k)
        return getattr(p, name)

    def __repr__(self) -> str:
        return f"lazy_compile({self._args[0]!r}, {self._args[1]!r})"


def lazy_compile(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:
    """re.compile(pattern, flags), done when the pattern is first used (a str or a bytes pattern)."""
    return cast("re.Pattern[AnyStr]", _Lazy(pattern, int(flags)))


def compiled(p: re.Pattern) -> bool:
    """Was the pattern compiled (used) yet? Always True for a real `re.Pattern`."""
    return not isinstance(p, _Lazy) or "search" in p.__dict__
