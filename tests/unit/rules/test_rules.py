"""Every rule fires on a summary built to trigger it, stays silent on a healthy one, and computes its gain
from the measured numbers."""

from __future__ import annotations

import copy
import dataclasses
import re

import orjson
import pytest

from llmdiag.diagnose.model.analysis import SEVERITIES, Evidence, Finding
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.roles import pg_role
from llmdiag.diagnose.rules import RULES
from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import GIB, analysis, busy, summary, typed


def flat(f: Finding) -> dict:
    """A finding as the flat record these tests check (evidence text, ranks, steps and metric beside the rest)."""
    return {"id": f.id, "severity": f.severity, "title": f.title, "evidence": f.evidence.text,
            "ranks": f.evidence.ranks, "steps": f.evidence.steps, "action": f.action,
            "expected_gain": f.expected_gain, "gain_ms": f.gain_ms, "metric": f.evidence.metric}


def findings(s: dict) -> list[dict]:
    """The rules over an edited summary dict, read back as every consumer reads one."""
    return [flat(f) for f in run_rules(typed(s))]


def ids(s: dict) -> list[str]:
    return [f["id"] for f in findings(s)]


def _all_ranks(s, fn):
    for r in s["ranks"]:
        fn(r)
    return s


def low_overlap(pg: str):
    def fn(r):
        for c in r["comm_by_kind"]:
            c["pg"] = pg
            c["overlapped_ms"] = 0.2 * c["total_ms"]
            c["overlap_ratio"] = 0.2
        r["exposed_comm_ms"] = 0.8 * r["comm_ms"]
    return fn


def ddp_buckets(fn, mib: float = 20.0):
    """DDP all-reduces of `mib` MiB each (buckets under torch's 25 MB cap), after `fn`."""
    def both(r):
        fn(r)
        for c in r["comm_by_kind"]:
            c["bytes"] = int(c["sized_count"] * mib * 2**20)
    return both


def mem_frac(frac):
    def fn(r):
        for m in r["memory"]:
            m["peak_reserved"] = int(frac * m["capacity"])
            m["peak_allocated"] = min(m["peak_allocated"], m["peak_reserved"])
    return fn


def hints(**kw):
    return lambda r: r["hints"].update(kw)


def big_bubble(s):
    for b in s["pipeline"]["stage_bubbles"]:
        b["measured"] = 0.35
    s["pipeline"]["measured"] = 0.35
    return s


def imbalanced(s):
    s["pipeline"]["stage_bubbles"][0]["busy_ms"] = 120.0
    s["pipeline"]["imbalance"] = 120.0 / ((120.0 + 78.0) / 2) - 1
    return s


def straggler(s):
    """Rank 5 arrives last at 21 of 24 matched collectives (chance: 1/8) with 0.5 ms mean skew each."""
    s["skew"]["stragglers"] = [{"rank": 5, "reason": "arrives last at collectives", "value": 0.875}]
    s["skew"]["last_arrivals"] = {"5": 21, "0": 1, "1": 1, "2": 1}
    s["skew"]["by_collective"][0]["mean_skew_ms"] = 0.5
    return s


def blocking(ops: dict, calls: dict):
    """Device idle of each rank inside these runtime calls (ms per step)."""
    def fn(r):
        r["idle"] = {"idle_ms": sum(ops.values()) + 1.0, "runtime_ms": sum(ops.values()), "host_bound_ms": 1.0,
                     "runtime_ops": ops, "runtime_calls": calls}
    return fn


def oversubscribed(s):
    s["manifest"]["oversubscribed"] = True
    return s


