"""The packed summary (schema 3, model/pack.py) written straight from the dataclasses.

`pack(to_json_dict(a))` first turned every record of the analysis into a dict (orjson out and back in), then
walked that tree once more to build its columns: at 16,384 ranks, ~600,000 records built twice, most of the
render phase. Here each column is read off the objects once (`[x.time_ms for x in steps]`), fields whose type
hint is plain JSON (numbers, strings, lists of them) are not walked at all, and a list of records of one
dataclass is a table by construction. The result is the dict `pack(a.to_dict())` gives, key for key
(tests/unit/model/test_pack_fast.py compares the bytes), so readers see no difference.

Anything this path does not take exactly as `pack` would (a dict with non-string keys in a list of records,
a trace name spelling a packed key) raises `Fallback`, and the caller writes the summary the general way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from operator import attrgetter

from llmdiag.diagnose.model.analysis import Analysis, KernelStat, MemoryStat, RankMetrics
from llmdiag.diagnose.model.codec import record_fields, type_hints
from llmdiag.diagnose.model.pack import (CELLS, COLS, LENS, MEMORY_TIMELINES, RECS, TABS, finish, hoist, memory_order,
                                         reserved)

_FLAT_SCALARS = (int, float, str, bool)
_PLAIN = frozenset((int, float, str, bool, type(None)))


class Fallback(Exception):
    """A shape only the general writer (to_json_dict, then pack) takes exactly."""


def _flat(tp) -> bool:
    """A type whose values are plain JSON with no object inside: `pack` copies them as they are."""
    if tp in _FLAT_SCALARS or tp is type(None):
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return all(_flat(a) for a in typing.get_args(tp))
    if origin is list:
        args = typing.get_args(tp)
        return bool(args) and _flat(args[0])
    return False


@cache
def _shape(cls) -> tuple[tuple[str, ...], frozenset, str | None, bool]:
    """(field names in order, the names typed plain JSON, the `rest` field, whether every field is plain)."""
    names, rest = record_fields(cls)
    hints = type_hints(cls)
    flat = frozenset(n for n in names if _flat(hints[n]))
    return names, flat, rest, rest is None and len(flat) == len(names)


@cache
def _tableable(cls) -> bool:
    """Records `pack` makes one table of over all ranks: every field plain JSON, or a record of plain fields (a
    step's critical path: pack.hoist joins its per-rank @records columns)."""
    names, flat, rest, _ = _shape(cls)
    if rest is not None:
        return False
    hints = type_hints(cls)
    for n in names:
        if n in flat:
            continue
        dcs = [a for a in typing.get_args(hints[n]) if a is not type(None)]
        if len(dcs) != 1 or not dataclasses.is_dataclass(dcs[0]) or not _shape(dcs[0])[3]:
            return False
    return True


def _is_dc(v) -> bool:
    return hasattr(type(v), "__dataclass_fields__")


def _nested(v) -> bool:
    t = type(v)
    if t in _FLAT_SCALARS or v is None:
        return False
    return t is dict or t is list or t is tuple or isinstance(v, (dict, list, tuple)) or _is_dc(v)


def _dict(d: dict) -> dict:
    if reserved(d):
        raise Fallback  # a trace's own names spell a packed form: `pack` writes that summary plain
    if set(map(type, d.values())) <= _PLAIN:
        return d  # written as it is (orjson writes the same text for a copy); never changed here
    return {k: _walk(x) if _nested(x) else x for k, x in d.items()}


def _walk(v):
    """`v` as `pack` writes it: objects as dicts, lists of like records as column tables."""
    if isinstance(v, dict):
        return _dict(v)
    if isinstance(v, (list, tuple)):
        return _list(v)
    if _is_dc(v):
        names, flat, rest, _ = _shape(type(v))
        d = {n: getattr(v, n) for n in names}
        return _dict({**d, **getattr(v, rest)} if rest else d)
    return v


@cache
def _getter(cls):
    names = _shape(cls)[0]
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda x: (get(x),)


def _columns(objs: list, cls, hooks: dict | None = None, start: int = 0) -> list:
    """The hoisted columns of a non-empty list of `cls` records (all of that exact class): all fields read in
    one C call per record, transposed by zip; `hooks` give some fields' columns from the objects (kernel
    names as indices, memory timelines left out)."""
    names, flat, _, _ = _shape(cls)
    cols = list(map(list, zip(*map(_getter(cls), objs))))
    cells = []
    for n, col in zip(names, cols):
        if hooks and n in hooks:
            col = hooks[n](objs, start)
        elif n not in flat:
            col = [_walk(x) if _nested(x) else x for x in col]
        cells.append(hoist(col))
    return cells


def _table(objs: list, cls, hooks: dict | None = None, start: int = 0) -> dict:
    return {COLS: list(_shape(cls)[0]), CELLS: _columns(objs, cls, hooks, start)}


def _field_column(col: list):
    """One field's column over records (hints, idle per rank): a column of records of one dataclass is one
    record of columns, as `pack` hoists it."""
    cls = type(col[0]) if col else None
    if (len(col) >= 2 and _is_dc(col[0]) and _shape(cls)[0] and _shape(cls)[2] is None
            and all(type(x) is cls for x in col)):
        return {RECS: list(_shape(cls)[0]), CELLS: _columns(col, cls)}
    return hoist([_walk(x) if _nested(x) else x for x in col])


def _list(v) -> list | dict:
    if not v:
        return []
    cls = type(v[0])
    if _is_dc(v[0]) and _shape(cls)[0] and _shape(cls)[2] is None and all(type(x) is cls for x in v):
        return _table(v, cls)
    items = [_walk(x) if _nested(x) else x for x in v]
    if type(items[0]) is dict and items[0]:
        keys = list(items[0])
        if all(type(x) is dict and list(x) == keys for x in items):
            if not all(type(k) is str for k in keys):
                raise Fallback  # non-string keys: the general writer's round trip makes them strings first
            return {COLS: keys, CELLS: [hoist([x[k] for x in items]) for k in keys]}
    return items


def _lists(lists: list, cls, hooks: dict) -> list | dict:
    """The column of one list-of-records field over all ranks (steps, top kernels, ...), as `pack` hoists it:
    one table for all ranks where every rank has records, else one table (or []) per rank."""
    if not all(type(x) is cls for lst in lists for x in lst):
        raise Fallback
    if len(lists) >= 2 and all(lists) and _tableable(cls):
        tab = _table([x for lst in lists for x in lst], cls, hooks)
        return {TABS: tab[COLS], LENS: [len(lst) for lst in lists], CELLS: tab[CELLS]}
    col, start = [], 0
    for lst in lists:
        col.append(_table(lst, cls, hooks, start) if lst else [])
        start += len(lst)
    return hoist(col)


def pack_analysis(a: Analysis) -> dict:
    """`pack(a.to_dict())`, built from the objects (raises Fallback where only that path is exact)."""
    ranks = a.ranks
    if not all(type(r) is RankMetrics for r in ranks):
        raise Fallback
    mem = [(k, m, r.rank) for k, (m, r) in enumerate((m, r) for r in ranks for m in r.memory) if m.timeline]
    keep = {k for k, _, _ in sorted(mem, key=lambda x: memory_order(x[1].peak_reserved, x[1].peak_allocated,
                                                                     x[1].capacity, x[2]))[:MEMORY_TIMELINES]}
    names: dict[str, int] = {}
    kernel_hooks = {"name": lambda objs, start: [names.setdefault(k.name, len(names)) for k in objs]}
    memory_hooks = {"timeline": lambda objs, start: [m.timeline if start + i in keep else []
                                                     for i, m in enumerate(objs)]}
    lists = {"steps": None, "comm_by_kind": None, "top_kernels": kernel_hooks, "memory": memory_hooks,
             "pipeline_actions": None}
    hints = type_hints(RankMetrics)
    rnames, rflat, _, _ = _shape(RankMetrics)
    cells = []
    for n, col in zip(rnames, map(list, zip(*map(_getter(RankMetrics), ranks)))):
        if n in lists:
            cells.append(_lists(col, typing.get_args(hints[n])[0], lists[n]))
        elif n in rflat:
            cells.append(col)
        else:
            cells.append(_field_column(col))
    out = {}
    for f in dataclasses.fields(Analysis):
        v = getattr(a, f.name)
        out[f.name] = {COLS: list(rnames), CELLS: cells} if f.name == "ranks" else (_walk(v) if _nested(v) else v)
    return finish(out, names)


assert _shape(KernelStat)[3] and _shape(MemoryStat)[3]  # the hooks above assume plain fields
