"""The summary file of a large job, packed: schema 3 ("encoding": "columnar").

A summary holds ~30 records per rank (steps, collectives, top kernels, memory), each a JSON object that
repeats its keys; indented, a 2,048-rank summary was 35 MB (17 KB per rank: 280 MB at 16,384 ranks). Above
PACK_ABOVE_RANKS ranks the file is written packed, and `unpack` gives back the same dict `to_dict` made:
- every list of objects sharing one key order becomes {"@columns": [keys], "@rows": [[values], ...]};
- kernel names (long C++ signatures, the same 20 on every rank) are written once, in "@kernel_names", and
  each rank's top kernels refer to them by index;
- memory timelines are kept for the MEMORY_TIMELINES devices closest to capacity (the ones a report
  draws); the other devices keep their peaks (what `check` gates on) and an empty timeline;
- no indentation.
Everything `check` and `diff` read (per-rank metrics, steps, collectives, kernels, memory peaks, skew,
findings) is kept exactly. Small summaries stay schema 2, indented, for people reading them.
"""

from __future__ import annotations

PACK_ABOVE_RANKS = 256
MEMORY_TIMELINES = 16  # ≥ the report's memory chart (reports/context.py MAX_MEMORY_SERIES)
PACKED_SCHEMA = 3
_COLS, _ROWS, _NAMES = "@columns", "@rows", "@kernel_names"


def should_pack(d: dict) -> bool:
    return len(d.get("ranks") or []) > PACK_ABOVE_RANKS


def _columnar(v):
    if type(v) is dict:
        return {k: _columnar(x) for k, x in v.items()}
    if type(v) is list:
        v = [_columnar(x) for x in v]
        if len(v) >= 2 and type(v[0]) is dict:
            keys = list(v[0])
            if all(type(x) is dict and list(x) == keys for x in v):
                return {_COLS: keys, _ROWS: [[x[k] for k in keys] for x in v]}
        return v
    return v


def _rows(v):
    if type(v) is dict:
        if len(v) == 2 and _COLS in v and _ROWS in v:
            keys = v[_COLS]
            return [dict(zip(keys, map(_rows, row))) for row in v[_ROWS]]
        return {k: _rows(x) for k, x in v.items()}
    if type(v) is list:
        return [_rows(x) for x in v]
    return v


def _used(m: dict) -> float:
    cap, peak = m.get("capacity"), m.get("peak_reserved") or m.get("peak_allocated") or 0
    return peak / cap if cap else -1.0


def pack(d: dict) -> dict:
    """The schema-3 form of a summary dict (a new dict; `d` is not changed)."""
    names: dict[str, int] = {}
    mem = [(m, r["rank"]) for r in d["ranks"] for m in r.get("memory") or []]
    keep = {id(m) for m, _ in sorted(mem, key=lambda x: (-_used(x[0]), x[1]))[:MEMORY_TIMELINES]}
    ranks = []
    for r in d["ranks"]:
        r = dict(r)
        r["top_kernels"] = [{**k, "name": names.setdefault(k["name"], len(names))} for k in r.get("top_kernels") or []]
        r["memory"] = [m if id(m) in keep else {**m, "timeline": []} for m in r.get("memory") or []]
        ranks.append(r)
    out = _columnar({**d, "ranks": ranks})
    out[_NAMES] = list(names)
    out["schema_version"] = PACKED_SCHEMA
    out["encoding"] = "columnar"
    return out


def unpack(d: dict) -> dict:
    """The plain (schema-2) dict of a packed summary; a summary that is not packed comes back as it is."""
    if d.get("encoding") != "columnar":
        return d
    names = d.get(_NAMES)
    out = _rows({k: v for k, v in d.items() if k not in (_NAMES, "encoding")})
    if not isinstance(names, list) or not isinstance(out.get("ranks"), list):
        return out  # from_dict names what is wrong
    for r in out["ranks"]:
        for k in (r.get("top_kernels") or []) if isinstance(r, dict) else []:
            i = k.get("name") if isinstance(k, dict) else None
            if type(i) is int and 0 <= i < len(names):
                k["name"] = names[i]
    out["schema_version"] = 2
    return out