# rule id -> (kwargs of the healthy summary, mutation that must make the rule fire)
TRIGGERS = {
    "pipeline_bubble": ({"pipeline": True}, big_bubble),
    "pipeline_imbalance": ({"pipeline": True}, imbalanced),
    "dp_overlap": ({}, lambda s: _all_ranks(s, ddp_buckets(low_overlap("mesh_dp")))),
    "tp_exposed": ({}, lambda s: _all_ranks(s, low_overlap("mesh_tp"))),
    "memory_near_capacity": ({}, lambda s: _all_ranks(s, mem_frac(0.93))),
    "memory_unused": ({}, lambda s: _all_ranks(s, mem_frac(0.30))),
    "host_bound": ({}, lambda s: _all_ranks(s, hints(device_idle_frac=0.3, short_kernel_frac=0.7))),
    "stragglers": ({}, straggler),
    "low_busbw": ({}, lambda s: _all_ranks(s, lambda r: r["comm_by_kind"][0].update(busbw_gbps=60.0))),
    "dataloader": ({}, lambda s: _all_ranks(s, hints(dataloader_frac=0.25))),
    "fp32_gemm": ({}, lambda s: _all_ranks(s, hints(fp32_gemm_frac=0.5, compute_capability=8.0))),
    "contaminated_timings": ({}, oversubscribed),
    "exposed_comm": ({}, lambda s: _all_ranks(s, low_overlap("misc"))),
    "allocator_churn": ({}, lambda s: _all_ranks(s, blocking({"hipFree": 30.0, "hipMalloc": 1.0},
                                                             {"hipFree": 260.0, "hipMalloc": 290.0}))),
    "host_sync": ({}, lambda s: _all_ranks(s, blocking({"aten::item": 9.0, "cudaStreamSynchronize": 2.0},
                                                       {"aten::item": 57.0, "cudaStreamSynchronize": 10.0}))),
    "exposed_memcpy": ({}, lambda s: _all_ranks(s, lambda r: r.update(other_ms=9.0))),
}


def test_every_rule_has_a_trigger_test():
    """Each rule fires in a test: here (TRIGGERS), or in a test module of its own that names it (e.g. MoE)."""
    from pathlib import Path
    others = {rid for rid, _ in RULES} - set(TRIGGERS)
    texts = [p.read_text() for p in Path(__file__).resolve().parents[2].rglob("test_*.py") if p.name != Path(__file__).name]
    assert not [rid for rid in others if not any(f'"{rid}"' in t for t in texts)]
    assert set(TRIGGERS) <= {rid for rid, _ in RULES}


@pytest.mark.parametrize("kw", [{}, {"pipeline": True}, {"n": 512, "pipeline": True}, {"comm": False},
                                {"memory": False, "with_manifest": False}])
def test_healthy_runs_are_silent(kw):
    assert ids(summary(**kw)) == []


@pytest.mark.parametrize("rid", sorted(TRIGGERS))
def test_rule_fires_and_is_well_formed(rid):
    kw, mutate = TRIGGERS[rid]
    base = summary(**kw)
    assert rid not in ids(base)
    typed_fs = [f for f in run_rules(typed(mutate(copy.deepcopy(base)))) if f.id == rid]
    fs = [flat(f) for f in typed_fs]
    assert fs, f"{rid} did not fire"
    for tf, f in zip(typed_fs, fs):
        assert {x.name for x in dataclasses.fields(tf)} == {"id", "severity", "title", "evidence", "action",
                                                            "expected_gain", "gain_ms", "gain_frac", "gain_kind",
                                                            "claims", "part_of", "shared_ms"}
        assert isinstance(tf.evidence, Evidence)
        assert tf.gain_kind in ("estimate", "bound") and tf.evidence.source in ("trace", "manifest", "assumed")
        if tf.gain_kind == "bound" and tf.gain_ms is not None:
            assert tf.expected_gain.startswith("up to"), "a bound reads 'up to'"
        assert f["severity"] in ("high", "medium", "low")
        assert re.search(r"\d", f["evidence"]), "evidence must carry numbers"
        assert f["action"] and f["expected_gain"] and f["metric"]
        assert all(isinstance(x, int) for x in f["ranks"] + f["steps"])
        assert f["gain_ms"] is None or f["gain_ms"] >= 0
    orjson.dumps(fs)  # JSON-serialisable as they go into summary.json


def test_findings_in_the_one_order():
    """Severity first, then expected gain (none last within a severity): the order every output shows."""
    fs = findings(busy())
    keys = [(SEVERITIES.index(f["severity"]), -(f["gain_ms"] or 0.0)) for f in fs]
    assert keys == sorted(keys) and len([f for f in fs if f["gain_ms"] is not None]) >= 3
    for sev in SEVERITIES:
        gains = [f["gain_ms"] for f in fs if f["severity"] == sev and f["gain_ms"] is not None]
        assert gains == sorted(gains, reverse=True)


