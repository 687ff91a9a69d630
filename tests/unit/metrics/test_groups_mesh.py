"""Process groups of 2-D and 3-D layouts (issue 28 item 2) on generated traces with exact answers.

A DeviceMesh of dims (dp, tp) or (dp, tp, pp) over ranks in row-major order: the group of rank r along a
dim is the ranks that differ from r in that dim only; every group of one dim shares its name (`mesh_tp`).
Each rank starts its n-th collective of a dim 10 µs × its rank after the nominal time, and a group's
members all end together: a collective's arrival skew is 10 µs × (highest − lowest rank of its group),
computed here from the layout, never by the code under test. Matched across groups of one name, the skew
would be larger (more ranks), and waits would pair ranks of different groups.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.export.passthrough import PID_STRIDE
from llmdiag.diagnose.export.timeline import build_timeline
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.model.roles import pg_role
from tests.gen.builder import MAIN_TID, TraceBuilder

ROLE = {"dp": "dp", "tp": "tp", "pp": "pp"}
STEP_US, SLOT_US, DELAY_US = 10_000, 1_000, 10


def _coords(r: int, dims: dict) -> dict:
    out, rest = {}, r
    for d, n in reversed(list(dims.items())):
        out[d], rest = rest % n, rest // n
    return out


def _rank(c: dict, dims: dict) -> int:
    r = 0
    for d, n in dims.items():
        r = r * n + c[d]
    return r


def group_of(r: int, d: str, dims: dict) -> list[int]:
    c = _coords(r, dims)
    return sorted(_rank({**c, d: k}, dims) for k in range(dims[d]))


def _pg_config(r: int, dims: dict) -> list[dict]:
    """The rank's own groups in creation order, names numbered as DeviceMesh creates them (every group of a
    dim, lowest rank first, one dim after the other)."""
    world = 1
    for n in dims.values():
        world *= n
    cfg = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}]
    name = 1
    for d in dims:
        for g in sorted({tuple(group_of(x, d, dims)) for x in range(world)}):
            if r in g:
                cfg.append({"pg_name": str(name), "pg_desc": f"mesh_{d}", "pg_size": len(g), "ranks": list(g)})
            name += 1
    return cfg


def _mesh(dims: dict, gloo: bool = False, args_ranks: bool = False, steps: int = 2, per_dim: int = 2,
          tid_gap: int = 7, no_pg_config: bool = False) -> list[TraceBuilder]:
    world = 1
    for n in dims.values():
        world *= n
    out = []
    for r in range(world):
        b = TraceBuilder(rank=r, world_size=world, backend="gloo" if gloo else "nccl", pg_config=_pg_config(r, dims))
        cfg = b.pg_config
        if no_pg_config:  # a trace that names its groups (mesh_tp) but nowhere lists their members
            b.pg_config = cfg[:1]
        for k in range(1, steps + 1):
            k0 = (k - 1) * STEP_US
            b.step(k, k0, k0 + STEP_US)
            slot = 0
            for j, d in itertools.product(range(per_dim), dims):
                g = group_of(r, d, dims)
                t0 = k0 + 100 + slot * SLOT_US
                slot += 1
                start, end = t0 + DELAY_US * r, t0 + DELAY_US * max(g) + 200
                pg = next(c for c in cfg if c["pg_desc"] == f"mesh_{d}")
                if gloo:  # the group's own worker threads: consecutive ids per group, a gap between groups
                    gi = list(dims).index(d) + 1
                    b.gloo("all_reduce", start, end - start, tid=1000 + tid_gap * gi + (j % 2), dims=[64])
                else:
                    b.nccl("allreduce", start, end - start, stream=20 + list(dims).index(d), launch_at=start - 5,
                           nelems=64, pg_name=pg["pg_name"], pg_desc="mesh_" + d,
                           pg_ranks=g if args_ranks else None)
        out.append(b)
    return out


def _write(tmp_path, builders):
    for b in builders:
        b.write(tmp_path / f"rank{b.rank}.json")


def _key(d: str, g: list[int]) -> str:
    return f"mesh_{d}[{', '.join(map(str, g))}]"


LAYOUTS = [{"dp": 2, "tp": 2}, {"dp": 2, "tp": 2, "pp": 2}, {"dp": 4, "tp": 2}]


@pytest.mark.parametrize("dims", LAYOUTS, ids=lambda d: "x".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("source", ["pg_config", "args", "gloo"])
def test_every_collective_carries_its_group_and_role(tmp_path, dims, source):
    _write(tmp_path, _mesh(dims, gloo=source == "gloo", args_ranks=source == "args"))
    world = len(list(tmp_path.glob("rank*.json")))
    layout = {**{k: 1 for k in ("dp", "fsdp", "tp", "pp", "cp")}, **dims}
    for r in range(world):
        o = run_job(RankJob(str(tmp_path / f"rank{r}.json")))
        assert o.error is None, o.error
        assert {k for k, _ in o.collectives.keys} == {_key(d, group_of(r, d, dims)) for d in dims}
        assert len(o.collectives) == 2 * 2 * len(dims)
        by = {s.pg: s for s in o.metrics.comm_by_kind}
        assert set(by) == {f"mesh_{d}" for d in dims}
        for d in dims:
            s = by[f"mesh_{d}"]
            assert s.group_size == dims[d] and pg_role(s.kind, s.pg, s.group_size, layout) == ROLE[d]


@pytest.mark.parametrize("dims", LAYOUTS[:2], ids=lambda d: "x".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("source", ["pg_config", "gloo"])
def test_skew_and_waits_stay_within_a_group(tmp_path, dims, source):
    _write(tmp_path, _mesh(dims, gloo=source == "gloo"))
    tracks = {}
    a = analyze_path(str(tmp_path), jobs=1, tracks=tracks)
    world = len(a.ranks)
    want = {}
    for d in dims:
        for g in {tuple(group_of(r, d, dims)) for r in range(world)}:
            want[_key(d, list(g))] = DELAY_US * (max(g) - min(g)) / 1000
    got = {c.pg: c for c in a.skew.by_collective}
    assert len(got) == len(want)
    for c in got.values():  # labels print rank lists as ranges: compare by skew and matched count
        assert c.matched == 2 * 2 and c.mean_skew_ms == pytest.approx(c.max_skew_ms)
    assert sorted(round(c.max_skew_ms, 6) for c in got.values()) == sorted(round(v, 6) for v in want.values())
    tl = build_timeline(a, tracks)
    waits = [e for e in tl["traceEvents"] if e.get("cat") == "llmdiag" and e["name"] == "straggler wait"]
    assert waits
    for e in waits:
        r = e["pid"] // PID_STRIDE
        d = re.match(r"allreduce mesh_(\w+)\[", e["args"]["collective"]).group(1)
        g = group_of(r, d, dims)
        # the wait runs from this rank's arrival to its group's last arrival: 10 µs per rank between them
        assert e["dur"] == pytest.approx(DELAY_US * (max(g) - r), abs=1e-3)  # µs


def test_gloo_threads_that_do_not_read_as_groups_leave_the_group_unknown(tmp_path):
    """The silent twin: each group's collectives all ran on one of its two worker threads, so the ids no
    longer show where one group's workers end: the groups stay unknown and nothing is matched across the
    two dims (no guessed skew)."""
    dims = {"dp": 2, "tp": 2}
    _write(tmp_path, _mesh(dims, gloo=True, per_dim=1))  # tids 1007 | 1014: one worker of each group
    o = run_job(RankJob(str(tmp_path / "rank0.json")))
    assert {k for k, _ in o.collectives.keys} == {""}
    a = analyze_path(str(tmp_path), jobs=1)
    assert not (a.skew and a.skew.matched)


def test_gloo_workers_as_consecutive_ids_still_read_two_by_two(tmp_path):
    """Ids that run on from one group to the next (no gap at all) are still two workers per group."""
    dims = {"dp": 2, "tp": 2}
    _write(tmp_path, _mesh(dims, gloo=True, tid_gap=2))  # tids 1002,1003 | 1004,1005
    for r in range(4):
        o = run_job(RankJob(str(tmp_path / f"rank{r}.json")))
        assert {k for k, _ in o.collectives.keys} == {_key(d, group_of(r, d, dims)) for d in dims}


def test_a_named_group_gives_the_role_and_expert_all_to_alls_on_dp_ranks_stay_ep():
    lay = {"dp": 2, "fsdp": 1, "tp": 2, "pp": 1, "cp": 1}
    assert pg_role("allreduce", "mesh_tp", 2, lay) == "tp" and pg_role("allreduce", "mesh_dp", 2, lay) == "dp"
    assert pg_role("allgather", "mesh_fsdp", 2, lay) == "dp" and pg_role("recv", "mesh_pp", 2, lay) == "pp"
    moe = {**lay, "tp": 1, "ep": 2}
    assert pg_role("alltoall", "mesh_dp", 2, moe) == "ep" and pg_role("allreduce", "mesh_dp", 2, moe) == "dp"
    assert pg_role("alltoall", "mesh_dp", 2, lay) == "dp"  # no expert parallelism: the name says it


def test_the_manifest_mesh_gives_members_where_the_trace_names_only_the_group(tmp_path):
    """NCCL kernels say `mesh_tp` / `mesh_dp` without rank lists, pg_config lists no mesh group: the run's
    manifest (mesh_dim_names and each rank's coordinates) gives the members, so each group is matched alone.
    Without the manifest the bare names would match the two tp groups together (the silent twin below)."""
    import json

    dims = {"dp": 2, "tp": 2}
    _write(tmp_path, _mesh(dims, no_pg_config=True))
    ranks = {str(r): {**{d: 0 for d in ("pp", "dp", "fsdp", "cp", "tp")}, **_coords(r, dims)} for r in range(4)}
    (tmp_path / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "workload": "dp2tp2", "world_size": 4, "mesh_dim_names": list(dims),
        "layout": {"dp": 2, "fsdp": 1, "tp": 2, "pp": 1, "cp": 1}, "ranks": ranks, "status": "ok"}))
    a = analyze_path(str(tmp_path), jobs=1)
    got = sorted(round(c.max_skew_ms, 6) for c in a.skew.by_collective)
    want = sorted(DELAY_US * (max(g) - min(g)) / 1000 for d in dims
                  for g in {tuple(group_of(r, d, dims)) for r in range(4)})
    assert got == [round(x, 6) for x in want] and all(c.matched == 4 for c in a.skew.by_collective)
    (tmp_path / "manifest.json").unlink()
    bare = analyze_path(str(tmp_path), jobs=1)
    assert {c.pg for c in bare.skew.by_collective} == {"mesh_dp", "mesh_tp"}  # what the trace alone can say


def test_a_large_groups_key_stays_short_and_unique():
    from llmdiag.diagnose.metrics.rank.groups import Group

    dp = Group("mesh_dp", tuple(range(0, 16384, 8)))
    assert dp.key == "mesh_dp[0-16376 step 8]"
    sq = [i * i for i in range(40)]  # no run of three: ranges() writes 20 pieces, then the count left
    odd = [Group("g", tuple(sq + [last])).key for last in (2000, 2001)]
    assert odd[0] != odd[1] and odd[0].split("#")[0] == odd[1].split("#")[0] and all(len(k) < 300 for k in odd)
    assert Group("mesh_tp", (0, 1)).key == "mesh_tp[0, 1]" and Group("x").key == "x"


PP3 = {"pp": 2, "dp": 2, "tp": 2}  # the own dp2tp2pp2 run's mesh: groups created pp, dp, tp


def _pipeline_rank(dp_tids: tuple, tp_tids: tuple, default_tids: tuple = ()) -> TraceBuilder:
    """Rank 0 of a gloo pp2 x dp2 x tp2 mesh as torch writes it: send/recv inline on the caller's thread, each
    group's collectives on its own worker threads, whose ids (the host's) other ranks' threads interleave."""
    b = TraceBuilder(rank=0, world_size=8, backend="gloo", pg_config=_pg_config(0, PP3))
    b.thread_name(MAIN_TID, "python")
    for k in range(2):
        k0 = k * STEP_US
        b.step(k + 1, k0, k0 + STEP_US)
        b.gloo("send", k0 + 100, 50, tid=MAIN_TID, dims=[1, 64, 128]).gloo("recv", k0 + 200, 50, tid=MAIN_TID)
        for j in range(4):
            b.gloo("all_reduce", k0 + 1000 + 300 * j, 100, tid=tp_tids[j % len(tp_tids)], dims=[1, 64, 128])
            b.gloo("all_reduce", k0 + 5000 + 300 * j, 100, tid=dp_tids[j % len(dp_tids)], dims=[4096])
            if default_tids:
                b.gloo("all_reduce", k0 + 8000 + 300 * j, 100, tid=default_tids[j % len(default_tids)], dims=[1])
    return b


