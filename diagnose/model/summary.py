"""The JSON edge of the model: `Analysis` <-> the versioned summary dict, and summary files on disk.

`from_dict` rebuilds every nested dataclass from its type hints and refuses what does not fit in one line
naming the field (`ranks.3.step_time_ms is not a number`), so consumers never meet a string where a
number belongs. Schema 1 summaries (evidence as a flat string) are upgraded on read.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import types
import typing
import zlib
from functools import cache

import orjson

from diagnose.errors import LlmdiagError
from diagnose.model.analysis import SCHEMA_VERSION, Analysis
from diagnose.model.manifest import Manifest

_WHAT = "a run folder, a trace folder, a trace file, or a summary JSON from `llmdiag analyze --json`"
JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


class _Bad(Exception):
    def __init__(self, path: str, what: str):
        super().__init__(f"{path or 'summary'} {what}")


# ---- dict -> dataclasses --------------------------------------------------------------------------------
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
            raise _Bad(path, "is missing (null)")
        errors = []
        for a in args:
            try:
                return _build(a, v, path)
            except _Bad as e:
                errors.append(e)
        raise errors[0]
    if tp is typing.Any:
        return v
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, v, path)
    if origin is list:
        if not isinstance(v, list):
            raise _Bad(path, "is not a list")
        (item,) = typing.get_args(tp) or (typing.Any,)
        return [_build(item, x, f"{path}.{i}") for i, x in enumerate(v)]
    if origin is dict or tp is dict:
        if not isinstance(v, dict):
            raise _Bad(path, "is not an object")
        args = typing.get_args(tp)
        if not args:
            return v
        return {str(k): _build(args[1], x, f"{path}.{k}") for k, x in v.items()}
    if tp is bool:
        if not isinstance(v, bool):
            raise _Bad(path, "is not true or false")
        return v
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            raise _Bad(path, "is not an integer")
        return v
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _Bad(path, "is not a number")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise _Bad(path, "is not a string")
        return v
    raise _Bad(path, f"has an unsupported type {tp!r}")  # pragma: no cover - a model type we forgot


def _dataclass(cls, v, path: str):
    if not isinstance(v, dict):
        raise _Bad(path, "is not an object")
    hints = _hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name == "extra" and cls is Manifest:
            continue
        sub = f"{path}.{f.name}" if path else f.name
        if f.name in v:
            kw[f.name] = _build(hints[f.name], v[f.name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            try:
                kw[f.name] = _build(hints[f.name], None, sub)  # an optional field may be left out
            except _Bad:
                raise _Bad(sub, "is missing") from None
    if cls is Manifest:
        names = {f.name for f in dataclasses.fields(cls)}
        kw["extra"] = {k: x for k, x in v.items() if k not in names}
    return cls(**kw)


def _upgrade_v1(data: dict) -> dict:
    """Schema 1 kept a finding's evidence as text beside its ranks, steps and metric."""
    out = []
    for f in data.get("findings") or []:
        if isinstance(f, dict) and not isinstance(f.get("evidence"), dict):
            f = dict(f)
            f["evidence"] = {"text": f.pop("evidence", ""), "metric": f.pop("metric", ""),
                             "ranks": f.pop("ranks", []), "steps": f.pop("steps", [])}
        out.append(f)
    return {**data, "findings": out, "schema_version": SCHEMA_VERSION}


def from_dict(data, where: str = "summary") -> Analysis:
    """An Analysis from a summary dict of schema 1 or 2; LlmdiagError naming the first field that does not fit."""
    if not isinstance(data, dict) or "ranks" not in data or "schema_version" not in data:
        raise LlmdiagError("not an llmdiag summary (no 'schema_version' and 'ranks')", where,
                           "write one with `llmdiag analyze RUN --json FILE`")
    v = data["schema_version"]
    if isinstance(v, bool) or not isinstance(v, int) or v > SCHEMA_VERSION or v < 1:
        raise LlmdiagError(f"summary schema_version {v!r} is not one this llmdiag reads (1 to {SCHEMA_VERSION})",
                           where, "upgrade llmdiag, or re-record the summary")
    if v == 1:
        data = _upgrade_v1(data)
    try:
        return _dataclass(Analysis, data, "")
    except _Bad as e:
        raise LlmdiagError(f"invalid summary: {e}", where) from None


def manifest_from_dict(data: dict, where: str) -> Manifest:
    try:
        return _dataclass(Manifest, data, "")
    except _Bad as e:
        raise LlmdiagError(f"invalid manifest: {e}", where) from None


# ---- dataclasses -> dict --------------------------------------------------------------------------------
def _plain(v):
    if isinstance(v, Manifest):
        d = {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v) if f.name != "extra"}
        return {**d, **v.extra}
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def to_dict(a: Analysis) -> dict:
    """The versioned summary: plain JSON types (numpy scalars become Python numbers)."""
    return orjson.loads(orjson.dumps(_plain(a), option=JSON_OPTIONS))


def slim(a: Analysis) -> dict:
    """The summary without its bulky timelines (memory curves, pipeline actions): what a baseline needs."""
    d = to_dict(a)
    for r in d["ranks"]:
        for m in r["memory"]:
            m["timeline"] = []
        r["pipeline_actions"] = []
    return d


# ---- files ----------------------------------------------------------------------------------------------
def read_summary(path: str) -> Analysis:
    """A summary written by `analyze --json` (plain or gzipped)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = orjson.loads(raw)
    except OSError as e:
        raise LlmdiagError(f"cannot read: {e.strerror or e}", path) from None
    except (orjson.JSONDecodeError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise LlmdiagError(f"not valid JSON: {e}", path, f"expected {_WHAT}") from None
    return from_dict(data, path)