def test_pipeline_gain_from_replayed_prediction():
    s = big_bubble(summary(pipeline=True))
    p = s["pipeline"]
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    base = next(q["step_ms"] for q in p["predictions"] if q["microbatches"] == p["microbatches"])
    best = min((q for q in p["predictions"] if q["step_ms"]), key=lambda q: q["step_ms"])
    assert f["gain_ms"] == pytest.approx(p["window_ms"] * (1 - best["step_ms"] / base), abs=1e-6)
    assert f"--microbatches {best['microbatches']}" in f["action"]
    assert fmt(p["measured"], "pct") in f["evidence"] and fmt(p["theory"], "pct") in f["evidence"]


def test_pipeline_gain_from_formula_without_predictions():
    s = big_bubble(summary(pipeline=True))
    p = s["pipeline"]
    p["predictions"] = []
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    pp, m, win = p["stages"], p["microbatches"], p["window_ms"]
    busy_ms = win * (1 - p["measured"])
    excess = p["measured"] - p["replay"]
    # candidates: 2m, 4m (same schedule), interleaved v=2; 4m is the largest gain here
    b = (pp - 1) / (4 * m + pp - 1)
    assert f["gain_ms"] == pytest.approx(win - busy_ms / (1 - (b + excess)), abs=1e-6)


def test_zero_bubble_schedule_prediction_scales_the_replay():
    """dualpipev's formula says 0 at any m; the prediction scales today's replayed bubble by m/m' instead."""
    s = big_bubble(summary(pipeline=True))
    p = s["pipeline"]
    p.update(schedule="dualpipev", stages_per_rank=2, theory=0.0, predictions=[])
    s["manifest"]["options"]["global_batch"] = None
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    m, win = p["microbatches"], p["window_ms"]
    busy_ms = win * (1 - p["measured"])
    excess = p["measured"] - p["replay"]
    b = p["replay"] * m / (4 * m)  # 4m: the largest gain; interleaved v=2 at m is worse than any of these
    assert f["gain_ms"] == pytest.approx(win - busy_ms / (1 - (b + excess)), abs=1e-6)
    assert f"--microbatches {4 * m}" in f["action"]


def test_microbatch_limit_respected():
    s = big_bubble(summary(pipeline=True))
    s["manifest"]["options"]["global_batch"] = 2 * 16  # dp=2 -> 16 sequences per replica: m <= 16
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    assert "--microbatches 32" not in f["action"]


def test_dataloader_gain_is_wait_time():
    s = summary()
    s["ranks"][2]["hints"]["dataloader_frac"] = 0.3
    f = next(f for f in findings(s) if f["id"] == "dataloader")
    assert f["gain_ms"] == pytest.approx(0.3 * s["ranks"][2]["step_time_ms"], abs=1e-6)
    assert f["ranks"] == [2] and "num_workers=" in f["action"]
    assert f["severity"] == "high"


def test_dp_overlap_ddp_vs_fsdp_action():
    s = TRIGGERS["dp_overlap"][1](summary())
    f = next(f for f in findings(s) if f["id"] == "dp_overlap")
    assert "bucket_cap_mb=" in f["action"]
    exposed = sum(0.8 * c["total_ms"] / len(r["steps"]) for r in s["ranks"] for c in r["comm_by_kind"]) / 8
    assert f["gain_ms"] == pytest.approx(min(exposed, s["ranks"][0]["compute_only_ms"]), rel=1e-6)
    for r in s["ranks"]:
        r["comm_by_kind"][0]["kind"] = "reducescatter"
    f = next(f for f in findings(s) if f["id"] == "dp_overlap")
    assert "reshard_after_forward=False" in f["action"]


def test_tp_across_hosts_says_keep_tp_inside_node():
    s = TRIGGERS["tp_exposed"][1](summary())
    s["layout"]["tp"] = 16
    f = next(f for f in findings(s) if f["id"] == "tp_exposed")
    assert "inside a node" in f["action"] and "--sp" in f["action"]


def test_memory_near_capacity_severity_and_ranks():
    s = summary()
    s["ranks"][4]["memory"][0]["peak_reserved"] = int(0.97 * 80 * GIB)
    f = next(f for f in findings(s) if f["id"] == "memory_near_capacity")
    assert f["severity"] == "high" and f["ranks"] == [4] and f["gain_ms"] is None
    assert "activation checkpointing" in f["action"]


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "cpu", "AMD Instinct MI250X", ""])
def test_low_busbw_silent_without_known_nvlink_peak(name):
    s = TRIGGERS["low_busbw"][1](summary())
    s["manifest"]["device"]["name"] = name
    assert "low_busbw" not in ids(s)


