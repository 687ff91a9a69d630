"""Members of DeviceMesh groups the traces name without ranks, from the run's manifest (cross-rank pass).

A collective on `mesh_tp` whose trace gives neither `Process Group Ranks` nor a `pg_config` list is keyed on
its members as the manifest's mesh coordinates give them (rank/groups.py resolves everything the trace says)."""

from __future__ import annotations
from llmdiag.diagnose.metrics.rank.groups import Group





def mesh_members(man, ranks: list[int]) -> dict[tuple[int, str], tuple[int, ...]]:
    """(rank, dim) -> the rank's group along each mesh dim of the manifest (the ranks sharing every other
    coordinate, as DeviceMesh builds its groups), for `ranks`; O(world) per dim."""
    dims = [d for d in (getattr(man, "mesh_dim_names", None) or []) if isinstance(d, str)]
    if not dims or not man.ranks:
        return {}
    coords = {int(r): man.coords_of(int(r)) for r in man.ranks if str(r).isdigit()}
    if not coords or any(d not in c for d in dims for c in coords.values()):
        return {}  # a mesh dim without coordinates: its groups cannot be built
    out = {}
    for d in dims:
        rows: dict[tuple, list[int]] = {}
        for r, c in coords.items():
            rows.setdefault(tuple(c.get(x) for x in dims if x != d), []).append(r)
        for r in ranks:
            if r in coords:
                out[(r, d)] = tuple(sorted(rows[tuple(coords[r].get(x) for x in dims if x != d)]))
    return out



def with_mesh_members(keys: list[tuple[str, str]], rank: int, members: dict) -> list[tuple[str, str]] | None:
    """A rank's matching keys with the manifest's members added where a key is a mesh group's bare name
    (`mesh_tp`: no rank list in the args or pg_config); None where nothing changes or two keys would merge."""
    new = []
    for pg, kind in keys:
        m = members.get((rank, pg[5:])) if pg.startswith("mesh_") else None
        new.append((Group(pg, m).key if m else pg, kind))
    return new if new != keys and len(set(new)) == len(new) else None
