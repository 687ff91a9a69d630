"""Process groups and pipeline replicas, from the manifest or from each trace's `pg_config`.

DeviceMesh names its groups `mesh_tp`, `mesh_pp`, ...; `pg_config` is a list (or, in older traces, the
Python repr of one) of {pg_name, pg_desc, pg_size, ranks}.
"""

from __future__ import annotations

import ast

from diagnose.model.manifest import DIMS, Manifest


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


def _pipeline_desc(desc: str) -> bool:
    return "pp" in desc or desc == "PIPELINE_MODEL_PARALLEL_GROUP"


def slim_pg_config(dist: dict) -> list[dict]:
    """The `pg_config` a rank sends to the coordinator: every group's name, description and size, and the rank
    list of pipeline groups only (pipeline_groups reads them). PyTorch writes every group's full rank list in
    every trace: at 16,384 ranks that is ~18,000 numbers per rank, 300 million held by the coordinator."""
    return [{**{k: g[k] for k in ("pg_name", "pg_desc", "pg_size", "backend_config") if k in g},
             **({"ranks": g["ranks"]} if _pipeline_desc(str(g.get("pg_desc", ""))) and "ranks" in g else {})}
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


# Megatron-core's group_desc (megatron/core/parallel_state.py) for the groups that are one dimension each;
# the mixed ones (MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP_WITH_CP, TENSOR_AND_…) say nothing alone.
MEGATRON_DESC = {"TENSOR_MODEL_PARALLEL_GROUP": "tp", "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
                 "DATA_PARALLEL_GROUP": "dp", "CONTEXT_PARALLEL_GROUP": "cp"}


def layout_from_pg(dist: dict, world_size: int | None) -> dict | None:
    """{dp,fsdp,tp,pp,cp} sizes from DeviceMesh group names or Megatron's group descriptions, where present."""
    sizes = {}
    for g in pg_config(dist):
        desc = str(g.get("pg_desc", ""))
        if desc in MEGATRON_DESC and isinstance(g.get("pg_size"), int):
            sizes[MEGATRON_DESC[desc]] = g["pg_size"]
        elif desc.startswith("mesh_"):
            dim = desc[5:]
            if dim in DIMS and isinstance(g.get("pg_size"), int):
                sizes[dim] = g["pg_size"]
    if not sizes:
        return None
    out = {d: sizes.get(d, 1) for d in DIMS}
    prod = 1
    for v in out.values():
        prod *= v
    if world_size and prod != world_size and out["dp"] == 1:
        out["dp"] = max(1, world_size // prod)
    return out


def pipeline_groups(manifest: Manifest | None, dists: dict[int, dict], ranks_with_actions: list[int]) -> list[list[int]]:
    """Ranks of each pipeline replica in stage order."""
    if manifest and manifest.ranks:
        groups: dict[tuple, list[tuple[int, int]]] = {}
        for r in manifest.ranks:
            if not r.isdigit():
                continue
            c = manifest.coords_of(int(r))
            key = tuple((d, c.get(d, 0)) for d in DIMS if d != "pp")
            groups.setdefault(key, []).append((c.get("pp", 0), int(r)))
        out = [[r for _, r in sorted(g)] for g in groups.values()]
        if out:
            return out
    seen, out = set(), []
    for d in dists.values():
        for g in pg_config(d):
            desc = str(g.get("pg_desc", ""))
            if _pipeline_desc(desc) and isinstance(g.get("ranks"), list):
                key = tuple(g["ranks"])
                if key not in seen:
                    seen.add(key)
                    out.append(list(key))
    return out or [sorted(ranks_with_actions)]