def test_low_busbw_silent_for_small_messages_and_cross_node_groups():
    s = TRIGGERS["low_busbw"][1](summary())
    small = copy.deepcopy(s)
    for r in small["ranks"]:
        r["comm_by_kind"][0]["bytes"] = r["comm_by_kind"][0]["sized_count"] * 1024
    assert "low_busbw" not in ids(small)
    for r in s["ranks"]:
        r["comm_by_kind"][0]["group_size"] = 64  # more ranks than a host holds: inter-node links
    assert "low_busbw" not in ids(s)


@pytest.mark.parametrize("missing", [0, None])  # 0: summaries of earlier versions; None: nothing reserved
def test_memory_uses_allocated_when_reserved_is_missing(missing):
    s = summary()
    for r in s["ranks"]:
        r["memory"][0]["peak_reserved"] = missing  # old traces, CPU: Total Reserved not recorded
    assert "memory_unused" not in ids(s)  # 40 GiB allocated of 80 is not "unused"
    s["ranks"][0]["memory"][0]["peak_allocated"] = int(0.95 * 80 * GIB)
    assert "memory_near_capacity" in ids(s)


def test_fp32_gemm_silent_without_tensor_cores():
    s = _all_ranks(summary(), hints(fp32_gemm_frac=0.5, compute_capability=6.0))  # Pascal: no tensor cores
    assert "fp32_gemm" not in ids(s)


def test_host_bound_silent_when_kernels_are_long():
    s = _all_ranks(summary(), hints(device_idle_frac=0.3, short_kernel_frac=0.1, median_kernel_us=400.0))
    assert "host_bound" not in ids(s)


def test_cpu_run_notes_timings():
    f = findings(summary(gpu=False))
    assert [x["id"] for x in f] == ["contaminated_timings"] and f[0]["severity"] == "low"
    s = oversubscribed(summary(gpu=False))
    assert findings(s)[0]["severity"] == "high"


def test_empty_and_none_summary():
    a = analysis(1, comm=False, memory=False, with_manifest=False)
    a.ranks, a.pipeline, a.skew, a.trace_kind = [], None, None, "gpu"
    assert run_rules(a) == []


def test_json_roundtrip_same_findings():
    s = busy()
    assert findings(orjson.loads(orjson.dumps(s))) == findings(s)
    a = typed(s)
    a.findings = run_rules(a)
    assert typed(a.to_dict()).findings == a.findings


@pytest.mark.parametrize("pg,kind,size,layout,role", [
    ("mesh_tp", "allreduce", 2, {}, "tp"), ("mesh_dp_shard", "reducescatter", 4, {}, "dp"),
    ("mesh_pp", "send", 2, {}, "pp"), ("default_pg", "allreduce", 8, {"dp": 8}, "dp"),
    ("0", "allgather", 4, {"tp": 4, "dp": 2}, "tp"),
    # No name and no layout: unknown (an all-reduce of the whole world may be TP inference or a grad-norm sum);
    # the assembly writes a dp layout only from DDP/FSDP ops seen in the trace.
    ("", "allreduce", 8, {}, "?"), ("default_pg", "allreduce", 8, {}, "?"),
    ("", "alltoall", 8, {"dp": 8}, "?"), ("", "alltoall", 8, {"dp": 4, "ep": 2}, "ep"),
    ("1", "allreduce", 2, {"tp": 2, "dp": 2}, "?"), ("", "allreduce", 2, {"tp": 2, "pp": 2}, "tp"),
    ("", "allreduce", 4, {"dp": 4, "tp": 2, "pp": 2}, "dp"),
])
def test_pg_role(pg, kind, size, layout, role):
    assert pg_role(kind, pg, size, layout) == role


def test_fmt_rounding_and_none():
    assert fmt(None, "ms") == "n/a" and fmt(float("nan"), "pct") == "n/a"
    assert fmt(12.345678, "ms") == "12.35 ms" and fmt(0.1234, "pct") == "12.3%"
    assert fmt(3 * GIB, "gib", False) == "3.00" and fmt(21, "num") == "21" and fmt(2.5, "num") == "2.500"


