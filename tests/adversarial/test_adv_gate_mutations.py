"""The gate fails closed under partial input: mutating a summary never turns a FAIL into a PASS.

Each example draws a baseline and a current summary (1-4 ranks, optionally pipeline stages), a set of gates
(relative and absolute, any aggregation, limits anywhere in their valid range), and one mutation of one side:
a rank dropped, a field nulled, a value made NaN, a rank duplicated (a stray copy of another rank's numbers
under its number), the ranks reordered, a second pipeline replica added (stage rows under new rank numbers, with
other bubbles: the old gate kept one row per stage number, so a healthier replica replaced a failing one), or a
run list added (the summary of a folder that held several runs). The expected answer is computed here, not by
the gate:

- the verdict never goes from FAIL to PASS (an input error, exit 2, is not a PASS either);
- a mutation that removes a gated value on a rank where it was defined (drop, null, NaN, duplicate) makes it
  FAIL: the aggregate would otherwise be taken over the other ranks only;
- reordering the ranks changes nothing;
- a summary of several runs is refused (an input error) when no run is named, as `check` refuses it;
- a replica added to the current run with every stage at a 100 % bubble fails any `max` bubble gate below 1.

300 examples by default (a few seconds, derandomized: the same examples every run); `make fuzz` runs 10,000
(`LLMDIAG_FUZZ_EXAMPLES`).
"""

from __future__ import annotations

import copy
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.gate.sides import summary_run
from llmdiag.diagnose.gate.verdict import AGGS, METRICS, Gate, evaluate, parse_limit
from llmdiag.diagnose.model.analysis import Analysis
from tests.unit.gate.test_gate import GiB, make_pipeline, make_summary

