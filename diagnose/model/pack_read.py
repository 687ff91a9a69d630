"""A packed summary (schema 3, model/pack.py) read straight from its columns.

`unpack` rebuilds the row-major dict of every record (~600,000 at 16,384 ranks), then `codec.build` checks
each field of each record on its own; `check` and `diff` of a 16k-rank summary spent ~20 s there. Here a
column is checked in one pass over the column (`{type(x) for x in col} <= {int, float}`), and the records
of a table are made from their columns by zip, one constructor call each.

It takes the shapes the writer makes. Anything else (a column of the wrong length, a value of the wrong
type, a key it does not know) raises `Slow`, and `Analysis.from_dict` reads the file the general way
(`unpack`, then `build`), which names the first field that does not fit, as before.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from itertools import chain

from llmdiag.diagnose.model.codec import Invalid, converter, record_fields, type_hints
from llmdiag.diagnose.model.pack import (CELLS, COLS, HEADER, KERNEL_NAMES, LENS, RECORDS, RECS, TABLE, TABLES, TABS,
                                         UNPACKED_SCHEMA, decode, decode_column)

_NONE = type(None)


class Slow(Exception):
    """A shape or value this reader leaves to the general one (which names what is wrong, if anything)."""


# ---- one column of scalars, checked in one pass ---------------------------------------------------------
def _floats(col: list, optional: bool) -> list:
    kinds = set(map(type, col))
    if not kinds <= ({int, float, _NONE} if optional else {int, float}):
        raise Slow
    try:
        if float in kinds and not all(map(math.isfinite, filter(None, col))):
            raise Slow  # inf or nan: not a number a summary holds
    except OverflowError:  # an int beyond a float (the general reader takes it)
        raise Slow from None
    return col


def _ints(col: list, optional: bool) -> list:
    kinds = set(map(type, col))
    if kinds <= ({int, _NONE} if optional else {int}):
        return col
    if kinds <= ({int, float, _NONE} if optional else {int, float}) and all(
            x.is_integer() for x in col if type(x) is float):
        return [int(x) if type(x) is float else x for x in col]  # 3.0 is 3, as the general reader reads it
    raise Slow


def _of(kind):
    def check(col: list, optional: bool) -> list:
        if not set(map(type, col)) <= ({kind, _NONE} if optional else {kind}):
            raise Slow
        return col
    return check


_SCALAR = {float: _floats, int: _ints, str: _of(str), bool: _of(bool)}
_MAPS = {dict[str, t]: _SCALAR[t] for t in _SCALAR}


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    tp: object
    required: bool  # no default: the general reader would refuse it missing (or take None where it fits)
    optional: bool  # None fits
    scalar: object  # the column check for float/int/str/bool (optional or not), else None
    record: type | None  # a dataclass (optional or not)
    records: type | None  # list of a dataclass


@cache
def _plan(cls) -> tuple[tuple[_Field, ...], bool]:
    """The fields of `cls` as this reader takes them, and whether it can (no `rest` field)."""
    hints = type_hints(cls)
    names, rest = record_fields(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name not in names:
            continue
        tp = hints[f.name]
        args = typing.get_args(tp)
        optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and _NONE in args
        inner = [a for a in args if a is not _NONE] if optional else [tp]
        base = inner[0] if len(inner) == 1 else None
        records = None
        if typing.get_origin(base) is list and dataclasses.is_dataclass(typing.get_args(base)[0]) and not optional:
            records = typing.get_args(base)[0]
        out.append(_Field(f.name, tp, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                          optional, _SCALAR.get(base), base if dataclasses.is_dataclass(base) else None, records))
    return tuple(out), rest is None


def _general(tp, values: list, decoded: bool = False) -> list:
    """Values of any other type (free-form dicts, lists of strings, a record with a `rest` field), each
    decoded and through the general converter: they are few or small."""
    check = _MAPS.get(tp)
    if check is not None and all(type(v) is dict for v in values):  # dict[str, float] (op name -> ms), as is:
        vals = list(chain.from_iterable(map(dict.values, values)))  # the column's maps checked in one pass
        if set(map(type, chain.from_iterable(values))) <= {str} and check(vals, False) is vals:
            return [dict(v) for v in values]
    conv = converter(tp)
    try:
        if decoded:
            return [conv(v, "") for v in values]
        return [conv(decode(v) if type(v) in (dict, list) else v, "") for v in values]
    except Invalid:
        raise Slow from None


def _length(cell) -> int:
    if type(cell) is list:
        return len(cell)
    if type(cell) is dict and set(cell) == RECORDS and cell[CELLS]:
        return _length(cell[CELLS][0])
    if type(cell) is dict and set(cell) == TABLES:
        return len(cell[LENS])
    raise Slow


def _records(cls, keys, cells, n: int) -> list:
    """`n` records of `cls` from a table's columns (keys and cells as written)."""
    plan, ok = _plan(cls)
    if type(keys) is not list or type(cells) is not list or len(keys) != len(cells):
        raise Slow
    if not ok:
        rows = [dict(zip(keys, row)) for row in zip(*map(decode_column, cells))]
        if len(rows) != n:
            raise Slow
        return _general(cls, rows, decoded=True)
    at = dict(zip(keys, cells))
    if len(at) != len(keys) or not set(at) <= {f.name for f in plan}:
        raise Slow
    cols, names = [], []
    for f in plan:
        if f.name in at:
            cols.append(_values(f, at[f.name], n))
            names.append(f.name)
        elif f.required:
            raise Slow
    if len(names) == len(plan) and cols:
        return list(map(cls, *cols))  # positional, in field order: no tuple or dict per record
    return [cls(**dict(zip(names, row))) for row in zip(*cols)]


