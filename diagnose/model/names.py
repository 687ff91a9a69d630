"""Long names (C++ kernel templates) shortened for a table cell, without two different names reading alike.

Shared by the terminal and the report, so a kernel is shortened the same way in both.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from llmdiag.diagnose.model.lazy_re import lazy_compile

try:  # the Rust cpp_demangle crate (gimli-rs) behind a small wheel: fast, and prints what c++filt prints
    from cpp_demangle import demangle as _demangle
except ImportError:  # pragma: no cover - an optional speed-and-readability dependency
    _demangle = None

# A mangled name is untrusted: Itanium back-references (`S_`, `S3_`, `T_`) let 234 bytes demangle to 109 MB in
# 11 s, and the library has no bound. A name with at most SAFE_REFS back-references cannot grow much (each at
# most doubles the text) and is demangled here; any other in a forked child, PER_NAME_S each and OUT_CAP
# characters at most, BUDGET_S in all per call. Beyond a bound the name stays mangled (remembered, so the terminal
# and the report pay once), said once per process on stderr.
SAFE_REFS = 4
OUT_CAP = 256 * 1024  # the longest real kernel name seen demangles to ~10 k characters
PER_NAME_S = 0.5
BUDGET_S = 2.0
CACHE_MAX = 4096
_REFS = lazy_compile(r"[ST][0-9A-Z]*_")
_cache: dict[str, str] = {}
_state = {"said": False}


def demangle(name: str) -> str:
    """`_ZN…` (Itanium C++ ABI) names as C++ reads them; every other name, one the library refuses, or one whose
    demangling exceeds its bound, as is."""
    name = str(name)
    return demangle_many([name])[name]


def demangle_many(names) -> dict[str, str]:
    """name -> demangled name (or the name itself), for every name in `names`, within the bounds above."""
    out, risky = {}, []
    for n in map(str, names):
        if n in _cache:
            out[n] = _cache[n]
        elif _demangle is None or not n.startswith("_Z"):
            out[n] = n
        elif len(_REFS.findall(n)) <= SAFE_REFS:
            out[n] = _remember(n, _direct(n))
        elif n not in risky:
            risky.append(n)
    if risky:
        for n, d in _forked(risky).items():
            out[n] = _remember(n, d) if d is not None else _refused(n)
    return out


def _direct(name: str) -> str:
    try:
        d = _demangle(name)
    except Exception:  # a name that is not a valid mangling stays as the trace wrote it
        return name
    return d if len(d) <= OUT_CAP else name


def _remember(name: str, d: str) -> str:
    if len(_cache) >= CACHE_MAX:
        _cache.clear()
    _cache[name] = d
    return d


def _refused(name: str) -> str:
    """The name as is, remembered, and said once per process (the tables then show it mangled)."""
    if not _state["said"]:
        _state["said"] = True
        shown = name[:60].encode("ascii", "backslashreplace").decode() + ("…" if len(name) > 60 else "")
        print(f"llmdiag: kernel name {shown}: demangling it exceeds its bound ({PER_NAME_S:g} s or "
              f"{OUT_CAP // 1024} kB of text); such names are shown mangled", file=sys.stderr)
    return _remember(name, name)


def _forked(names: list[str]) -> dict[str, str | None]:
    """Each name demangled in a forked child, in order, each within PER_NAME_S and OUT_CAP; None: refused (a
    timeout kills the child; the rest go to a fresh one). Without fork, or past BUDGET_S, None."""
    res: dict[str, str | None] = {}
    todo = list(names)
    end = time.monotonic() + BUDGET_S
    while todo:
        left = end - time.monotonic()
        if left <= 0 or not hasattr(os, "fork"):
            res.update({n: None for n in todo})
            break
        got = _child(todo, min(PER_NAME_S, left))
        res.update(got)
        todo = todo[len(got):]
        if todo:  # the next name ran out of time: refused, the others go on
            res[todo.pop(0)] = None
    return res


def _child(names: list[str], per_name: float) -> dict[str, str | None]:
    """Results in order until the child finishes, or until one name takes longer than `per_name`."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return {n: None for n in names}
    if pid == 0:  # pragma: no cover - the child: demangle, write length-prefixed results, leave at once
        try:
            os.close(r)
            for n in names:
                d = _direct(n)
                b = b"" if d is n else d.encode("utf-8", "surrogatepass")
                os.write(w, len(b).to_bytes(4, "little") + b) if len(b) < (1 << 30) else None
        finally:
            os._exit(0)
    os.close(w)
    out: dict[str, str | None] = {}
    buf = b""
    deadline = time.monotonic() + per_name
    try:
        while len(out) < len(names):
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([r], [], [], wait)[0]:
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + (k := int.from_bytes(buf[:4], "little")):
                n = names[len(out)]
                out[n] = buf[4:4 + k].decode("utf-8", "surrogatepass") if k else n
                buf = buf[4 + k:]
                deadline = time.monotonic() + per_name
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    return out


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