EXAMPLES = int(os.environ.get("LLMDIAG_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize="LLMDIAG_FUZZ_SEED" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# the summary field each metric reads, per rank (bubble: per stage, in the pipeline)
FIELD = {"overlap_ratio": "overlap_ratio", "exposed_comm": "exposed_comm_frac", "step_time": "step_time_ms",
         "memory_peak": "memory"}
ratio = st.floats(0.0, 1.0)


@st.composite
def side(draw, n: int, stages: int) -> dict:
    per = {r: {"overlap": draw(ratio), "exposed": draw(ratio), "step": draw(st.floats(1.0, 1000.0)),
               "mem": draw(st.integers(1 << 20, 8 * GiB))} for r in range(n)}  # 1 % of it is >= 10 kB
    pipe = make_pipeline([draw(ratio) for _ in range(stages)]) if stages else None
    return make_summary(n=n, ranks=per, pipeline=pipe)


def limit(metric: str, rule: str):
    unit = METRICS[metric].unit
    if rule in ("max_rise", "max_drop") and unit != "ratio":
        return st.one_of(st.integers(0, 100 if rule == "max_drop" else 500).map(lambda p: f"{p}%"),
                         st.floats(0.0, 2000.0 if unit == "ms" else 8.0 * GiB))
    if unit == "ratio":
        return st.one_of(ratio, st.integers(0, 100).map(lambda p: f"{p}%"))
    return st.floats(0.0, 2000.0 if unit == "ms" else 8.0 * GiB)


@st.composite
def gate_set(draw, baseline: bool) -> list[Gate]:
    rules = ("max_rise", "max_drop", "min", "max") if baseline else ("min", "max")
    specs = draw(st.lists(st.tuples(st.sampled_from(list(METRICS)), st.sampled_from(rules)), min_size=1,
                          max_size=4, unique=True))
    return [Gate(m, r, parse_limit(draw(limit(m, r)), METRICS[m], r), draw(st.sampled_from(AGGS)))
            for m, r in specs]


def mutate(s: dict, op: str, i: int, metric: str, donor: int) -> dict:
    s = copy.deepcopy(s)
    ranks = s["ranks"]
    i %= len(ranks)
    if op == "drop":
        del ranks[i]
    elif op == "reorder":
        ranks.reverse()
        ranks[:] = ranks[i:] + ranks[:i]
    elif op == "duplicate":  # a stray copy of another rank's numbers, under rank i's number
        extra = copy.deepcopy(ranks[donor % len(ranks)])
        extra["rank"] = ranks[i]["rank"]
        ranks.insert(donor % (len(ranks) + 1), extra)
    elif op == "runs":  # the folder held 2-4 runs; the summary analysed one of them (the newest may be incomplete)
        n = 2 + donor % 3
        s["runs"] = [{"number": k + 1, "files": 2 - (k == n - 1 and i % 2), "ranks": [0, 1][: 2 - (k == n - 1 and i % 2)],
                      "world_size": 2, "analysed": k == i % n} for k in range(n)]
    elif op == "replica":
        pipe = s.get("pipeline")
        if pipe and pipe["stage_bubbles"]:
            # the new replica takes the low rank numbers (it sorts first in each stage), the old one moves up: a
            # stage-number key kept the old replica's rows and never saw the new one
            rows = pipe["stage_bubbles"]
            new = [{**b, "measured": 1.0 if donor % 2 else (b["measured"] + 0.37 * (donor + 1)) % 1.0} for b in rows]
            old = [{**b, "rank": 100 + b["rank"]} for b in rows]
            pipe["groups"] = [[b["rank"] for b in new], [b["rank"] for b in old]]
            pipe["stage_bubbles"] = sorted(new + old, key=lambda b: (b["stage"], b["rank"]))
    elif metric == "bubble":
        stages = (s.get("pipeline") or {}).get("stage_bubbles") or []
        if stages:
            stages[i % len(stages)]["measured"] = None if op == "null" else math.nan
    elif metric == "memory_peak":
        ranks[i]["memory"] = [] if op == "null" else [{**ranks[i]["memory"][0], "peak_allocated": math.nan}]
    else:
        ranks[i][FIELD[metric]] = None if op == "null" else math.nan
    return s


def verdict(cur: dict, base: dict | None, gates: list[Gate]) -> str:
    """"pass", "fail" or "error" (an input error: exit 2). NaN goes in as the value itself, past the JSON reader
    (which refuses it), to reach the gate the way a future reader's bug would."""
    try:
        c, b = typed_nan(cur), (typed_nan(base) if base is not None else None)
        c = summary_run(c, "current.json", "current", None)  # as `check` reads a summary, no --run given
        b = summary_run(b, "baseline.json", "baseline", None) if b is not None else None
    except LlmdiagError:
        return "error"
    return evaluate(c, b, gates).status


def typed_nan(s: dict) -> Analysis:
    nan = [(k, x) for k, x in _nan_paths(s)]
    clean = copy.deepcopy(s)
    for path, _ in nan:
        _set(clean, path, 0)  # a placeholder every number field takes, int or float
    a = Analysis.from_dict(clean, "mutated summary")
    for path, _ in nan:
        _set_attr(a, path, math.nan)
    return a


def _nan_paths(v, path=()):
    if isinstance(v, float) and math.isnan(v):
        yield path, v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _nan_paths(x, path + (k,))
    elif isinstance(v, list):
        for k, x in enumerate(v):
            yield from _nan_paths(x, path + (k,))


def _set(d, path, value):
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _set_attr(obj, path, value):
    for k in path[:-1]:
        obj = obj[k] if isinstance(k, int) else getattr(obj, k)
    if isinstance(path[-1], int):
        obj[path[-1]] = value
    else:
        object.__setattr__(obj, path[-1], value)


def jitter(s: dict, draw) -> dict:
    """`s` with each rank's values moved a little (at most 0.01 of a ratio, 1 % of a time or size)."""
    s = copy.deepcopy(s)
    small = st.floats(-1.0, 1.0)
    for r in s["ranks"]:
        for f in ("overlap_ratio", "exposed_comm_frac"):
            r[f] = min(1.0, max(0.0, r[f] + 0.01 * draw(small)))
        r["step_time_ms"] *= 1 + 0.01 * draw(small)
        r["memory"][0]["peak_allocated"] = int(r["memory"][0]["peak_allocated"] * (1 + 0.01 * draw(small)))
    return s


@st.composite
def passing_gates(draw, cur: dict, baseline: bool) -> list[Gate]:
    """Gates `cur` passes against a jittered copy of its baseline: relative limits wider than the jitter, absolute
    limits beyond every rank's value."""
    pipe = cur.get("pipeline")
    names = draw(st.lists(st.sampled_from([*FIELD, *(["bubble"] if pipe else [])]), min_size=1, max_size=4,
                          unique=True))
    out = []
    for m in names:
        vals = ([b["measured"] for b in pipe["stage_bubbles"]] if m == "bubble" else
                [r[FIELD[m]] if m != "memory_peak" else r["memory"][0]["peak_allocated"] for r in cur["ranks"]])
        unit, agg = METRICS[m].unit, draw(st.sampled_from(AGGS))
        rule = draw(st.sampled_from(("max_rise", "max_drop", "min", "max") if baseline else ("min", "max")))
        if rule in ("max_rise", "max_drop"):
            raw = draw(st.floats(0.03, 1.0)) if unit == "ratio" else f"{draw(st.integers(3, 100))}%"
        elif rule == "min":
            raw = min(vals) * draw(st.floats(0.0, 0.999))
        else:
            raw = max(vals) * draw(st.floats(1.001, 1.5)) + (0 if unit == "bytes" else 1e-9)
            raw = min(raw, 1.0) if unit == "ratio" else raw
        out.append(Gate(m, rule, parse_limit(raw, METRICS[m], rule), agg))
    return out


@SETTINGS
@given(data=st.data(), n=st.integers(1, 4), stages=st.sampled_from([0, 0, 2, 3]), with_base=st.booleans(),
       passing=st.booleans(), op=st.sampled_from(["drop", "null", "nan", "duplicate", "reorder", "replica", "runs"]),
       on_base=st.booleans(), i=st.integers(0, 7), donor=st.integers(0, 7),
       metric=st.sampled_from([*FIELD, "bubble"]))
def test_no_mutation_turns_fail_into_pass(data, n, stages, with_base, passing, op, on_base, i, donor, metric):
    """`passing`: a current run that passes (a jittered copy of the baseline, gates wider than the jitter);
    otherwise independent sides and gates, which mostly fail."""
    base = data.draw(side(n, stages))
    if passing:
        cur = jitter(base, data.draw)
        gates = data.draw(passing_gates(cur, with_base))
    else:
        cur = data.draw(side(n, stages))
        gates = data.draw(gate_set(with_base))
    base = base if with_base else None
    before = verdict(cur, base, gates)
    if passing:
        assert before == "pass", [(g.metric, g.rule, g.limit) for g in gates]
    on_base = on_base and base is not None
    mutated = mutate(base if on_base else cur, op, i, metric, donor)
    after = verdict(cur, mutated, gates) if on_base else verdict(mutated, base, gates)
    assert not (before == "fail" and after == "pass"), (op, metric, on_base, [g.metric for g in gates])
    if op == "reorder":
        assert after == before
    if op == "runs":
        assert after == "error"
    bubble_max = [g for g in gates if g.metric == "bubble" and g.rule == "max" and g.limit.value < 1 - 1e-9]
    if op == "replica" and not on_base and stages and donor % 2 and bubble_max:
        assert after == "fail", [(g.rule, g.agg, g.limit) for g in bubble_max]
    # the baseline's values matter to gates against it; an absolute gate reads the current run alone
    gated = {g.metric for g in gates if not on_base or g.rule in ("max_rise", "max_drop")}
    removes = op in ("drop", "duplicate") or (metric in gated and (metric != "bubble" or stages))
    if op not in ("reorder", "replica", "runs") and removes and _changed(base if on_base else cur, mutated, gated):
        assert after != "pass", (op, metric, on_base, [(g.metric, g.rule, g.agg) for g in gates])


def _changed(orig: dict, mutated: dict, gated: set[str]) -> bool:
    """Whether the mutation took a gated value away (or doubled a rank): the independent answer."""
    if len(orig["ranks"]) != len(mutated["ranks"]):
        return True
    try:
        o, m = typed_nan(orig), typed_nan(mutated)
    except LlmdiagError:  # a required number nulled: the summary no longer reads
        return True
    for name in gated:
        if name == "bubble":
            ob = [b.measured for b in (o.pipeline.stage_bubbles if o.pipeline else [])]
            mb = [b.measured for b in (m.pipeline.stage_bubbles if m.pipeline else [])]
            if [x is None or math.isnan(x) for x in ob] != [x is None or math.isnan(x) for x in mb]:
                return True
            continue
        get = {"overlap_ratio": lambda r: r.overlap_ratio, "exposed_comm": lambda r: r.exposed_comm_frac,
               "step_time": lambda r: r.step_time_ms, "memory_peak": lambda r: r.memory_peak}[name]
        for a, b in zip(o.ranks, m.ranks):
            x, y = get(a), get(b)
            if (x is None or math.isnan(x)) != (y is None or (isinstance(y, float) and math.isnan(y))):
                return True
    return False


@SETTINGS
@given(data=st.data(), n=st.integers(1, 4), stages=st.sampled_from([2, 3]), agg=st.sampled_from(AGGS),
       rule=st.sampled_from(["max", "max_rise"]), on_top=st.booleans())
def test_a_failing_replica_is_never_hidden_by_another(data, n, stages, agg, rule, on_top):
    """A second pipeline replica at a 100 % bubble on every stage, added to a passing current run, fails any bubble
    gate it exceeds, under every aggregation, whether it sorts first or last among the stage rows (the stage-number
    key hid it when it sorted first). The expected answer: 1.0 against the limit, computed here."""
    base = data.draw(side(n, stages))
    cur = copy.deepcopy(base)
    worst = max(b["measured"] for b in base["pipeline"]["stage_bubbles"])
    raw = data.draw(st.floats(0.0, 0.999)) if rule == "max" else data.draw(st.floats(0.0, 0.999 - worst) if
                                                                            worst < 0.999 else st.just(0.0))
    g = [Gate("bubble", rule, parse_limit(raw, METRICS["bubble"], rule), agg)]
    if (rule == "max" and raw < worst) or (rule == "max_rise" and 1.0 - worst <= raw + 1e-9):
        return  # the run fails already, or 100 % is within the limit
    assert verdict(cur, base, g) == "pass"
    pipe = cur["pipeline"]
    rows = pipe["stage_bubbles"]
    bad = [{**b, "measured": 1.0} for b in rows]
    moved = [{**b, "rank": 100 + b["rank"]} for b in (rows if on_top else bad)]
    kept = bad if on_top else rows
    pipe["stage_bubbles"] = sorted(kept + moved, key=lambda b: (b["stage"], b["rank"]))
    pipe["groups"] = [[b["rank"] for b in kept], [b["rank"] for b in moved]]
    assert verdict(cur, base, g) == "fail", (rule, raw, agg, on_top)
