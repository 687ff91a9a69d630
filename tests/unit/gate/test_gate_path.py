"""`check` and `diff` on the critical path (issue 34): the job path's length and HTA's five shares, and each rank's.

Summaries are generated with a known path (tests/gen/summaries, paths set here): a twin pair with the same path
(no regression), a pair whose path moved from compute to communication by a known number of points, and pairs
where one side is event-sampled (`critical_path: null` with its note). Every delta, σ and verdict below is
computed by hand from the numbers planted.
"""

from __future__ import annotations

import math
import statistics

import pytest

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.gate.config import build_gates, parse_config
from llmdiag.diagnose.gate.diff import compare, render_text
from llmdiag.diagnose.gate.format import render_verdict
from llmdiag.diagnose.gate.junit import to_junit
from llmdiag.diagnose.gate.limits import GATED, parse_limit
from llmdiag.diagnose.gate.noise import sigma
from llmdiag.diagnose.gate.verdict import Gate, default_gates, evaluate
from llmdiag.diagnose.model.critical_path import CATEGORIES, sampled_note
from llmdiag.diagnose.model.format import fmt
from tests.gen import summaries

# the job path per step: (length ms, cpu, compute, comm, launch, kernel-kernel), percent summing to 100
BASE_STEPS = [(100.0, 5.0, 70.0, 20.0, 3.0, 2.0), (102.0, 6.0, 68.0, 21.0, 3.0, 2.0), (98.0, 4.0, 72.0, 19.0, 3.0, 2.0)]


def _path(length: float, shares: tuple, **extra) -> dict:
    return {"length_ms": length, **dict(zip(CATEGORIES, shares)), **extra}


def _mean(steps: list[tuple]) -> tuple:
    return tuple(statistics.fmean(s[i] for s in steps) for i in range(6))


def with_path(s: dict, steps: list[tuple] = BASE_STEPS, shift: float = 0.0, sampled: set[int] = frozenset(),
              job: bool = True) -> dict:
    """`s` with a job path of `steps` (compute -> comm moved by `shift` points in every step), each rank's path the
    same; ranks in `sampled` event-sampled (null path, with the note), and the job's then null too."""
    steps = [(t, c, g - shift, m + shift, la, kk) for t, c, g, m, la, kk in steps]
    mean = _mean(steps)
    for r in s["ranks"]:
        if r["rank"] in sampled:
            r["critical_path"], r["critical_path_note"] = None, sampled_note(0.31)
            continue
        r["critical_path"] = _path(mean[0], mean[1:], causes={"compute": mean[2]})
        for st, p in zip(r["steps"], steps):
            st["critical_path"] = _path(p[0], p[1:])
    if sampled:
        s["critical_path"] = None
        s["critical_path_note"] = "not determined: rank 1's capture is event-sampled"
    elif job:
        s["critical_path"] = _path(mean[0], mean[1:], steps=len(steps), held_by={"0": mean[0]}, per_step=[
            _path(p[0], p[1:], step=i) for i, p in enumerate(steps)])
    return s


def side(**kw):
    return summaries.typed(with_path(summaries.summary(4), **kw))


def _comm_sigma() -> float:
    """σ of the job path's comm share by hand: the sample sd of its per-step values (one series), as a ratio."""
    return statistics.stdev([p[3] / 100 for p in BASE_STEPS])


# --- check --------------------------------------------------------------------------------------------------

def test_twin_passes_and_a_path_moved_to_communication_fails_with_exact_numbers():
    base = side()
    twin = evaluate(side(), base, default_gates())
    paths = {r.metric: r for r in twin.results if r.metric.startswith("path_")}
    assert set(paths) == {"path_cpu", "path_compute", "path_comm", "path_launch", "path_kernel_gap"} and all(r.status == "pass" for r in paths.values())
    assert all(r.delta == 0 for r in paths.values())
    sig = _comm_sigma()  # 0.01: the comm share 20, 21, 19 % over the steps (at the 1-point floor)
    allowed = 0.05 + max(sig, 0.01)
    moved = evaluate(side(shift=8.0), base, default_gates())
    r = {x.metric: x for x in moved.results}
    comm, compute = r["path_comm"], r["path_compute"]
    assert comm.baseline == pytest.approx(0.20) and comm.current == pytest.approx(0.28)
    assert comm.delta == pytest.approx(0.08) and comm.threshold == pytest.approx(0.20 + allowed)
    assert comm.status == "fail" and compute.status == "fail" and compute.delta == pytest.approx(-0.08)
    assert {x.status for k, x in r.items() if k in ("path_cpu", "path_launch",
                                                     "path_kernel_gap")} == {"pass"}
    assert moved.status == "fail"
    # 5 points over the steps' spread is the line: 5.5 points passes, 6.5 fails (allowed = 6.0 points here)
    assert evaluate(side(shift=5.5), base, default_gates()).status == "pass"
    assert evaluate(side(shift=6.5), base, default_gates()).status == "fail"


