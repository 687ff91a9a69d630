"""Typed dataclasses <-> plain JSON values, driven by the dataclasses' type hints.

`build` refuses a value that does not fit its field with `Invalid` naming the field's dotted path, so a
summary with a string where a number belongs is one clear error at the edge, not a crash inside a rule.
A field with `metadata={"rest": True}` collects the keys the class does not name (and `plain` merges them
back), so records written by other versions round-trip.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache

import orjson


class Invalid(Exception):
    def __init__(self, path: str, what: str):
        super().__init__(f"{path or 'the document'} {what}")


@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _build(tp, v, path: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if v is None:
            if len(args) < len(typing.get_args(tp)):
                return None
            raise Invalid(path, "is missing")
        errors = []
        for a in args:
            try:
                return _build(a, v, path)
            except Invalid as e:
                errors.append(e)
        raise errors[0]
    if tp is typing.Any:
        return v
    if v is None:  # null where the type has no None: the value is absent, whatever type it should have had
        raise Invalid(path, "is missing")
    if dataclasses.is_dataclass(tp):
        return build(tp, v, path)
    if origin is list:
        if not isinstance(v, list):
            raise Invalid(path, "is not a list")
        (item,) = typing.get_args(tp) or (typing.Any,)
        return [_build(item, x, f"{path}.{i}") for i, x in enumerate(v)]
    if origin is dict or tp is dict:
        if not isinstance(v, dict):
            raise Invalid(path, "is not an object")
        args = typing.get_args(tp)
        if not args:
            return v
        return {str(k): _build(args[1], x, f"{path}.{k}") for k, x in v.items()}
    if tp is bool:
        if not isinstance(v, bool):
            raise Invalid(path, "is not true or false")
        return v
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise Invalid(path, "is not an integer")
        return v
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise Invalid(path, "is not a number")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise Invalid(path, "is not a string")
        return v
    raise Invalid(path, f"has an unsupported type {tp!r}")  # pragma: no cover - a model type we forgot


def build(cls, v, path: str = ""):
    """An instance of dataclass `cls` from the mapping `v`; fields left out take their defaults (or None)."""
    if not isinstance(v, dict):
        raise Invalid(path, "is not an object")
    hints = _hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("rest"):
            continue
        sub = f"{path}.{f.name}" if path else f.name
        if f.name in v:
            kw[f.name] = _build(hints[f.name], v[f.name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            try:
                kw[f.name] = _build(hints[f.name], None, sub)  # an optional field may be left out
            except Invalid:
                raise Invalid(sub, "is missing") from None
    rest = [f.name for f in dataclasses.fields(cls) if f.metadata.get("rest")]
    if rest:
        names = {f.name for f in dataclasses.fields(cls)}
        kw[rest[0]] = {k: x for k, x in v.items() if k not in names}
    return cls(**kw)


def plain(v):
    """Dataclasses -> dicts and lists, recursively; a `rest` field's keys are merged back into its parent."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        out, rest = {}, {}
        for f in dataclasses.fields(v):
            if f.metadata.get("rest"):
                rest = getattr(v, f.name)
            else:
                out[f.name] = plain(getattr(v, f.name))
        return {**out, **rest}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


_JSON = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _mend(v):
    """Strings JSON cannot hold (lone surrogates: file names that are not UTF-8) made valid, recursively."""
    if isinstance(v, str):
        try:
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")
    if isinstance(v, dict):
        return {k: _mend(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_mend(x) for x in v]
    return v


def to_json_dict(obj) -> tuple[dict, bool]:
    """(`obj` as plain JSON values, whether any string had to be mended to get there)."""
    p = plain(obj)
    try:
        return orjson.loads(orjson.dumps(p, option=_JSON)), False
    except TypeError:
        return orjson.loads(orjson.dumps(_mend(p), option=_JSON)), True
