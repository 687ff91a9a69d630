"""`analyze --timeline`: the merged, annotated Chrome trace is valid trace JSON, its added intervals are the
metrics' own (they sum to each step's exposed communication and idle, to each stage's window − busy, and the
earliest rank's wait at a collective is its arrival skew; the idle intervals of each cause sum to the idle
attribution's own total for it, to the ns), clocks are aligned as the skew analysis aligns
them, and its size is bounded by the stated cap."""

from __future__ import annotations

import json
from collections import defaultdict

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.export.passthrough import PID_STRIDE
from llmdiag.diagnose.export.timeline import build_timeline
from llmdiag.diagnose.export.tracks import JOB_PATH_PID
from llmdiag.diagnose.metrics.rank.idle import CAUSES
from tests.gen.builder import TraceBuilder, gpu_rank
from tests.unit.metrics.test_metrics_exact import ONE_F_ONE_B_P2, _one_f_one_b_ranks

approx = pytest.approx


def _analyse(tmp_path, builders, **kw):
    """The analysis and the timeline intervals of its own pass."""
    d = tmp_path / "run"
    for b in builders:
        b.write(d / f"rank{b.rank}.json")
    tracks = {}
    return analyze_path(str(d), jobs=1, tracks=tracks, **kw), tracks


def _track(tl, rank, name):
    """A track's intervals; "idle" takes the idle track whole, whatever the cause in each interval's name."""
    return [e for e in tl["traceEvents"] if e.get("ph") == "X" and e["cat"] == "llmdiag" and e["pid"] == rank * PID_STRIDE
            and (e["name"] == name or e["name"].startswith(f"{name}: "))]


def _uneven(rank: int, world: int = 4, **kw) -> TraceBuilder:
    """Per step a compute kernel whose length depends on the rank, then an allreduce all ranks end together:
    exposed comm, idle and arrival skew all differ by rank (hand-computable)."""
    b = TraceBuilder(rank=rank, world_size=world, **kw)
    for k in range(1, 4):
        k0 = (k - 1) * 2000
        b.step(k, k0, k0 + 2000)
        c = 500 + 100 * rank + 10 * k
        b.kernel("void gemm_kernel<float>()", k0 + 100, c, stream=7, launch_at=k0 + 10)
        b.kernel("void gemm_kernel<float>()", k0 + 1500, 200, stream=7, launch_at=k0 + 12)
        b.nccl("allreduce", k0 + 100 + c - 50, 1300 - c, stream=20, launch_at=k0 + 11, nelems=1 << 16,
               group_size=world, pg_ranks=list(range(world)))
    return b


def test_added_intervals_equal_the_step_breakdown(tmp_path):
    a, tracks = _analyse(tmp_path, [_uneven(r) for r in range(4)])
    tl = json.loads(json.dumps(build_timeline(a, tracks)))  # plain JSON through and through
    for r in a.ranks:
        for name, attr in (("exposed comm", "exposed_comm_ms"), ("idle", "idle_ms")):
            per_step = defaultdict(float)
            for e in _track(tl, r.rank, name):
                assert e["dur"] > 0
                per_step[e["args"]["step"]] += e["dur"] / 1000
            for st in r.steps:
                assert per_step.get(st.step, 0.0) == approx(getattr(st, attr), abs=1e-6), (r.rank, name, st.step)
        assert any(_track(tl, r.rank, "exposed comm")) and any(_track(tl, r.rank, "idle"))