def test_the_limit_plus_sigma_reads_the_steps_own_spread():
    noisy = [(100.0, 5.0, 70.0, 20.0, 3.0, 2.0), (100.0, 5.0, 60.0, 30.0, 3.0, 2.0), (100.0, 5.0, 80.0, 10.0, 3.0, 2.0)]
    base = side(steps=noisy)
    m = GATED["path_comm"]
    sig = statistics.stdev([0.2, 0.3, 0.1])  # 0.1: a share that swings 10 points step to step
    assert sigma(base, m, "worst") == pytest.approx(sig)
    g = [Gate(m.name, "max_rise", parse_limit("0.05+1σ", m, "max_rise"), "worst")]
    v = evaluate(side(steps=noisy, shift=12.0), base, g)  # 12 points < 5 + 10: within the steps' own spread
    assert v.results[0].status == "pass" and v.results[0].threshold == pytest.approx(0.2 + 0.05 + sig)
    assert v.results[0].limit == f"max_rise 0.05+1σ = {(0.05 + sig) * 100:.1f} pt"
    assert evaluate(side(steps=noisy, shift=16.0), base, g).results[0].status == "fail"


def test_rank_path_gates_per_rank_and_the_length():
    base, cur = side(), side()
    cur.ranks[2].critical_path.length_ms = 130.0  # rank 2's path 30 ms longer
    v = evaluate(cur, base, [Gate("rank_path_length", "max_rise", parse_limit("10%", GATED["rank_path_length"],
                                                                              "max_rise"), "rank")])
    r = v.results[0]
    assert (r.status, r.worst, r.baseline, r.current) == ("fail", "rank 2", 100.0, 130.0)
    job = evaluate(cur, base, [Gate("path_length", "max_rise", parse_limit("10%", GATED["path_length"], "max_rise"))])
    assert job.results[0].status == "pass" and job.results[0].delta == 0  # the job path did not move


@pytest.mark.parametrize("which", ["current", "baseline", "both"])
def test_event_sampled_side_is_not_compared_never_pass_or_fail(which):
    plain, sampled = side(), side(sampled={1})
    cur, base = (sampled if which in ("current", "both") else plain), (sampled if which in ("baseline", "both")
                                                                        else plain)
    v = evaluate(cur, base, default_gates())
    paths = [r for r in v.results if r.metric.startswith("path_")]
    assert len(paths) == 5 and {r.status for r in paths} == {"n/a"}
    assert all(r.message.startswith(f"{r.metric}: not compared: ") and "event-sampled" in r.message for r in paths)
    assert not [c for c in v.inputs if c.metric.startswith("path")]  # n/a says why: no input failure
    said = {"current": "current: no job", "baseline": "baseline: no job", "both": "baseline and current: no job"}
    assert all(said[which] in r.message and r.message.count("no job") == 1 for r in paths)  # one reason, once
    assert v.status == "pass"  # the other gates pass: the twin's numbers
    assert evaluate(cur, base, default_gates(), strict=True).status == "fail"  # --strict: n/a fails, as any gate
    text = render_verdict(v)
    flat = " ".join(text.split())  # the reason once, for the five gates it stops
    assert flat.count("not compared") == 1 and "n/a: path_compute, path_comm, path_cpu, path_launch, path_kernel_gap: "\
        "not compared: " in flat
    xml = to_junit(v)
    assert xml.count("<skipped message=\"path_") == 5


def test_rank_path_gate_on_a_partly_sampled_side_is_not_compared():
    v = evaluate(side(sampled={1}), side(), [Gate("rank_path_cpu", "max_rise",
                                                  parse_limit(0.05, GATED["rank_path_cpu"], "max_rise"))])
    r = v.results[0]
    assert r.status == "n/a" and "current: no critical path on 1 rank (1) of 4: not determined: event-sampled" in \
        r.message


