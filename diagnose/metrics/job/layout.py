"""The parallel layout and pipeline replicas across ranks, from the manifest or the traces' `pg_config`.

Sizes {dp,fsdp,tp,pp,cp} from DeviceMesh group names (`mesh_tp`, ...) or Megatron's group descriptions;
pipeline replicas from the manifest's mesh, else from the pipeline groups every rank lists."""

from __future__ import annotations


from typing import TYPE_CHECKING

from llmdiag.diagnose.model.dims import DIMS
from llmdiag.diagnose.metrics.rank.layout import pg_config, pipeline_desc

if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest


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
            if pipeline_desc(desc) and isinstance(g.get("ranks"), list):
                key = tuple(g["ranks"])
                if key not in seen:
                    seen.add(key)
                    out.append(list(key))
    return out or [sorted(ranks_with_actions)]