# ---- issue 14: findings that hold ----------------------------------------------------------------------------
def test_two_rank_straggler_is_silent():
    """With two ranks one of them always arrives last: "last at 67 %" is chance, not a straggler."""
    s = summary(2)
    s["skew"]["last_arrivals"] = {"1": 16, "0": 8}
    s["skew"]["by_collective"][0]["mean_skew_ms"] = 0.9
    s["skew"]["stragglers"] = [{"rank": 1, "reason": "arrives last at collectives", "value": 0.67}]
    assert "stragglers" not in ids(s)


def test_straggler_binomial_and_floor():
    """Significant (binomial p < 0.01 against 1/8) and above 2 % of the step fires; chance-level or tiny does not;
    the gain is only the waiting the late rank imposes (its share of the total arrival skew), as a bound."""
    s = straggler(summary())
    f = next(f for f in run_rules(typed(s)) if f.id == "stragglers")
    total_wait = 0.5 * 24 / 3  # mean skew × matched / steps
    assert f.gain_ms == pytest.approx(total_wait * 21 / 24, rel=1e-6) and f.gain_kind == "bound"
    assert f.evidence.ranks == [5] and "host unknown" not in f.evidence.text
    s4 = straggler(summary())
    s4["skew"]["late_ms_by_rank"] = {"5": 27.0, "1": 0.3}  # the matcher's summed lateness of rank 5: 9 ms per step
    f = next(f for f in run_rules(typed(s4)) if f.id == "stragglers")
    assert f.gain_ms == pytest.approx(9.0)
    s2 = straggler(summary())
    s2["skew"]["last_arrivals"] = {"5": 6, "0": 6, "1": 6, "2": 6}  # 25 % each: chance level for 8 ranks
    assert "stragglers" not in ids(s2)
    s3 = straggler(summary())
    s3["skew"]["by_collective"][0]["mean_skew_ms"] = 0.01  # 70 µs of waiting in a ~100 ms step
    assert "stragglers" not in ids(s3)


def test_compute_straggler_needs_more_than_noise():
    """6.7 % above the median but 70 µs in a 14.5 ms step is below the 2 % floor: silent."""
    s = summary()
    s["skew"]["last_arrivals"] = {}
    s["ranks"][4]["compute_ms"] = s["ranks"][0]["compute_ms"] + 0.07
    assert "stragglers" not in ids(s)
    s["ranks"][4]["compute_ms"] = s["ranks"][0]["compute_ms"] + 20.0  # 20 ms: well above noise and floor
    f = next(f for f in findings(s) if f["id"] == "stragglers")
    assert f["ranks"] == [4] and f["gain_ms"] == pytest.approx(20.0, abs=0.5)


def test_unread_bucket_size_is_never_quoted_as_current():
    s = TRIGGERS["dp_overlap"][1](summary())
    s["manifest"]["options"].pop("bucket_cap_mb")
    f = next(f for f in findings(s) if f["id"] == "dp_overlap")
    assert "now 25" not in f["action"] and "not recorded" in f["action"]
    s["manifest"]["options"]["bucket_cap_mb"] = 50.0
    f = next(f for f in findings(s) if f["id"] == "dp_overlap")
    assert "now 50" in f["action"] and "read from the manifest" in f["action"]


def test_ddp_advice_needs_gradient_volume_above_the_cap():
    """2.48 MB of gradients fit one bucket: no bucket_cap_mb advice (the exposed time goes to exposed_comm)."""
    s = summary()
    _all_ranks(s, ddp_buckets(low_overlap("mesh_dp"), mib=2.48 / 8))
    got = findings(s)
    assert "dp_overlap" not in [f["id"] for f in got]
    assert not any("bucket_cap_mb" in f["action"] for f in got)
    assert "exposed_comm" in [f["id"] for f in got]