def test_straggler_waits_are_the_arrival_skew_on_the_aligned_clock(tmp_path):
    """Ranks 2 and 3 sit on another host whose clock reads 5 ms ahead: aligned, the collectives end together
    again, and per collective the longest wait (the earliest rank's) is its skew."""
    bs = [_uneven(r, host_name="h0") for r in range(2)]
    bs += [_uneven(r, host_name="h1", base_us=1_700_000_000_000 + 5000) for r in (2, 3)]
    a, tracks = _analyse(tmp_path, bs)
    assert a.skew and a.skew.host_shift_ms["h1"] == approx(-5.0)
    tl = build_timeline(a, tracks)
    ends = defaultdict(set)
    for e in tl["traceEvents"]:
        if e.get("ph") == "X" and e["name"].startswith("ncclKernel_AllReduce"):
            ends[round(e["ts"] // 2000)].add(round(e["ts"] + e["dur"], 3))
    assert ends and all(len(v) == 1 for v in ends.values()), ends  # one end per collective once aligned
    waits = defaultdict(list)
    for r in a.ranks:
        for e in _track(tl, r.rank, "straggler wait"):
            waits[round(e["ts"] + e["dur"], 3)].append(e["dur"] / 1000)
    (c,) = a.skew.by_collective
    assert len(waits) == c.matched
    assert sum(max(w) for w in waits.values()) / len(waits) == approx(c.mean_skew_ms, abs=1e-6)
    assert max(max(w) for w in waits.values()) == approx(c.max_skew_ms, abs=1e-6)


def test_pipeline_bubble_per_stage_is_window_minus_busy(tmp_path):
    a, tracks = _analyse(tmp_path, _one_f_one_b_ranks())
    tl = build_timeline(a, tracks)
    p = a.pipeline
    for sb in p.stage_bubbles:
        gaps = sum(e["dur"] for e in _track(tl, sb.rank, "pipeline bubble")) / 1000
        assert gaps == approx(p.window_ms - sb.busy_ms, abs=1e-6)
        assert 1 - sb.busy_ms / (sb.busy_ms + gaps) == approx(sb.measured)
    assert len(ONE_F_ONE_B_P2) == len(p.stage_bubbles)


def test_findings_are_instants_and_the_size_is_capped(tmp_path):
    a, tracks = _analyse(tmp_path, [_uneven(r) for r in range(4)])
    assert a.findings, "the planted exposed all-reduce should fire a rule"
    tl = build_timeline(a, tracks, max_events=8)
    inst = [e for e in tl["traceEvents"] if e.get("ph") == "i"]
    assert [e["args"]["rule"] for e in inst] == [f.id for f in a.findings]
    own = [e for e in tl["traceEvents"] if e.get("ph") == "X" and not e["cat"].startswith("llmdiag")]
    assert len(own) <= 8 and tl["llmdiag"]["events_dropped"] > 0
    full = build_timeline(a, tracks)
    assert full["llmdiag"]["events_dropped"] == 0 and full["llmdiag"]["track_intervals_dropped"] == 0
    assert tl["llmdiag"]["track_cap_per_rank"] == 1000  # the floor: the tracks stay whole at this size
    # the cap keeps the longest events: the step annotations survive
    assert all(e["dur"] >= 1900 for e in own)
    sub = build_timeline(a, tracks, ranks=[1, 3])
    assert {e["pid"] // PID_STRIDE for e in sub["traceEvents"] if e.get("ph") == "X" and e["pid"] != JOB_PATH_PID} \
        == {1, 3}
    assert {e["args"]["rank"] for e in sub["traceEvents"] if e.get("pid") == JOB_PATH_PID and e["ph"] == "X"} <= {1, 3}
    cut = tl["llmdiag"]["ranks"]["0"]["complete_events_cut"]  # what was cut is said in the trace
    assert cut > 0 and any(e["name"] == "process_labels" and e["pid"] == 0 and f"{cut} complete events cut"
                           in e["args"]["labels"] for e in tl["traceEvents"])


def test_cli_writes_the_timeline_and_rejects_a_bad_rank_list(tmp_path):
    d = tmp_path / "run"
    for r in range(2):
        gpu_rank(r).write(d / f"rank{r}.json")
    out = tmp_path / "t" / "timeline.json"
    res = CliRunner().invoke(main, ["analyze", str(d), "-q", "--no-report", "--json", str(tmp_path / "s.json"),
                                    "--timeline", str(out), "--ranks", "1"])
    assert res.exit_code == 0, res.output
    assert f"timeline: {out}" in res.output
    tl = json.loads(out.read_text())
    assert {e["pid"] // PID_STRIDE for e in tl["traceEvents"] if e.get("ph") == "X" and e["pid"] != JOB_PATH_PID} == {1}
    for bad in ("1-0", "x", "7"):
        res = CliRunner().invoke(main, ["analyze", str(d), "-q", "--no-report", "--json", str(tmp_path / "s.json"),
                                        "--timeline", str(out), "--ranks", bad])
        assert res.exit_code == 2 and "Traceback" not in res.output, (bad, res.output)


def test_a_track_past_its_cap_keeps_its_longest_intervals_in_time_order():
    from llmdiag.diagnose.export.tracks import track_events
    from llmdiag.diagnose.metrics.rank.track_intervals import RankTracks

    tr = RankTracks(idle=[(0, 5, 1), (10, 40, 1), (50, 52, 1), (60, 100, 1), (200, 210, 2)])
    ev, dropped = track_events(3, tr, 1000, cap=3)
    xs = [(e["ts"], e["dur"]) for e in ev if e["ph"] == "X"]
    assert dropped == 2 and xs == [(1.01, 0.03), (1.06, 0.04), (1.2, 0.01)]


@pytest.mark.real
def test_real_gpu_pair_tracks_match_its_breakdown(tmp_path):
    """HTA's sampled_pair (two real A100 ranks): per step the exposed-comm and idle intervals sum to the
    metrics' numbers, the file is valid JSON, and the added tracks sit inside each rank's own events' span."""
    import os

    src = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "fixtures", "real", "hta", "sampled_pair")
    tracks = {}
    a = analyze_path(src, jobs=1, tracks=tracks)
    tl = json.loads(json.dumps(build_timeline(a, tracks)))
    for r in a.ranks:
        own = [e for e in tl["traceEvents"] if e.get("ph") == "X" and e["pid"] // PID_STRIDE == r.rank
               and e["cat"] != "llmdiag"]
        lo, hi = min(e["ts"] for e in own), max(e["ts"] + e["dur"] for e in own)
        for name, attr in (("exposed comm", "exposed_comm_ms"), ("idle", "idle_ms")):
            per_step = defaultdict(float)
            for e in _track(tl, r.rank, name):
                assert lo - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-3
                per_step[e["args"]["step"]] += e["dur"] / 1000
            for st in r.steps:
                assert per_step.get(st.step, 0.0) == approx(getattr(st, attr), abs=1e-6), (r.rank, name, st.step)
        per_cause = defaultdict(float)
        for e in _track(tl, r.rank, "idle"):
            per_cause[e["args"]["cause"]] += e["dur"] / 1000 / len(r.steps)
        assert per_cause and set(per_cause) <= set(CAUSES)
        for cause in CAUSES:
            assert per_cause[cause] == approx(getattr(r.idle, f"{cause}_ms"), abs=1e-6), (r.rank, cause)


def test_a_lone_surrogate_in_a_trace_name_is_written_not_raised(tmp_path):
    from llmdiag.diagnose.export.timeline import write_timeline

    b = gpu_rank(0, world_size=1)
    b.kernel("bad\ud800name", 950, 10, stream=7, launch_at=940)
    a, tracks = _analyse(tmp_path, [b])
    out = write_timeline(a, str(tmp_path / "t.json"), tracks)
    names = {e.get("name") for e in json.loads(open(out, encoding="utf-8").read())["traceEvents"]}
    assert any(n and n.startswith("bad") for n in names)


def _idle_causes_rank() -> TraceBuilder:
    """Every cause placed by hand. Steps 1 and 2 (k0 = 0, 1500; span [k0, k0+1500]): test_idle's gaps (aten::item
    [200, 300] and hipFree [300, 450] runtime, [500, 600] host-bound, [650, 700] queued), then gaps [1000, 1100]
    (DataLoader 80, a launch 1, unattributed 19), [1150, 1250] (barrier 60, a launch 1, unattributed 39) and
    [1300, 1400] (a launch 1, unattributed 99). Step 3 [3000, 3400]: host work only, so all capture edge."""
    from tests.unit.metrics.test_idle import _gpu_step

    b = TraceBuilder(rank=0, world_size=1)
    for k in (1, 2):
        k0 = (k - 1) * 1500
        _gpu_step(b, k, k0)  # its ProfilerStep span [k0, k0+1000] merges with the longer one here
        b.step(k, k0, k0 + 1500)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", k0 + 1000, 80)
        b.kernel("gemm_e", k0 + 1100, 50, launch_at=k0 + 1090)
        b.cpu_op("c10d::barrier", k0 + 1150, 60)
        b.kernel("gemm_f", k0 + 1250, 50, launch_at=k0 + 1240)
        b.kernel("gemm_g", k0 + 1400, 50, launch_at=k0 + 1300)
    b.step(3, 3000, 3400)
    b.cpu_op("aten::add", 3050, 100)
    return b


def test_idle_track_is_split_by_cause_and_sums_to_the_idle_attribution(tmp_path):
    """Per cause (and per op of a blocking runtime call) the exported idle intervals sum, to the ns, to the
    idle attribution's own total; their union is each step's window − busy (the idle track before the split)."""
    import numpy as np

    from llmdiag.diagnose.metrics.rank.track_intervals import step_tracks
    from llmdiag.diagnose.io.loader import load_trace
    from llmdiag.diagnose.metrics.rank import intervals as iv
    from llmdiag.diagnose.metrics.rank.classify import classify
    from llmdiag.diagnose.metrics.rank.overlap import timeline
    from llmdiag.diagnose.metrics.rank.steps import windows
    from llmdiag.diagnose.model.format import NS_PER_MS

    a, tracks = _analyse(tmp_path, [_idle_causes_rank()])
    (r,) = a.ranks
    i = r.idle
    tl = json.loads(json.dumps(build_timeline(a, tracks)))
    ev = _track(tl, r.rank, "idle")
    by_cause, by_op = defaultdict(int), defaultdict(int)
    for e in ev:
        cause, op = e["args"]["cause"], e["args"].get("op")
        assert e["name"] == (f"idle: {cause} {op}" if op else f"idle: {cause}")
        assert (op is not None) == (cause == "runtime")
        ns = round(e["dur"] * 1000)
        by_cause[cause] += ns
        by_op[op] += ns if op else 0
    n = len(r.steps) * NS_PER_MS
    assert set(by_cause) == set(CAUSES)  # the trace plants every cause
    for cause in CAUSES:
        assert by_cause[cause] / n == getattr(i, f"{cause}_ms"), cause  # exactly: one computation
    assert {k: v / n for k, v in by_op.items() if k} == i.runtime_ops
    assert sum(by_cause.values()) / n == i.idle_ms
    # by hand, ns over the 3 steps
    assert dict(by_cause) == {"runtime": 500_000, "host_bound": 206_000, "queued": 100_000, "dataloader": 160_000,
                              "comm_wait": 120_000, "unattributed": 314_000, "edge": 400_000}
    assert {k: v for k, v in by_op.items() if k} == {"aten::item": 200_000, "hipFree": 300_000}
    # their union is the idle track as it was: each window minus every device event (overlap.timeline)
    t = load_trace(r.file)
    classify(t)
    wins, _ = windows(t)
    tl_dev = timeline(t)
    split = step_tracks(t, wins).idle
    for w in wins:
        whole = (np.array([w.start], np.int64), np.array([w.end], np.int64))
        want = iv.difference(whole, iv.union_of(tl_dev.compute, tl_dev.comm, tl_dev.other))
        mine = [x for x in split if x[2] == w.step]
        got = iv.union(np.array([x[0] for x in mine], np.int64), np.array([x[1] for x in mine], np.int64))
        assert sum(x[1] - x[0] for x in mine) == iv.total(got)  # the causes never overlap
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), w.step


# ---- the user's own trace, whole (issue 28 item 1) -----------------------------------------------------------
PHASES = set("XBEbenSTFstfiIICMPONDcRrv()")
REAL = __import__("pathlib").Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"


def check_chrome_trace(tl: dict) -> None:
    """The Chrome JSON trace format (the Trace Event Format document) as chrome://tracing and Perfetto's JSON
    importer read it: strict JSON, an object with a `traceEvents` array of objects, each with a known `ph`;
    timestamps finite numbers; complete events with a duration; flows and async events with an id; metadata
    with args; and processes of one rank only (pid // PID_STRIDE), llmdiag's named "rank R: ...".
    (No trace processor can be installed from a registry here: the PyPI `perfetto` package downloads its
    binary at run time.)"""
    json.loads(json.dumps(tl, allow_nan=False))  # strict: no NaN / Infinity anywhere
    assert isinstance(tl["traceEvents"], list) and tl["displayTimeUnit"] in ("ms", "ns")
    names = {}
    for e in tl["traceEvents"]:
        assert type(e) is dict and e.get("ph") in PHASES, e
        ph = e["ph"]
        if ph != "M" or "ts" in e:
            assert type(e["ts"]) in (int, float), e
        if ph == "X":
            assert type(e.get("dur", 0)) in (int, float) and e.get("dur", 0) >= 0, e
        if ph in "stfbeSTFn" and ph != "n":
            assert "id" in e or "id2" in e or "bind_id" in e, e
        if ph == "M":
            assert type(e.get("args")) is dict, e
            if e["name"] == "process_name":
                names.setdefault(e["pid"], set()).add(e["args"]["name"])
    for pid, ns in names.items():
        if pid >= 0:
            assert all(n.startswith(f"rank {pid // PID_STRIDE}") for n in ns), (pid, ns)


def _source(path) -> list[dict]:
    import gzip

    raw = __import__("pathlib").Path(path).read_bytes()
    while raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    d = orjson.loads(raw)
    return d["traceEvents"] if isinstance(d, dict) else d


def _of_rank(tl, rank) -> list[dict]:
    """The rank's own events: its processes but llmdiag's (pid rank * PID_STRIDE)."""
    return [e for e in tl["traceEvents"] if isinstance(e.get("pid"), int) and e["pid"] > 0
            and e["pid"] // PID_STRIDE == rank and e["pid"] % PID_STRIDE]


def _flows(rank_builder_ids):
    """A rank with a launch→kernel flow pair, an unpaired flow end, an instant, a counter and an async pair,
    all with ids every rank repeats (so the merge must tell them apart)."""
    b = gpu_rank(rank_builder_ids)
    b.raw({"ph": "s", "id": 7, "pid": b.pid, "tid": 1, "ts": b._abs(105), "cat": "ac2g", "name": "ac2g"})
    b.raw({"ph": "f", "id": 7, "pid": b.device, "tid": 7, "ts": b._abs(110), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    b.raw({"ph": "f", "id": 9, "pid": b.pid, "tid": 1, "ts": b._abs(130), "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"})
    b.raw({"ph": "i", "s": "t", "pid": b.pid, "tid": 1, "ts": b._abs(140), "name": "mark", "args": {"k": [1, "x"]}})
    b.raw({"ph": "C", "pid": b.pid, "ts": b._abs(150), "name": "mem", "args": {"bytes": 123}})
    b.raw({"ph": "b", "id": "0x1", "pid": b.pid, "tid": 1, "ts": b._abs(160), "cat": "a", "name": "async"})
    b.raw({"ph": "e", "id": "0x1", "pid": b.pid, "tid": 1, "ts": b._abs(170), "cat": "a", "name": "async"})
    return b


def test_source_events_pass_through_whole_with_flow_ids_unique_per_rank(tmp_path):
    a, tracks = _analyse(tmp_path, [_flows(r) for r in range(2)])
    tl = build_timeline(a, tracks)
    check_chrome_trace(tl)
    ids = {}
    for r in a.ranks:
        src = [e for e in _source(r.file)]
        out = _of_rank(tl, r.rank)
        def keys(evs):  # every event but the process names and sort places the merge rewrites or adds
            return sorted((e.get("ph"), e.get("name"), e.get("cat"), orjson.dumps(e.get("args"), option=orjson.OPT_SORT_KEYS))
                          for e in evs if not (e["ph"] == "M" and e["name"] in ("process_name", "process_sort_index")))

        assert keys(out) == keys(src), r.rank
        # time differences within the rank are kept to the ns
        pairs = [(s["ts"], o["ts"]) for s, o in zip([e for e in src if e["ph"] != "M"], [e for e in out if e["ph"] != "M"])]
        d0 = pairs[0][1] - pairs[0][0]
        assert all(abs((o - s) - d0) < 1e-3 for s, o in pairs)
        # both ends of the flow carry the same merged id, and it is the rank's own
        s_ids = {e["id"] for e in out if e["ph"] == "s"}
        f_ids = {e["id"] for e in out if e["ph"] == "f"}
        assert len(s_ids) == 1 and s_ids <= f_ids and len(f_ids) == 2
        ids[r.rank] = f_ids | {e["id"] for e in out if e["ph"] in "be"}
    assert not ids[0] & ids[1]


@pytest.mark.real
@pytest.mark.parametrize("src", ["hta/nccl_data.json.gz", "hta/sampled_pair", "torchrec/sst_long_a2a_optimizer_3",
                                 "tracelens/mi300_ddp8_actckpt_rank0.json.gz", "hta/ns_resolution_rank-0.pt.trace.json.gz"])
def test_real_traces_keep_every_event_args_and_flow(tmp_path, src):
    """Every X event keeps its args, and each phase's count (flows s/f, instants, counters, metadata) equals the
    source's, per rank; a `.gz` name gets gzip; the file is a valid Chrome trace."""
    import gzip
    from collections import Counter

    from llmdiag.diagnose.export.timeline import write_timeline

    tracks = {}
    a = analyze_path(str(REAL / src), jobs=1, tracks=tracks)
    out = write_timeline(a, str(tmp_path / "t.json.gz"), tracks)
    raw = __import__("pathlib").Path(out).read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    tl = orjson.loads(gzip.decompress(raw))
    check_chrome_trace(tl)
    for r in a.ranks:
        srcev = [e for e in _source(r.file) if isinstance(e, dict)]
        mine = _of_rank(tl, r.rank)
        got, want = Counter(e.get("ph") for e in mine), Counter(e.get("ph") for e in srcev)
        assert got["M"] >= want["M"] and got.pop("M") - want.pop("M", 0) <= 2 * len({e["pid"] for e in mine}), r.rank
        assert got == want, r.rank  # X, flows s/f, instants, counters: all of them
        args = lambda evs: sorted(orjson.dumps(e.get("args"), option=orjson.OPT_SORT_KEYS) for e in evs if e.get("ph") == "X")
        assert args(mine) == args(srcev)
        assert sum("args" in e for e in mine if e.get("ph") == "X") == sum("args" in e for e in srcev if e.get("ph") == "X")
    assert tl["llmdiag"]["events_dropped"] == 0


def test_an_inferred_pipeline_has_its_bubble_track(tmp_path):
    """A Megatron-style pipeline (no PP: labels, stages read from send/recv): the bubble track is the
    analysis' own inference, each stage's gaps summing to window − busy."""
    from tests.gen.pipeline import Case, write

    case = Case(4, 8, "1f1b", slow_stage=1, lat_us=20)
    ans = write(case, tmp_path)
    tracks = {}
    a = analyze_path(str(tmp_path), jobs=1, tracks=tracks)
    assert a.pipeline and a.pipeline.inferred
    tl = build_timeline(a, tracks)
    for sb in a.pipeline.stage_bubbles:
        ev = _track(tl, sb.rank, "pipeline bubble")
        gaps = sum(e["dur"] for e in ev) / 1000 / case.steps  # window and busy are per step
        assert len({e["args"]["step"] for e in ev}) == case.steps
        assert gaps > 0 and gaps == approx(a.pipeline.window_ms - sb.busy_ms, abs=1e-6)
        assert abs(1 - sb.busy_ms / (sb.busy_ms + gaps) - ans.bubble[sb.stage]) < 0.01


def test_ranks_past_the_input_fail_before_any_output(tmp_path):
    d = tmp_path / "run"
    for r in range(2):
        gpu_rank(r).write(d / f"rank{r}.json")
    s = tmp_path / "s.json"
    res = CliRunner().invoke(main, ["analyze", str(d), "-q", "--no-report", "--json", str(s), "--timeline",
                                    str(tmp_path / "t.json"), "--ranks", "0-7"])
    assert res.exit_code == 2 and "--ranks" in res.output and "Traceback" not in res.output, res.output
    assert not s.exists() and not (tmp_path / "t.json").exists()


@pytest.mark.real("bytedance")
def test_an_op_table_has_no_timeline_and_says_so_before_any_work(tmp_path):
    s = tmp_path / "s.json"
    res = CliRunner().invoke(main, ["analyze", str(REAL / "bytedance" / "trace-ST.parquet"), "-q", "--no-report",
                                    "--json", str(s), "--timeline", str(tmp_path / "t.json")])
    assert res.exit_code == 2 and "op table" in res.output and not s.exists(), res.output


@pytest.mark.real
def test_a_real_trace_loader_reads_the_merged_timeline(tmp_path):
    """HTA's own Kineto parser (llmdiag[hta]; a real loader: no trace processor binary installs from a registry)
    reads the merged .gz timeline: every complete event it reads from the source alone, plus llmdiag's, with
    the source's streams and correlation ids intact."""
    tp = pytest.importorskip("hta.common.trace_parser")
    from hta.configs.parser_config import ParserConfig

    from llmdiag.diagnose.export.timeline import write_timeline

    src = str(REAL / "hta" / "nccl_data.json.gz")
    tracks = {}
    a = analyze_path(src, jobs=1, tracks=tracks)
    out = write_timeline(a, str(tmp_path / "t.json.gz"), tracks)
    _, merged, _ = tp.parse_trace_dataframe(out, ParserConfig())
    _, alone, _ = tp.parse_trace_dataframe(src, ParserConfig())
    added = sum(len(getattr(tr, k)) for tr in tracks.values() for k in ("exposed", "idle", "bubble", "waits", "critical",
                                                                        "job_path"))
    added += sum(len(tr.job_path) for tr in tracks.values())  # and the job's own track, one slice each
    assert len(merged) == len(alone) + added
    for col in ("stream", "correlation"):
        assert sorted(merged[col][merged[col] > 0].tolist()) == sorted(alone[col][alone[col] > 0].tolist())
