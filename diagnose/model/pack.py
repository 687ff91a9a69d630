"""The summary file of a large job, packed: schema 3 ("encoding": "columnar").

A summary holds ~30 records per rank (steps, collectives, top kernels, memory), each a JSON object that
repeats its keys; indented, a 2,048-rank summary was 35 MB (17 KB per rank: 280 MB at 16,384 ranks). Above
PACK_ABOVE_RANKS ranks the file is written packed, and `unpack` gives back the same dict `to_dict` made:
- every list of objects sharing one key order becomes column-major, {"@columns": [keys], "@cells": [[column
  values], ...]}; a column of objects (a rank's hints) becomes {"@records": keys, "@cells": ...}, and a column
  of such lists (a rank's steps) one table for all ranks, {"@tables": keys, "@lengths": [n per rank], ...};
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
_COLS, _CELLS, _RECS, _TABS, _LENS, _NAMES = "@columns", "@cells", "@records", "@tables", "@lengths", "@kernel_names"


def should_pack(d: dict) -> bool:
    return len(d.get("ranks") or []) > PACK_ABOVE_RANKS


def file_schema(n_ranks: int, plain: int) -> int:
    """The schema_version the summary file of a job of `n_ranks` carries (`plain` below the packing size)."""
    return PACKED_SCHEMA if n_ranks > PACK_ABOVE_RANKS else plain


_TABLE, _RECORDS, _TABLES = {_COLS, _CELLS}, {_RECS, _CELLS}, {_TABS, _CELLS, _LENS}


_NESTED = (dict, list)


class _Reserved(Exception):
    """A dict from the trace (op names as keys) spells one of the packed forms: that summary is written plain."""


def _columnar(v):
    """Lists of objects with one key order become column-major tables; a column whose cells are all
    objects of one key order (hints, idle) or all tables of one column set (steps, collectives per rank)
    is hoisted, so its keys are written once for all ranks, not once per rank."""
    if type(v) is dict:
        if len(v) <= 3 and set(v) in (_TABLE, _RECORDS, _TABLES):
            raise _Reserved
        return {k: _columnar(x) if type(x) in _NESTED else x for k, x in v.items()}
    if type(v) is list:
        items = [_columnar(x) if type(x) in _NESTED else x for x in v]  # scalars as they are: no call each
        if items and type(v[0]) is dict and v[0]:
            keys = list(v[0])
            if all(type(x) is dict and list(x) == keys for x in v):
                return {_COLS: keys, _CELLS: [_hoist([x[k] for x in items]) for k in keys]}
        return items
    return v


def _hoist(col: list):
    if len(col) < 2 or type(col[0]) is not dict:  # most columns hold numbers: out at once
        return col
    if all(type(x) is dict for x in col):
        first = col[0]
        if set(first) == _TABLE and all(set(x) == _TABLE and x[_COLS] == first[_COLS]
                                        and all(type(c) is list for c in x[_CELLS]) for x in col):
            return {_TABS: first[_COLS], _LENS: [len(x[_CELLS][0]) for x in col],
                    _CELLS: [_hoist([c for x in col for c in x[_CELLS][j]]) for j in range(len(first[_COLS]))]}
        keys = list(first)
        if keys and not set(first) & {_COLS, _RECS, _TABS} and all(list(x) == keys for x in col):
            return {_RECS: keys, _CELLS: [_hoist([x[k] for x in col]) for k in keys]}
    return col


def _column(c) -> list:
    """The decoded values of one column."""
    if type(c) is dict and set(c) == _RECORDS:
        return [dict(zip(c[_RECS], row)) for row in zip(*map(_column, c[_CELLS]))]
    if type(c) is dict and set(c) == _TABLES:
        rows = [dict(zip(c[_TABS], row)) for row in zip(*map(_column, c[_CELLS]))]
        out, i = [], 0
        for n in c[_LENS]:
            out.append(rows[i:i + n])
            i += n
        return out
    return [_rows(x) if type(x) in _NESTED else x for x in c]


def _rows(v):
    if type(v) is dict:
        if len(v) == 2 and set(v) == _TABLE:
            return [dict(zip(v[_COLS], row)) for row in zip(*map(_column, v[_CELLS]))]
        return {k: _rows(x) if type(x) in _NESTED else x for k, x in v.items()}
    if type(v) is list:
        return [_rows(x) if type(x) in _NESTED else x for x in v]
    return v


def _order(m: dict, rank) -> tuple:
    """Closest to capacity first, as metrics/job/cross_rank.py keeps them (views.memory_use's order)."""
    used = max(m.get("peak_reserved") or 0, m.get("peak_allocated") or 0)
    cap = m.get("capacity")
    return (not cap, -(used / cap if cap else used), rank)


def pack(d: dict) -> dict | None:
    """The schema-3 form of a summary dict (a new dict; `d` is not changed); None where a trace's own names
    collide with the packed form's keys (that summary is written plain)."""
    names: dict[str, int] = {}
    mem = [(m, r["rank"]) for r in d["ranks"] for m in r.get("memory") or []]
    keep = {id(m) for m, _ in sorted((x for x in mem if x[0].get("timeline")), key=lambda x: _order(*x))[:MEMORY_TIMELINES]}
    ranks = []
    for r in d["ranks"]:
        r = dict(r)
        r["top_kernels"] = [{**k, "name": names.setdefault(k["name"], len(names))} for k in r.get("top_kernels") or []]
        r["memory"] = [m if id(m) in keep else {**m, "timeline": []} for m in r.get("memory") or []]
        ranks.append(r)
    try:
        out = _columnar({**d, "ranks": ranks})
    except _Reserved:
        return None
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