def test_unreachable_host_bound_gain():
    """57 aten::item + 10 cudaStreamSynchronize per step: the idle is host syncs, not launch overhead, so no
    torch.compile gain of 52 %; the sync finding names the ops and bounds its gain by the idle they cover."""
    s = summary()
    step = s["ranks"][0]["step_time_ms"]
    idle = 0.52 * step

    def fn(r):
        r["hints"].update(device_idle_frac=0.52, short_kernel_frac=0.8)
        r["idle"] = {"idle_ms": idle, "runtime_ms": idle - 1.0, "host_bound_ms": 1.0,
                     "runtime_ops": {"aten::item": idle * 0.8, "cudaStreamSynchronize": idle * 0.2 - 1.0},
                     "runtime_calls": {"aten::item": 57.0, "cudaStreamSynchronize": 10.0}}
    _all_ranks(s, fn)
    fs = run_rules(typed(s))
    assert "host_bound" not in [f.id for f in fs]
    f = fs[0]
    assert f.id == "host_sync" and f.gain_kind == "bound" and f.gain_ms <= idle
    assert "aten::item" in f.evidence.text and "57.0 calls" in f.evidence.text and "torch.compile" not in f.action


def test_inference_trace_gets_no_training_advice():
    s = _all_ranks(summary(with_manifest=False), mem_frac(0.30))
    for r in s["ranks"]:
        r["training"] = {"backward_ops": 0.0, "optimizer_ops": 0.0}
    assert "memory_unused" not in ids(s)
    for r in s["ranks"]:
        r["training"] = {"backward_ops": 300.0, "optimizer_ops": 1.0}
    assert "memory_unused" in ids(s)


def test_contaminated_run_prints_no_precise_gain():
    s = oversubscribed(TRIGGERS["dataloader"][1](summary()))
    fs = run_rules(typed(s))
    dl = next(f for f in fs if f.id == "dataloader")
    assert dl.gain_ms is None and dl.severity == "low" and "contaminated" in dl.expected_gain


def test_fmt_gain_bound_and_estimate():
    from llmdiag.diagnose.model.format import fmt_gain
    f = Finding("x", "low", "t", Evidence("e", "m"), "a", "g", 7.5, 0.52, "bound")
    assert fmt_gain(f) == "up to 7.50 ms per step (52.0% of the step)"
    assert fmt_gain(dataclasses.replace(f, gain_kind="estimate")).startswith("≈ 7.50 ms")
    assert fmt_gain(dataclasses.replace(f, gain_ms=None)) == "n/a"


def test_op_names_from_traces_are_cut():
    """Names are untrusted and unbounded: evidence quotes at most 80 characters of each."""
    long = "hipFree" + "<script>" * 50
    s = _all_ranks(summary(), blocking({long: 30.0}, {long: 3.0}))
    f = next(f for f in run_rules(typed(s)) if f.id == "allocator_churn")
    assert long not in f.evidence.text and "hipFree<script>" in f.evidence.text
    assert all(len(e) <= 80 for e in f.evidence.events)


def test_pipeline_grad_norm_allreduce_gets_no_bucket_advice():
    """A pipeline job (pp=2, dp=1) whose only all-reduce is a 1-element grad-norm on the default group: no DDP is
    identified and no cap changes a 4-byte message, so no bucket_cap_mb, whatever its exposure."""
    s = summary(2, pipeline=True)
    s["layout"] = s["manifest"]["layout"] = {"dp": 1, "fsdp": 1, "tp": 1, "pp": 2, "cp": 1}

    def grad_norm(r):
        low_overlap("default_pg")(r)
        for c in r["comm_by_kind"]:
            c["bytes"], c["group_size"] = 4 * c["sized_count"], 2
    _all_ranks(s, grad_norm)
    got = findings(s)
    assert "dp_overlap" not in [f["id"] for f in got]
    assert not any("bucket_cap_mb" in f["action"] for f in got)


def test_pipeline_two_options_each_carry_their_numbers():
    """With two settings named (one on today's schedule, one faster on another), each reads alike: its own
    bubble and window, so neither set of numbers seems to belong to the other option."""
    s = big_bubble(summary(pipeline=True))
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    options = f["action"].split("; or ")
    assert len(options) == 2, f["action"]  # this summary: --microbatches 32, or interleaving (faster)
    pat = (r"\(bubble [0-9.]+%, window ≈ [0-9.,]+ ms(: the replayed ([0-9.,]+) ms × measured / replayed window at m=\d+"
           r"|; not simulated)\)$")
    got = [re.search(pat, o) for o in options]
    assert all(got), f["action"]
    # a replayed option names the pipeline section's own number for it
    replayed = {f"{q['step_ms']:,.2f}" for q in s["pipeline"]["predictions"] if q.get("step_ms")}
    assert all(g.group(2) in replayed for g in got if g.group(2)), (f["action"], replayed)
    # here the replayed 1F1B setting leads; interleaving has no replayed time in this summary and says so
    assert options[0].startswith("`--microbatches 32`") and options[1].endswith("; not simulated)"), f["action"]