def _values(f: _Field, cell, n: int) -> list:
    """The `n` values of field `f` from its column."""
    if f.records is not None and type(cell) is dict:
        if set(cell) != TABLES or type(cell[LENS]) is not list:
            raise Slow
        lens = cell[LENS]
        if len(lens) != n or not set(map(type, lens)) <= {int}:
            raise Slow
        rows = _records(f.records, cell[TABS], cell[CELLS], sum(lens))
        out, i = [], 0
        for k in lens:
            out.append(rows[i:i + k])
            i += k
        return out
    if f.record is not None and type(cell) is dict:
        if set(cell) != RECORDS:
            raise Slow
        return _records(f.record, cell[RECS], cell[CELLS], n)
    if type(cell) is dict:  # a column of free-form objects or lists, hoisted (coords, a dict per rank)
        rows = decode_column(cell)
        if len(rows) != n:
            raise Slow
        return _general(f.tp, rows, decoded=True)
    if type(cell) is not list or len(cell) != n:
        raise Slow
    if f.scalar is not None:
        return list(f.scalar(cell, f.optional))
    if f.records is not None:
        return [_list(f.records, v) for v in cell]
    if f.record is not None:
        return [None if v is None and f.optional else _one(f.record, v) for v in cell]
    return _general(f.tp, cell)


def _list(cls, v) -> list:
    """A list of records: a table, or (written so where its records differ in keys) a list of objects."""
    if type(v) is dict:
        if set(v) != TABLE or type(v[CELLS]) is not list or not v[CELLS]:
            raise Slow
        return _records(cls, v[COLS], v[CELLS], _length(v[CELLS][0]))
    if type(v) is not list:
        raise Slow
    return [_one(cls, x) for x in v]


def _one(cls, v):
    """One record from its object."""
    plan, ok = _plan(cls)
    if not ok:
        return _general(cls, [v])[0]
    if type(v) is not dict or not set(v) <= {f.name for f in plan}:
        raise Slow
    kw = {}
    for f in plan:
        if f.name not in v:
            if f.required:
                raise Slow
            continue
        x = v[f.name]
        if x is None and f.optional:
            kw[f.name] = None
        elif f.scalar is not None:
            kw[f.name] = f.scalar([x], f.optional)[0]
        elif f.records is not None:
            kw[f.name] = _list(f.records, x)
        elif f.record is not None:
            kw[f.name] = _one(f.record, x)
        else:
            kw[f.name] = _general(f.tp, [x])[0]
    return cls(**kw)


def _kernel_names(ranks, names) -> dict:
    """The ranks table with each top kernel's name index replaced by its name (pack wrote names once)."""
    if type(ranks) is not dict or set(ranks) != TABLE or type(names) is not list:
        raise Slow
    cells = list(ranks[CELLS])
    if "top_kernels" not in ranks[COLS]:
        return ranks
    j = ranks[COLS].index("top_kernels")
    col = cells[j]

    def named(tab: dict) -> dict:
        """A table of top kernels (one rank's, or all ranks' hoisted) with names for indices."""
        keys = tab.get(COLS, tab.get(TABS)) if type(tab) is dict and set(tab) in (TABLE, TABLES) else None
        if type(keys) is not list or "name" not in keys or type(tab[CELLS]) is not list:
            raise Slow
        inner = list(tab[CELLS])
        k = keys.index("name")
        idx = inner[k] if k < len(inner) else None
        if type(idx) is not list or not set(map(type, idx)) <= {int} or (idx and not 0 <= min(idx) <= max(idx) < len(names)):
            raise Slow
        inner[k] = [names[i] for i in idx]
        return {**tab, CELLS: inner}

    if type(col) is dict:
        cells[j] = named(col)
    elif type(col) is list:
        cells[j] = [named(t) if t else t for t in col]
    else:
        raise Slow
    return {**ranks, CELLS: cells}


def read_packed(cls, data: dict):
    """The analysis (`cls`, model/analysis.py `Analysis`) of a packed summary dict; Slow where only the
    general reader is sure."""
    d = {k: v for k, v in data.items() if k not in HEADER}
    d["ranks"] = _kernel_names(d.get("ranks"), data.get(KERNEL_NAMES))
    d["schema_version"] = UNPACKED_SCHEMA
    return _one(cls, d)
