"""Long names (C++ kernel templates) shortened for a table cell, without two different names reading alike.

Shared by the terminal and the report, so a kernel is shortened the same way in both.
"""

from __future__ import annotations

from functools import lru_cache

try:  # the Rust cpp_demangle crate (gimli-rs) behind a small wheel: fast, and prints what c++filt prints
    from cpp_demangle import demangle as _demangle
except ImportError:  # pragma: no cover - an optional speed-and-readability dependency
    _demangle = None


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """`_ZN…` (Itanium C++ ABI) names as C++ reads them; every other name, or one the library refuses, as is."""
    name = str(name)
    if _demangle is None or not name.startswith("_Z"):
        return name
    try:
        return _demangle(name)
    except Exception:  # a name that is not a valid mangling stays as the trace wrote it
        return name


def middle(name: str, width: int) -> str:
    """`name` cut to `width` in the middle: kernel templates share long prefixes and differ at the end."""
    name = str(name)
    if len(name) <= width:
        return name
    head = (width - 1) // 2
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def _elide(name: str, op: str, cl: str) -> str:
    """`name` with the last bracketed group (op…cl) written `op…cl`, where it follows an identifier: the
    argument list of `f<T>(int, float*)`, then the template arguments of `f<T>(…)`."""
    tail = "(…)" if cl == ">" and name.endswith("(…)") else ""
    body = name[:len(name) - len(tail)]
    if not body.endswith(cl):
        return name
    depth = 0
    for i in range(len(body) - 1, 0, -1):
        depth += (body[i] == cl) - (body[i] == op)
        if depth == 0:
            return body[:i] + op + "…" + cl + tail if body[i - 1].isalnum() or body[i - 1] in "_>" else name
    return name


def short_names(names: list[str], width: int) -> dict[str, str]:
    """name -> text of at most `width`, distinct for distinct names (kernel templates share long prefixes and
    differ deep inside). The argument list goes where that leaves the name unique; the template arguments too
    where the rest still does not fit and is a name of its own (not `cutlass::Kernel<…>`); what is still too
    long is cut in the middle, wider where two would print the same."""
    forms = {n: [n] for n in names}
    for op, cl in (("(", ")"), ("<", ">")):
        for f in forms.values():
            f.append(_elide(f[-1], op, cl))
    unique = lambda f, k: sum(g[k] == f[k] for g in forms.values()) == 1
    full = {}
    for n, f in forms.items():
        args = f[1] if unique(f, 1) else f[0]
        templ = len(args) > width and unique(f, 2) and len(f[2]) >= width // 2
        full[n] = f[2] if templ else args
    out, w = {n: middle(f, width) for n, f in full.items()}, width
    while True:
        texts: dict[str, list[str]] = {}
        for n, t in out.items():
            texts.setdefault(t, []).append(n)
        clash = [n for ns in texts.values() if len(ns) > 1 for n in ns if len(out[n]) < len(full[n])]
        if not clash:
            return out
        w += max(8, width // 4)
        out.update({n: middle(full[n], w) for n in clash})
