"""Process groups in one rank's `distributedInfo.pg_config`: the list, its sizes, and a slim copy.

DeviceMesh names its groups `mesh_tp`, `mesh_pp`, ...; `pg_config` is a list (or, in older traces, the
Python repr of one) of {pg_name, pg_desc, pg_size, ranks}. The layout and pipeline replicas across ranks:
job/layout.py."""

from __future__ import annotations

import ast



def pg_config(dist: dict) -> list[dict]:
    raw = dist.get("pg_config")
    if isinstance(raw, str) and len(raw) < 4_000_000:
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
    if not isinstance(raw, list):
        return []
    return [g for g in raw if isinstance(g, dict)]


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