def _by_dims(tmp_path, b: TraceBuilder) -> dict:
    """(group key, tensor rank) -> count: the test's answer is which thread ran which tensor."""
    from llmdiag.diagnose.io.loader import load_trace
    from llmdiag.diagnose.metrics.rank.classify import classify
    from llmdiag.diagnose.metrics.rank.groups import resolve

    b.write(tmp_path / "rank0.json")
    t = load_trace(str(tmp_path / "rank0.json"))
    classify(t, None)
    idx = np.flatnonzero(np.asarray([t.names[n].startswith("gloo:") for n in t.name]))
    got = resolve(t, idx)
    dims = {i: len(a.get("Input Dims", [[0]])[0]) if a.get("Input Dims") else 0 for i, a in
            ((i, t.comm_args.get(i, {})) for i in idx.tolist())}
    out: dict = {}
    for i in idx.tolist():
        k = (got[i].key, t.names[t.name[i]], dims[i])
        out[k] = out.get(k, 0) + 1
    return out


@pytest.mark.parametrize("dp_tids,tp_tids", [((782, 784), (796, 797)), ((779, 780), (794, 795)),
                                             ((824, 827), (834, 835)), ((11826, 11828), (11831, 11832)),
                                             ((11704, 11705), (11708, 11711)),
                                             ((26012, 26014), (26015, 26017))])