def test_cpu_sides_get_no_path_gates_and_no_note():
    a = summaries.typed(summaries.summary(4, gpu=False))
    v = evaluate(a, a, default_gates())
    assert not [r for r in v.results if r.metric.startswith("path")]
    assert not [n for n in v.notes if "path" in n]
    assert compare(a, a).sections and not [s for s in compare(a, a).sections if s.title.startswith("Critical")]


def test_config_and_flags():
    gates, _ = parse_config({"path_comm": {"max_rise": "0.05+1σ"}, "rank_path_length": {"max_rise": "10%",
                                                                                       "agg": "rank"}}, "t.toml")
    assert {(g.metric, g.rule, g.limit.plus_sigma, g.agg) for g in gates} == {
        ("path_comm", "max_rise", 1.0, "worst"), ("rank_path_length", "max_rise", 0.0, "rank")}
    with pytest.raises(LlmdiagError, match="both set"):
        parse_config({"path_comm": {"max_rise": 0.05}, "path_gpu_communication_bound": {"max_rise": 0.05}}, "t")
    gates, _ = build_gates(None, {"max_path_comm_rise": "0.03", "max_path_rise": "5%"}, None)
    assert {(g.metric, g.limit.value) for g in gates} == {("path_comm", 0.03),
                                                         ("path_length", 0.05)}
    for bad in ("0.05+1σ+1σ", "1.5σ+1σ"):
        with pytest.raises(LlmdiagError):
            parse_limit(bad, GATED["path_cpu"], "max_rise")
    with pytest.raises(LlmdiagError):
        parse_limit("0.05+1σ", GATED["path_cpu"], "max")
    with pytest.raises(LlmdiagError):
        parse_limit("2+1σ", GATED["path_cpu"], "max_rise")  # a share's rise in points is at most 1


# --- diff ---------------------------------------------------------------------------------------------------

def _rows(c):
    return {r.name: r for s in c.sections if s.title.startswith("Critical path") for r in s.rows}


def test_diff_rows_with_exact_deltas():
    twin = _rows(compare(side(), side()))
    assert all(r.change == "same" and r.delta == 0 for r in twin.values()) and len(twin) == 12
    rows = _rows(compare(side(), side(shift=8.0)))
    comm, compute = rows["job comm"], rows["job compute"]
    assert (comm.a, comm.b, comm.delta) == pytest.approx((0.20, 0.28, 0.08))
    assert (comm.change, comm.effect, compute.change, compute.effect) == ("up", "worse", "down", "worse")
    assert rows["rank comm"].delta == pytest.approx(0.08)
    assert rows["job length"].a == pytest.approx(100.0) and rows["job length"].change == "same"
    text = render_text(compare(side(), side(shift=8.0)))
    # one format: the report's (`fmt(share / 100, "pct")`, reports/critical_path.py) and the check's
    assert f"{fmt(20.0 / 100, 'pct')}" in text and "+8.0 pt" in text
    assert "Critical path" in text


def test_diff_of_a_sampled_side_says_not_compared():
    text = render_text(compare(side(), side(sampled={1})))
    flat = " ".join(text.split())
    assert "job path not compared: B: no job critical path: not determined: rank 1's capture is event-sampled" in flat
    assert "rank path compared over the ranks that state one: B: no critical path on 1 rank (1) of 4" in flat
    rows = _rows(compare(side(), side(sampled={1})))
    assert rows["job length"].b is None and rows["job length"].change == ""


@pytest.mark.parametrize("width", [80, 160])
def test_diff_and_check_fit_the_terminal(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    text = render_text(compare(side(), side(shift=8.0)))
    part = text[text.index("Critical path"):]
    part = part[:part.index("\n\n")] if "\n\n" in part else part
    assert max(map(len, part.splitlines())) <= width
    assert "job comm" in part and "rank kernel-kernel" in part
    v = render_verdict(evaluate(side(shift=8.0), side(), default_gates()))
    assert max(map(len, v.splitlines())) <= width
    assert "path_comm" in v.replace("\n", "")
    assert math.isclose(len([x for x in v.splitlines() if "FAIL" in x]), 3)  # two gate rows and the last line
