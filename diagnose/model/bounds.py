"""Values from traces bounded at the edge: a number no real run produces is an "invalid value" warning for
that field, never a crash further on (the JSON writer cannot write ints beyond int64; a message of 1e300
elements would make every bandwidth absurd).

`bound_values` walks one rank's typed metrics after they are computed: an int beyond int64 becomes the
nearest float JSON can hold (or None), a communication size beyond physical sense (more than 2^60 bytes in
a profiling window) is dropped from the sized ops, and each such field is named once in the rank's warnings.
"""

from __future__ import annotations

import dataclasses
import math
from operator import attrgetter

INT64 = 2**63 - 1
MAX_BYTES = 2**60  # an exabyte per profiling window: no interconnect moves that


def json_int(v: int):
    """`v` if int64 holds it, else the float nearest to it (None beyond double)."""
    if -INT64 - 1 <= v <= INT64:
        return v
    try:
        return float(v)
    except OverflowError:
        return None


def _comm(c, path: str, out: list[str]) -> None:
    if isinstance(getattr(c, "bytes", None), int) and not 0 <= c.bytes <= MAX_BYTES:
        out.append(f"invalid value: {path}.bytes = {float(c.bytes):.3g} (beyond {MAX_BYTES:.3g} bytes); "
                   f"sizes of {c.kind} ops ignored")
        c.bytes, c.sized_count, c.algbw_gbps, c.busbw_gbps = 0, 0, None, None


def bound_values(obj, path: str = "", out: list[str] | None = None) -> list[str]:
    """Fix out-of-range values of `obj` (a dataclass tree) in place; the warnings, one per field."""
    out = [] if out is None else out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "busbw_gbps") and hasattr(obj, "sized_count"):
            _comm(obj, path, out)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            sub = f"{path}.{f.name}" if path else f.name
            nv = _fix(v, sub, out)
            if nv is not v:
                setattr(obj, f.name, nv)
    return out


def _fix(v, path: str, out: list[str]):
    if type(v) is int:
        nv = json_int(v)
        if nv is not v:
            out.append(f"invalid value: {path} = {float(v) if nv is not None else 'a huge integer'} (beyond int64)")
        return nv
    if type(v) is float and math.isnan(v):
        return v
    if isinstance(v, list):
        if _plain_rows(v):
            return v
        for i, x in enumerate(v):
            nx = _fix(x, f"{path}[{i}]", out)
            if nx is not x:
                v[i] = nx
        return v
    if isinstance(v, dict):
        for k in list(v):
            nx = _fix(v[k], f"{path}.{k}", out)
            if nx is not v[k]:
                v[k] = nx
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        bound_values(v, path, out)
    return v


def _plain_rows(v: list) -> bool:
    """True where `v` is rows of one dataclass whose every field holds a float, a str, None or an int within int64,
    so walking it would change nothing: decided per column with C-level map/min/max, not per row (a rank's
    100,000 per-step rows cost ~39 Python calls each here before, issue 35). Anything else (mixed rows, nested
    values, an int out of range, communication stats) is left to the walk, which names each field it fixes."""
    if len(v) < 2 or len(kinds := set(map(type, v))) != 1:
        return False
    cls = kinds.pop()
    if not dataclasses.is_dataclass(cls) or (hasattr(v[0], "busbw_gbps") and hasattr(v[0], "sized_count")):
        return False
    for f in dataclasses.fields(cls):
        col = list(map(attrgetter(f.name), v))
        types = set(map(type, col))
        if types <= {float, str, type(None), bool}:
            continue
        if types != {int} or min(col) < -INT64 - 1 or max(col) > INT64:
            return False
    return True