def _host_bound_summary(host_bound_ms: float, profiled=None, unprofiled=None) -> dict:
    s = summary(2)
    for r in s["ranks"]:
        r["hints"].update(device_idle_frac=0.5, short_kernel_frac=0.1, median_kernel_us=30.0, kernels_per_step=2000)
        r["idle"] = {"idle_ms": 50.0, "host_bound_ms": host_bound_ms, "queued_ms": 50.0 - host_bound_ms}
    s["manifest"]["rank_status"] = {str(r["rank"]): {"status": "ok", "profiled_step_ms": profiled,
                                                     "unprofiled_step_ms": unprofiled} for r in s["ranks"]}
    return s


def test_host_bound_takes_the_profilers_own_cost_off_its_gain():
    """Seen on an H200 (`single --model 125m --ac`): profiled steps 181.8 ms, unprofiled 115.1 ms, and 90.7 ms
    of 'waits for the host's next launch' — two thirds of it the profiler recording ops. The manifest's
    unprofiled steps say so; the gain is what is left, and the evidence says what was taken off."""
    f = next(f for f in findings(_host_bound_summary(40.0)) if f["id"] == "host_bound")
    assert f["gain_ms"] == pytest.approx(40.0) and "profiler" not in f["evidence"]
    f = next(f for f in findings(_host_bound_summary(40.0, 100.0, 75.0)) if f["id"] == "host_bound")
    assert f["gain_ms"] == pytest.approx(15.0)
    assert "without the profiler a step took 75.00 ms" in f["evidence"] and "25.00 ms per step" in f["evidence"]
    # all of it the profiler's: no finding
    assert not [f for f in findings(_host_bound_summary(20.0, 100.0, 75.0)) if f["id"] == "host_bound"]


def test_pipeline_unsimulated_schedule_takes_its_busy_time_from_the_cost_model():
    """A zero-bubble row has no replay, but the fitted cost model still says how the busiest stage's work
    grows with m (`busy_ms`): its window is today's busy time × that growth / (1 − its bubble + today's
    excess), computed here from docs/recommendations.md, and it says so. It is named second at most: the
    replayed settings give the proposal."""
    from llmdiag.diagnose.rules.pipeline import _candidates

    s = big_bubble(summary(pipeline=True))
    pp = s["pipeline"]
    for q in pp["predictions"]:
        if (q["schedule"], q["microbatches"]) == ("1f1b", 8):
            q["busy_ms"] = 70.0
    pp["predictions"] += [{"schedule": "zbv", "microbatches": 16, "bubble": None, "step_ms": None, "theory": 0.0,
                           "busy_ms": 72.0}]
    p = typed(s).pipeline
    win, meas, ref, m = pp["window_ms"], pp["measured"], pp["replay"], pp["microbatches"]
    got = {(q.schedule, q.microbatches): (w, how) for w, q, how in _candidates(p, ref, None)}
    w, how = got[("zbv", 16)]
    want = win * (1 - meas) * 72.0 / 70.0 / (1 - (ref * m / 16 + (meas - ref)))
    assert w == pytest.approx(want, rel=1e-9)
    assert "the cost model's busiest stage at m=16 and at m=8" in how and "not simulated" in how
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    assert not f["action"].startswith("`--schedule zbv`"), f["action"]  # a replayed setting leads


def test_pipeline_bubble_never_proposes_a_larger_bubble():
    """Fewer microbatches can replay faster where each costs a fixed overhead, with a larger bubble: the bubble
    finding proposes only settings that shrink the bubble, so that one is not its answer."""
    s = big_bubble(summary(pipeline=True))
    for q in s["pipeline"]["predictions"]:
        if (q["schedule"], q["microbatches"]) == ("1f1b", 4):
            q["step_ms"] = 60.0  # faster than every other setting, bubble 0.2 > today's replayed 0.12
    f = next(f for f in findings(s) if f["id"] == "pipeline_bubble")
    assert "--microbatches 4`" not in f["action"], f["action"]
    ref = s["pipeline"]["replay"]
    for o in f["action"].split("; or "):
        assert float(re.search(r"bubble ([0-9.]+)%", o).group(1)) / 100 < ref, f["action"]
