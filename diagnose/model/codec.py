"""Typed dataclasses <-> plain JSON values, driven by the dataclasses' type hints.

`build` refuses a value that does not fit its field with `Invalid` naming the field's dotted path, so a
summary with a string where a number belongs is one clear error at the edge, not a crash inside a rule.
A field with `metadata={"rest": True}` collects the keys the class does not name (and the writer merges
them back), so records written by other versions round-trip.

Speed: a 512-rank summary holds about a million numbers (memory timelines), so each type hint is compiled
once into a converter, and lists of plain numbers or strings are checked in one pass instead of one call
per element; writing lets orjson serialize the dataclasses natively.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import math
import re
import sys
import types
import typing
from functools import cache
from typing import Any, Callable

import orjson

Converter = Callable[[Any, str], Any]
JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


class Invalid(Exception):
    def __init__(self, path: str, what: str):
        super().__init__(f"{path or 'the document'} {what}")


# ---- reading --------------------------------------------------------------------------------------------
def _is_float(x) -> bool:
    """A finite number (an int is a number too: JSON writes 3.0 as 3, and 2**40 bytes is an int)."""
    return type(x) is int or (type(x) is float and -math.inf < x < math.inf)


def _scalar(tp) -> Converter | None:
    def number(v, path):
        if not _is_float(v):
            raise Invalid(path, "is not a number")
        return v

    def integer(v, path):
        if type(v) is int:
            return v
        if type(v) is float and v.is_integer():
            return int(v)
        raise Invalid(path, "is not an integer")

    def boolean(v, path):
        if type(v) is not bool:
            raise Invalid(path, "is not true or false")
        return v

    def string(v, path):
        if type(v) is not str:
            raise Invalid(path, "is not a string")
        return v

    return {float: number, int: integer, bool: boolean, str: string}.get(tp)


# element check of a list of scalars in one pass; a failure falls back to the per-element converter
_ALL_OK = {float: lambda v: all(map(_is_float, v)), int: lambda v: all(type(x) is int for x in v),
           str: lambda v: all(type(x) is str for x in v), bool: lambda v: all(type(x) is bool for x in v)}


@cache
def converter(tp) -> Converter:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(tp)
    if tp is typing.Any:
        return lambda v, path: v
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    inner = _scalar(tp) or _container(tp, origin)

    def conv(v, path):
        if v is None:  # null where the type has no None: the value is absent, whatever type it should have had
            raise Invalid(path, "is missing")
        return inner(v, path)

    return conv


def _union(tp) -> Converter:
    optional = type(None) in typing.get_args(tp)
    subs = [converter(a) for a in typing.get_args(tp) if a is not type(None)]

    def conv(v, path):
        if v is None:
            if optional:
                return None
            raise Invalid(path, "is missing")
        first = None
        for sub in subs:
            try:
                return sub(v, path)
            except Invalid as e:
                first = first or e
        raise first

    return conv


def _container(tp, origin) -> Converter:
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (typing.Any,)
        item, fast = converter(item_tp), _ALL_OK.get(item_tp)

        def conv_list(v, path):
            if type(v) is not list:
                raise Invalid(path, "is not a list")
            if fast is not None and fast(v):
                return list(v)  # a copy: the analysis never shares a list with the dict it was read from
            return [item(x, f"{path}.{i}") for i, x in enumerate(v)]

        return conv_list
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        value = converter(args[1]) if args else None

        def conv_dict(v, path):
            if type(v) is not dict:
                raise Invalid(path, "is not an object")
            return v if value is None else {str(k): value(x, f"{path}.{k}") for k, x in v.items()}

        return conv_dict
    raise TypeError(f"no converter for {tp!r}")  # a model type the codec does not know: a bug of ours


def lazy_types(module: str, where: dict[str, str]) -> Callable[[str], type]:
    """A module's `__getattr__` for the types it names in hints only (`where`: name -> its model module): each is
    imported on first use and kept in `module`'s namespace, where type hints look names up."""

    def load(name: str) -> type:
        if name not in where:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"llmdiag.diagnose.model.{where[name]}"), name)
        setattr(sys.modules[module], name, value)
        return value

    return load


def type_hints(cls) -> dict[str, Any]:
    """typing.get_type_hints of a model dataclass, once the types its module imports on first use (the module's
    LAZY_TYPES, model/analysis.py) that its hints name are loaded."""
    for base in cls.__mro__:
        mod = sys.modules.get(base.__module__)
        if lazy := getattr(mod, "LAZY_TYPES", None):
            named = {w for a in base.__dict__.get("__annotations__", {}).values() for w in re.findall(r"\w+", str(a))}
            for name in named & lazy.keys():
                getattr(mod, name)
    return typing.get_type_hints(cls)


def _dataclass(cls) -> Converter:
    hints = type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("rest")]
    rest = next((f.name for f in dataclasses.fields(cls) if f.metadata.get("rest")), None)
    names = {f.name for f in dataclasses.fields(cls)}
    # (name, converter, required): a field without a default may be left out only where None fits it
    spec = [(f.name, converter(hints[f.name]),
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) for f in fields]

    def conv(v, path):
        if type(v) is not dict:
            raise Invalid(path, "is not an object")
        kw = {}
        for name, field_conv, required in spec:
            sub = f"{path}.{name}" if path else name
            if name in v:
                kw[name] = field_conv(v[name], sub)
            elif required:
                kw[name] = field_conv(None, sub)
        if rest:
            kw[rest] = {k: x for k, x in v.items() if k not in names}
        return cls(**kw)

    return conv


def build(cls, v, path: str = ""):
    """An instance of dataclass `cls` from the mapping `v`; fields left out take their defaults (or None)."""
    return converter(cls)(v, path)


# ---- writing --------------------------------------------------------------------------------------------
@cache
def record_fields(cls) -> tuple[tuple[str, ...], str | None]:
    fs = dataclasses.fields(cls)
    return tuple(f.name for f in fs if not f.metadata.get("rest")), next(
        (f.name for f in fs if f.metadata.get("rest")), None)


def as_dict(obj):
    """orjson's hook for dataclasses: their fields, with a `rest` field's keys merged into the parent."""
    if dataclasses.is_dataclass(obj):
        names, rest = record_fields(type(obj))
        d = {n: getattr(obj, n) for n in names}
        return {**d, **getattr(obj, rest)} if rest else d
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _mend(v):
    """Strings JSON cannot hold (lone surrogates: file names that are not UTF-8) made valid, and ints beyond
    64 bits made floats, recursively."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")
    if dataclasses.is_dataclass(v):
        return _mend(as_dict(v))
    if isinstance(v, dict):
        return {k: _mend(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_mend(x) for x in v]
    if type(v) is int and not -(2**63) <= v < 2**64:
        try:
            return float(v)
        except OverflowError:
            return None
    return v


@contextlib.contextmanager
def no_gc():
    """The cyclic collector paused while acyclic JSON trees are built: with 16,384 ranks' objects alive, each
    full collection it would run rescans them all (~40 % of packing a summary)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def to_json_dict(obj) -> tuple[dict, bool]:
    """(`obj` as plain JSON values, whether any value had to be mended to get there: strings JSON cannot hold,
    ints beyond int64 written as the nearest float; the writer never raises on a value from a trace)."""
    with no_gc():
        try:
            return orjson.loads(orjson.dumps(obj, default=as_dict, option=JSON_OPTIONS)), False
        except TypeError:
            return orjson.loads(orjson.dumps(_mend(obj), default=as_dict, option=JSON_OPTIONS)), True
