"""Which parallel dimension a process group serves, from its name, its size and the layout.

Shared by the rules and every output so a group's role reads the same everywhere.
"""

from __future__ import annotations

import re

from llmdiag.diagnose.model.dims import DIMS, layout_text

P2P_KINDS = frozenset({"send", "recv", "sendrecv"})
DP_KINDS = ("allreduce", "reducescatter", "allgather")
_ROLE_TOKENS = {"tp": "tp", "tensor": "tp", "pp": "pp", "pipeline": "pp", "cp": "cp", "context": "cp",
                "ep": "ep", "expert": "ep", "dp": "dp", "fsdp": "dp", "shard": "dp", "replicate": "dp",
                "ddp": "dp", "hsdp": "dp", "data": "dp"}  # data: Megatron's DATA_PARALLEL_GROUP
_DIM_ROLE = {"dp": "dp", "fsdp": "dp", "tp": "tp", "pp": "pp", "cp": "cp"}


def pg_role(kind: str, pg: str, group_size: int | None, layout: dict | None) -> str:
    """dp, tp, pp, cp, ep or "?".

    DeviceMesh names groups `mesh_tp`, `mesh_dp_shard`, ...; otherwise (gloo spans carry no group) a
    collective of a layout with one non-pipeline dimension belongs to it, else the group size is matched
    against the layout. With neither a name nor a layout the role is unknown: the assembly writes a layout
    only from evidence (manifest, DeviceMesh/Megatron group names, DDP/FSDP ops seen in the trace). send/recv are pipeline traffic only where the layout has a pipeline (known or
    inferred from the send/recv chain): all_to_all on old NCCL, ring attention and MoE also send point to
    point.
    """
    ep = int((layout or {}).get("ep") or 1) > 1
    for tok in re.split(r"[^a-z0-9]+", (pg or "").lower()):
        if tok in _ROLE_TOKENS:
            role = _ROLE_TOKENS[tok]
            # expert parallelism carved from the data-parallel ranks: its all-to-alls run on a dp-named group
            return "ep" if kind == "alltoall" and ep and role == "dp" else role
    if kind == "alltoall" and ep:
        return "ep"  # with expert parallelism the all-to-alls are its dispatch/combine (gloo spans name no group)
    if kind == "alltoall":
        return "?"  # unnamed all-to-alls: embedding sharding (TorchRec), Ulysses CP or MoE, never data parallel
    lay = {k: int((layout or {}).get(k) or 1) for k in DIMS}
    if kind in P2P_KINDS:
        return "pp" if lay["pp"] > 1 else "?"
    active = {_DIM_ROLE[k] for k, v in lay.items() if v > 1} - {"pp"}  # pipelines talk point-to-point only
    if len(active) == 1:
        return active.pop()
    if group_size and group_size > 1:
        hits = {_DIM_ROLE[k] for k, v in lay.items() if v == group_size} - {"pp"}
        if lay["dp"] * lay["fsdp"] == group_size:
            hits.add("dp")
        if len(hits) == 1:
            return hits.pop()
    if lay["pp"] > 1 and group_size == lay["pp"]:  # a group across the pipeline's stages (grad norm, embeddings)
        return "pp"
    return "?"  # no name, no layout: an all-reduce on the default group may be DP, TP or a grad-norm sum


_ROLE_WORD = {"dp": "data-parallel", "tp": "tensor-parallel", "pp": "pipeline-parallel", "cp": "context-parallel",
              "ep": "expert-parallel"}


def role_note(groups: dict[tuple[str, str], str], layout: dict | None) -> str:
    """What a finding says about its groups' roles: {(kind, pg): role} as `pg_role` resolved them over the layout
    every table prints, so the words and the tables never disagree. Only a group whose role stays "?" is said
    to be unnamed (and no layout setting inferred for it)."""
    by_pg: dict[tuple[str, str], list[str]] = {}
    for (kind, pg), role in sorted(groups.items()):
        by_pg.setdefault((pg, role), []).append(kind)
    known, unknown = [], []
    for (pg, role), kinds in by_pg.items():
        name = f"pg {pg!r}" if pg else f"the {', '.join(kinds)} (no group in the trace)"
        if role == "?":
            unknown.append(f"{name} ({', '.join(kinds)})" if pg else name)
        else:
            how = f"layout {layout_text(layout)}" if layout else "from its name"
            known.append(f"{name} is {_ROLE_WORD.get(role, role)} ({role}, {how})")
    parts = known + ([f"the role of {', '.join(unknown)} is not named in the trace, so no parallel-layout setting "
                      "is inferred for it"] if unknown else [])
    return "; ".join(parts)