def test_gloo_worker_ids_interleaved_by_other_ranks_still_read_as_their_groups(tmp_path, dp_tids, tp_tids):
    """Thread ids as one host's 4 or 8 ranks left them (gaps of 1 to 3 inside a group, 1 to 18 between: the
    last, fsdp2tp2 under load, interleaved with another rank's workers and the next group one id on),
    with a pipeline's send/recv on the caller's thread: each span gets its own group, none is shifted onto
    the next (the pipeline group, whose workers stay idle, must not take the data-parallel spans)."""
    got = _by_dims(tmp_path, _pipeline_rank(dp_tids, tp_tids))
    dp, tp, pp = _key("dp", group_of(0, "dp", PP3)), _key("tp", group_of(0, "tp", PP3)), _key("pp", group_of(0, "pp", PP3))
    assert got == {(tp, "gloo:all_reduce", 3): 8, (dp, "gloo:all_reduce", 1): 8, (pp, "gloo:send", 3): 2,
                   (pp, "gloo:recv", 0): 2}


def test_gloo_workers_that_two_sets_of_groups_explain_alike_stay_unknown(tmp_path):
    """The silent twin: the default group works too, so three worker runs fit both (pipeline, dp, tp) and
    (default, dp, tp). dp and tp are the same in both and are named; the first run is either, so it stays
    unknown rather than guessed."""
    got = _by_dims(tmp_path, _pipeline_rank((782, 784), (796, 797), default_tids=(760, 761)))
    dp, tp, pp = _key("dp", group_of(0, "dp", PP3)), _key("tp", group_of(0, "tp", PP3)), _key("pp", group_of(0, "pp", PP3))
    assert got == {(tp, "gloo:all_reduce", 3): 8, (dp, "gloo:all_reduce", 1): 8, ("", "gloo:all_reduce", 1): 8,
                   (pp, "gloo:send", 3): 2, (pp, "gloo:recv", 0): 2}


def test_gloo_worker_runs_wider_than_the_hosts_other_ranks_explain_stay_unread():
    """The twin of the interleaved ids: two workers of one group 2 ids apart with the next group 1 on read as
    groups where 3 other ranks could have created threads between them, not where none could; 9 ids apart
    (more than 7 other ranks of a host) never, whatever the gaps between groups."""
    from llmdiag.diagnose.metrics.rank.groups import _cut

    assert _cut([26012, 26014, 26015, 26017], 2, slack=3) == [[26012, 26014], [26015, 26017]]
    assert _cut([26012, 26014, 26015, 26017], 2, slack=0) is None
    assert _cut([100, 109, 110, 111], 2, slack=7) is None
