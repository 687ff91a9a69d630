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
UNPACKED_SCHEMA = 2  # what a packed summary reads back as (the in-memory schema)
ENCODING = "columnar"  # the packed file's "encoding"
# The format's keys: the writers (pack below, model/pack_write.py) and readers (unpack below, model/pack_read.py)
# all spell the format with these names.
COLS, CELLS, RECS, TABS, LENS, KERNEL_NAMES = "@columns", "@cells", "@records", "@tables", "@lengths", "@kernel_names"
HEADER = (KERNEL_NAMES, "encoding")  # the keys a packed file adds to a summary's own


def should_pack(d: dict) -> bool:
    return len(d.get("ranks") or []) > PACK_ABOVE_RANKS


def file_schema(n_ranks: int, plain: int) -> int:
    """The schema_version the summary file of a job of `n_ranks` carries (`plain` below the packing size)."""
    return PACKED_SCHEMA if n_ranks > PACK_ABOVE_RANKS else plain


TABLE, RECORDS, TABLES = {COLS, CELLS}, {RECS, CELLS}, {TABS, CELLS, LENS}


def reserved(d: dict) -> bool:
    """A dict (from the trace: op names as keys) that spells one of the packed forms: its summary is written
    plain, or a reader would decode it as a table."""
    return len(d) <= 3 and set(d) in (TABLE, RECORDS, TABLES)


_NESTED = (dict, list)


class _Reserved(Exception):
    """A dict from the trace (op names as keys) spells one of the packed forms: that summary is written plain."""


def _columnar(v):
    """Lists of objects with one key order become column-major tables; a column whose cells are all
    objects of one key order (hints, idle) or all tables of one column set (steps, collectives per rank)
    is hoisted, so its keys are written once for all ranks, not once per rank."""
    if type(v) is dict:
        if reserved(v):
            raise _Reserved
        return {k: _columnar(x) if type(x) in _NESTED else x for k, x in v.items()}
    if type(v) is list:
        items = [_columnar(x) if type(x) in _NESTED else x for x in v]  # scalars as they are: no call each
        if items and type(v[0]) is dict and v[0]:
            keys = list(v[0])
            if all(type(x) is dict and list(x) == keys for x in v):
                return {COLS: keys, CELLS: [hoist([x[k] for x in items]) for k in keys]}
        return items
    return v


def hoist(col: list):
    if len(col) < 2 or type(col[0]) is not dict:  # most columns hold numbers: out at once
        return col
    if all(type(x) is dict for x in col):
        first = col[0]
        if set(first) == TABLE and all(set(x) == TABLE and x[COLS] == first[COLS]
                                        and all(_is_rows(c) for c in x[CELLS]) for x in col):
            return {TABS: first[COLS], LENS: [len(_rows(x[CELLS][0])) for x in col],
                    CELLS: [hoist([c for x in col for c in _rows(x[CELLS][j])]) for j in range(len(first[COLS]))]}
        keys = list(first)
        if keys and not set(first) & {COLS, RECS, TABS} and all(list(x) == keys for x in col):
            return {RECS: keys, CELLS: [hoist([x[k] for x in col]) for k in keys]}
    return col


def _is_rows(c) -> bool:
    """A table's column: its values, or (a column of records, a step's critical path) their @records form."""
    return type(c) is list or (type(c) is dict and set(c) == RECORDS)


def _rows(c) -> list:
    return c if type(c) is list else decode_column(c)


def decode_column(c) -> list:
    """The decoded values of one column."""
    if type(c) is dict and set(c) == RECORDS:
        return [dict(zip(c[RECS], row)) for row in zip(*map(decode_column, c[CELLS]))]
    if type(c) is dict and set(c) == TABLES:
        rows = [dict(zip(c[TABS], row)) for row in zip(*map(decode_column, c[CELLS]))]
        out, i = [], 0
        for n in c[LENS]:
            out.append(rows[i:i + n])
            i += n
        return out
    return [decode(x) if type(x) in _NESTED else x for x in c]


def decode(v):
    if type(v) is dict:
        if len(v) == 2 and set(v) == TABLE:
            return [dict(zip(v[COLS], row)) for row in zip(*map(decode_column, v[CELLS]))]
        return {k: decode(x) if type(x) in _NESTED else x for k, x in v.items()}
    if type(v) is list:
        return [decode(x) if type(x) in _NESTED else x for x in v]
    return v


def memory_order(peak_reserved, peak_allocated, capacity, rank) -> tuple:
    """The sort key of the devices whose timelines are kept: closest to capacity first, as
    metrics/job/cross_rank.py keeps them (views.memory_use's order)."""
    used = max(peak_reserved or 0, peak_allocated or 0)
    return (not capacity, -(used / capacity if capacity else used), rank)


def _order(m: dict, rank) -> tuple:
    return memory_order(m.get("peak_reserved"), m.get("peak_allocated"), m.get("capacity"), rank)


def finish(out: dict, names: dict[str, int]) -> dict:
    """`out` (a summary's columns) with the packed file's header: the kernel names, schema and encoding."""
    out[KERNEL_NAMES] = list(names)
    out["schema_version"] = PACKED_SCHEMA
    out["encoding"] = ENCODING
    return out


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
    return finish(out, names)


def unpack(d: dict) -> dict:
    """The plain (schema-2) dict of a packed summary; a summary that is not packed comes back as it is."""
    if d.get("encoding") != ENCODING:
        return d
    names = d.get(KERNEL_NAMES)
    out = decode({k: v for k, v in d.items() if k not in HEADER})
    if not isinstance(names, list) or not isinstance(out.get("ranks"), list):
        return out  # from_dict names what is wrong
    for r in out["ranks"]:
        for k in (r.get("top_kernels") or []) if isinstance(r, dict) else []:
            i = k.get("name") if isinstance(k, dict) else None
            if type(i) is int and 0 <= i < len(names):
                k["name"] = names[i]
    out["schema_version"] = UNPACKED_SCHEMA
    return out


def upgrade_v1(data: dict) -> dict:
    """The schema-2 dict of a schema-1 summary, which kept a finding's evidence as text beside its ranks, steps
    and metric."""
    out = []
    for f in data.get("findings") or []:
        if isinstance(f, dict) and not isinstance(f.get("evidence"), dict):
            f = dict(f)
            f["evidence"] = {"text": f.pop("evidence", ""), "metric": f.pop("metric", ""),
                             "ranks": f.pop("ranks", []), "steps": f.pop("steps", [])}
        out.append(f)
    return {**data, "findings": out, "schema_version": UNPACKED_SCHEMA}
