"""Process groups in one rank's `distributedInfo.pg_config`: the list, its sizes, and a slim copy.

DeviceMesh names its groups `mesh_tp`, `mesh_pp`, ...; `pg_config` is a list (or, in older traces, the
Python repr of one) of {pg_name, pg_desc, pg_size, ranks}. The layout and pipeline replicas across ranks:
job/layout.py."""

from __future__ import annotations

import ast

_LAST_TEXT: list = ["", []]  # the last pg_config text read and its groups


def pg_config(dist: dict) -> list[dict]:
    """The groups of `dist["pg_config"]`. Older traces write it as a Python repr, holding every group's
    full rank list (megabytes at 16k ranks): the last text's parse is kept, keyed by the exact text, since
    one rank's analysis reads it three times (groups, sizes, the slim copy). The groups are shared: read only."""
    raw = dist.get("pg_config")
    if isinstance(raw, str) and len(raw) < 4_000_000:
        if raw is not _LAST_TEXT[0] and raw != _LAST_TEXT[0]:
            _LAST_TEXT[:] = [raw, _groups_of_text(raw)]
        return list(_LAST_TEXT[1])
    if not isinstance(raw, list):
        return []
    return [g for g in raw if isinstance(g, dict)]


def _groups_of_text(raw: str) -> list[dict]:
    try:
        v = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    return [g for g in v if isinstance(g, dict)] if isinstance(v, list) else []


def pipeline_desc(desc: str) -> bool:
    return "pp" in desc or desc == "PIPELINE_MODEL_PARALLEL_GROUP"


def slim_pg_config(dist: dict) -> list[dict]:
    """The `pg_config` a rank sends to the coordinator: every group's name, description and size, and the rank
    list of pipeline groups only (pipeline_groups reads them). PyTorch writes every group's full rank list in
    every trace: at 16,384 ranks that is ~18,000 numbers per rank, 300 million held by the coordinator."""
    return [{**{k: g[k] for k in ("pg_name", "pg_desc", "pg_size", "backend_config") if k in g},
             **({"ranks": g["ranks"]} if pipeline_desc(str(g.get("pg_desc", ""))) and "ranks" in g else {})}
            for g in pg_config(dist)]


def pg_sizes(dist: dict) -> dict[str, int]:
    """Group name and description -> size, for groups whose size the kernels do not record."""
    out = {}
    for g in pg_config(dist):
        size = g.get("pg_size")
        if isinstance(size, int):
            for k in ("pg_name", "pg_desc"):
                if g.get(k):
                    out[str(g[k])] = size
    return out


