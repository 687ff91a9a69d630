"""Process groups on llmdiag's own 2-D and 3-D runs (issue 28 item 2): gloo spans carry no group args, yet
every collective gets its group and role, and no skew or straggler wait crosses a group.

The answer is read independently of the code under test: the manifest's mesh coordinates give each rank's
group along every mesh dim (the ranks sharing all other coordinates, as DeviceMesh builds them), and in
dp2tp2 the raw trace tells DDP's work from tensor parallelism's by the tensor reduced (DDP all-reduces flat
1-D gradient buckets; TP all-reduces activations of 3 dims).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.export.passthrough import PID_STRIDE
from llmdiag.diagnose.export.timeline import build_timeline
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.model.roles import pg_role

pytestmark = pytest.mark.slow
STEPS = ["--profile-steps", "0,1,2", "--steps", "4"]
ROLE = {"dp": "dp", "fsdp": "dp", "tp": "tp", "pp": "pp"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, llmdiag_run):
    base = tmp_path_factory.mktemp("groups")
    done = {}

    def get(workload: str) -> str:
        if workload not in done:
            out = str(base / workload)
            llmdiag_run(out, workload, *STEPS)
            done[workload] = out
        return done[workload]

    return get


def _peers(m: dict, r: int, dim: str) -> list[int]:
    c = m["ranks"][str(r)]
    return sorted(int(q) for q, x in m["ranks"].items()
                  if all(x[d] == c[d] for d in m["mesh_dim_names"] if d != dim))


def _want(m: dict, r: int) -> dict[str, str]:
    """group key -> mesh dim, for the rank's groups (the key format: `mesh_<dim>[r0, r1, ...]`)."""
    return {f"mesh_{d}[{', '.join(map(str, _peers(m, r, d)))}]": d for d in m["mesh_dim_names"]}


@pytest.mark.parametrize("workload", ["dp2tp2", "dp2tp2pp2", "fsdp2tp2"])
def test_own_runs_every_collective_has_its_group_and_role(runs, workload):
    out = runs(workload)
    m = json.loads(Path(out, "manifest.json").read_text())
    tracks = {}
    a = analyze_path(out, jobs=1, tracks=tracks)
    for r in range(m["world_size"]):
        o = run_job(RankJob(os.path.join(out, "traces", f"rank{r}.pt.trace.json.gz")))
        want = _want(m, r)
        keys = {k for k, _ in o.collectives.keys}
        assert keys and keys <= set(want), (r, keys, want)
        for s in o.metrics.comm_by_kind:
            d = s.pg.removeprefix("mesh_")
            assert d in m["mesh_dim_names"], (r, s.pg)
            assert pg_role(s.kind, s.pg, s.group_size, a.layout) == ROLE[d], (r, s.pg, s.kind)
    assert a.skew and a.skew.matched > 0
    groups = {key: d for r in range(m["world_size"]) for key, d in _want(m, r).items()}
    assert {c.pg for c in a.skew.by_collective} <= {_label(k) for k in groups}
    tl = build_timeline(a, tracks)
    waits = [e for e in tl["traceEvents"] if e.get("cat") == "llmdiag" and e["name"] == "straggler wait"]
    assert waits
    for e in waits:  # the collective it waited at is on a group this rank belongs to
        r = e["pid"] // PID_STRIDE
        assert e["args"]["collective"].split(" ", 1)[1] in {_label(k) for k in _want(m, r)}, (r, e["args"])


def _label(key: str) -> str:
    from llmdiag.diagnose.metrics.job.skew import group_label

    return group_label(key)


@pytest.mark.parametrize("workload", ["dp2tp2", "dp2tp2pp2"])
def test_own_ddp_buckets_are_the_dp_group_and_activations_the_tp_group(runs, workload):
    """Not only some group of the rank's: the right one. gloo's worker-thread ids interleave with the other
    ranks' (one host), and a pipeline's send/recv run on the caller's thread; neither may shift the groups."""
    out = runs(workload)
    m = json.loads(Path(out, "manifest.json").read_text())
    for r in range(m["world_size"]):
        path = os.path.join(out, "traces", f"rank{r}.pt.trace.json.gz")
        ev = json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"]
        flat = sum(1 for e in ev if e.get("name") == "gloo:all_reduce" and len(e["args"]["Input Dims"][0]) == 1
                   and _in_steps(e, ev))
        acts = sum(1 for e in ev if e.get("name") == "gloo:all_reduce" and len(e["args"]["Input Dims"][0]) == 3
                   and _in_steps(e, ev))
        o = run_job(RankJob(path))
        n = {k: int((o.collectives.key == i).sum()) for i, k in enumerate(o.collectives.keys)}
        dp = f"mesh_dp[{', '.join(map(str, _peers(m, r, 'dp')))}]"
        tp = f"mesh_tp[{', '.join(map(str, _peers(m, r, 'tp')))}]"
        assert flat > 0 and acts > 0
        assert n[(dp, "allreduce")] == flat and n[(tp, "allreduce")] == acts, (r, n, flat, acts)


_STEP = re.compile(r"^ProfilerStep#\d+$")


def _in_steps(e: dict, ev: list) -> bool:
    """Inside a ProfilerStep span (the analysis windows), as the analysis counts collectives."""
    steps = [(s["ts"], s["ts"] + s["dur"]) for s in ev if _STEP.match(str(s.get("name", ""))) and s.get("ph") == "X"]
    return any(lo <= e["ts"] < hi for lo, hi in steps)
