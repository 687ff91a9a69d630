"""`llmdiag diff`: two analyses side by side, as typed rows a terminal table and the HTML both render.

The numbers are the shared cross-rank views (`llmdiag.diagnose.model.views`): communication per (kind, process
group) from `comm_by_group`, kernels from `kernel_table`, headline shares and the memory peak from the
aggregate, so a row of the diff shows what the terminal and the report show for the same thing.

Ranks are matched by rank number when both sides have the same ranks; otherwise only aggregates over
ranks are compared, and the result says so (`aggregate_only`), because rank 3 of an 8-rank job and rank 3
of a 16-rank job are not the same worker. A kernel is "new" or "vanished" relative to each side's
top-kernel list, which is truncated, and the labels say that too.

Every row says its direction in one word, the same word for the same sign everywhere ("up", "down", or
"same" when small), and, where the metric has a known good direction (`MEASURES`), its effect apart:
"better" or "worse". The comparison names what differs between the sides besides the numbers (options,
layout, schedule, versions) and ends in a one-line verdict.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from operator import attrgetter

from llmdiag.diagnose.gate.format import prose, ranks_text, table
from llmdiag.diagnose.gate.path import rank_means, read, reasons, sought
from llmdiag.diagnose.gate.settings import differences
from llmdiag.diagnose.gate.verdict import GATED, METRICS, Side, describe, once, units
from llmdiag.diagnose.model import views
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.critical_path_view import CP_COLUMNS
from llmdiag.diagnose.model.codec import no_gc
from llmdiag.diagnose.model.escape import terminal
from llmdiag.diagnose.model.fields import FIELDS
from llmdiag.diagnose.model.format import fmt, fmt_delta
from llmdiag.diagnose.model.manifest import layout_text

SAME_REL = 0.02  # changes under 2 % (or 1 point for percentages) read as "same"
SAME_POINTS = 0.01

# what a row measures -> (unit, which way is better: "lower", "higher", or None where neither is)
MEASURES = {
    "time": ("ms", "lower"),  # step time, pipeline window
    "part": ("ms", None),  # compute, communication, overlapped time, a kernel: neither good nor bad alone
    "waste": ("ms", "lower"),  # exposed communication, memcpy/memset, idle
    "overlap": ("pct", "higher"),
    "waste_frac": ("pct", "lower"),  # exposed communication or idle over the step
    "busbw": ("gbps", "higher"),
    "tokens": ("tps", "higher"),
    "mfu": ("pct", "higher"),
    "tflops": ("tflops", "higher"),
    "memory": ("bytes", "lower"),
    "bubble": ("pct", "lower"),
    "imbalance": ("pct", "lower"),
    "path_share": ("pct", "lower"),  # a critical path's share off compute: host, communication, launch, gaps
    "path_compute": ("pct", "higher"),  # its compute share (gate/limits.py PathMetric: the same directions)
}


@dataclass
class Row:
    name: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None  # b − a
    rel: float | None  # delta / |a|
    better: str | None  # "lower", "higher", or None
    change: str  # up, down, same; "" where a side is undefined
    kind: str = ""  # kernels: compute, comm, memcpy, memset
    effect: str = ""  # better or worse where `better` is known and the change is not "same"; else ""


@dataclass
class Section:
    title: str
    rows: list[Row]
    note: str = ""  # printed under the rows: what was not compared, and why


@dataclass
class Kernels:
    grew: list[Row]
    shrank: list[Row]
    new: list[Row]  # only `b` defined
    vanished: list[Row]  # only `a` defined


@dataclass
class Comparison:
    a: Side
    b: Side
    aggregate_only: bool
    notes: list[str]
    sections: list[Section]
    kernels: Kernels
    differs: list[str] = field(default_factory=list)  # what differs between the sides besides the numbers (options, layout, ...)
    verdict: str = ""  # one line: the step time's change and how many rows got better or worse


def _change(unit: str, a: float, b: float) -> str:
    d = b - a
    small = d == 0 or (abs(d) < SAME_POINTS if unit == "pct" else bool(a) and abs(d / a) < SAME_REL)
    return "same" if small else ("up" if d > 0 else "down")


def row(name: str, measure: str, a, b, kind: str = "") -> Row:
    """`measure`: a MEASURES kind, or a registry field (model/fields.py) whose unit and direction it takes."""
    unit, better = MEASURES[measure] if measure in MEASURES else (FIELDS[measure].unit, FIELDS[measure].better)
    a = None if a is None else float(a)
    b = None if b is None else float(b)
    if a is None or b is None:
        return Row(name, unit, a, b, None, None, better, "", kind)
    change = _change(unit, a, b)
    effect = "" if not better or change == "same" else ("better" if (change == "up") == (better == "higher")
                                                        else "worse")
    return Row(name, unit, a, b, b - a, (b - a) / abs(a) if a else None, better, change, kind, effect)


def _defined(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.a is not None or r.b is not None]


def _attr(x, name: str):
    """A field of a view row or result that one side may not have."""
    return getattr(x, name) if x is not None else None


def _rank_mean(a: Analysis, key: str) -> float | None:
    vals = [v for v in map(attrgetter(key), a.ranks) if v is not None]
    return statistics.fmean(vals) if vals else None


def _notes(sa: Side, sb: Side, matched: bool) -> list[str]:
    notes = []
    if sa.world_size != sb.world_size:
        notes.append(f"world sizes differ ({sa.world_size} vs {sb.world_size}): aggregate-only "
                     "comparison (means and extremes over ranks), no rank-by-rank rows")
    elif not matched:
        notes.append("rank sets differ: aggregate-only comparison over the ranks each side has")
    if sa.trace_kind and sb.trace_kind and sa.trace_kind != sb.trace_kind:
        notes.append(f"trace kinds differ ({sa.trace_kind} vs {sb.trace_kind}): CPU and GPU "
                     "timings measure different things")
    la, lb = layout_text(sa.layout), layout_text(sb.layout)
    if sa.layout and sb.layout and la != lb:
        notes.append(f"layouts differ ({la} vs {lb})")
    return notes


# ---- sections -------------------------------------------------------------------------------------------
def _steps(a: Analysis, b: Analysis) -> Section:
    parts = [("", "step_time_ms"), ("", "compute_ms"), ("", "comm_ms"), ("  ", "overlapped_comm_ms"),
             ("  ", "exposed_comm_ms"), ("", "compute_only_ms"), ("", "other_ms"), ("", "idle_ms")]  # "  ": of comm
    rows = [row(indent + FIELDS[key].label, key, _rank_mean(a, key), _rank_mean(b, key)) for indent, key in parts]
    rows.append(row("step time, slowest rank", "time", a.aggregate.step_time_max_ms, b.aggregate.step_time_max_ms))
    return Section("Step breakdown (ms per step, mean over ranks)", _defined(rows))


def _overlap(a: Analysis, b: Analysis) -> Section:
    """The headline shares, read from the aggregate the report's cards print."""
    x, y = a.aggregate, b.aggregate
    ovl, exp, idle = "overlap_ratio", "exposed_comm_frac", "idle_frac"
    rows = [row(f"{FIELDS[ovl].label}, worst rank", ovl, x.overlap_ratio_min, y.overlap_ratio_min),
            row(f"{FIELDS[ovl].label}, mean", ovl, x.overlap_ratio_mean, y.overlap_ratio_mean),
            row(f"{FIELDS[exp].label}, mean", exp, x.exposed_comm_frac_mean, y.exposed_comm_frac_mean),
            row(f"{FIELDS[exp].label}, worst", exp, x.exposed_comm_frac_max, y.exposed_comm_frac_max),
            row(f"{FIELDS[idle].label}, mean", idle, x.idle_frac_mean, y.idle_frac_mean)]
    return Section("Overlap", _defined(rows))


def _group_name(g: views.CommGroupRow) -> str:
    name = f"{g.kind} {g.pg}" if g.pg else g.kind
    return f"{name} ({g.role})" if g.role != "?" else name


_GROUP_ROWS = (("ms per step", "part", "time_ms_per_step"), ("exposed ms per step", "waste", "exposed_ms_per_step"),
               ("overlap", "overlap", "overlap"), ("bus bandwidth", "busbw", "busbw_gbps"))


def _comm(a: Analysis, b: Analysis) -> Section:
    """One block of rows per (kind, process group), in B's order (most time per step first), then A-only groups."""
    ga = {(g.kind, g.pg): g for g in views.comm_by_group(a)}
    gb = {(g.kind, g.pg): g for g in views.comm_by_group(b)}
    rows = []
    for key in [*gb, *(k for k in ga if k not in gb)]:
        x, y = ga.get(key), gb.get(key)
        name = _group_name(y or x)
        rows += [row(f"{name}: {label}", m, _attr(x, field), _attr(y, field)) for label, m, field in _GROUP_ROWS]
    return Section("Communication per collective and process group (per step, mean over the ranks that run it)",
                   _defined(rows))


def _throughput(a: Analysis, b: Analysis) -> Section:
    x, y = a.aggregate, b.aggregate
    rows = [row("tokens/s", "tokens", x.tokens_per_s, y.tokens_per_s), row("MFU", "mfu", x.mfu, y.mfu),
            row("achieved FLOP/s per device", "tflops", x.achieved_tflops_per_device, y.achieved_tflops_per_device)]
    return Section("Throughput", _defined(rows))


def _reserved(a: Analysis) -> int | None:
    return max((m.stat.peak_reserved for m in views.memory_use(a) if m.stat.peak_reserved is not None), default=None)


def _memory(a: Analysis, b: Analysis) -> Section:
    rows = [row("peak allocated, max over ranks", "memory", a.aggregate.memory_peak_max, b.aggregate.memory_peak_max),
            row("peak reserved, max over ranks", "memory", _reserved(a), _reserved(b))]
    return Section("Memory", [r for r in rows if r.a or r.b])  # CPU traces record no reserved memory: 0 on both


def _pipeline(a: Analysis, b: Analysis) -> Section | None:
    pa, pb = a.pipeline, b.pipeline
    if pa is None and pb is None:
        return None
    rows = [row("bubble, measured (mean over stages)", "bubble", _attr(pa, "measured"), _attr(pb, "measured")),
            row("bubble, replay", "bubble", _attr(pa, "replay"), _attr(pb, "replay")),
            row("bubble, theory", "bubble", _attr(pa, "theory"), _attr(pb, "theory")),
            row("pipeline window", "time", _attr(pa, "window_ms"), _attr(pb, "window_ms")),
            row("stage imbalance", "imbalance", _attr(pa, "imbalance"), _attr(pb, "imbalance"))]
    ua, ub = units(a, METRICS["bubble"]), units(b, METRICS["bubble"])
    if ua.keys() == ub.keys():
        rows += [row(f"bubble, {ub[k][0]}", "bubble", ua[k][1], ub[k][1]) for k in sorted(ua)]
    return Section(f"Pipeline ({_attr(pa, 'schedule') or '-'} vs {_attr(pb, 'schedule') or '-'})", _defined(rows))


def _path(a: Analysis, b: Analysis) -> Section | None:
    """The job's critical path (length, HTA's five shares) and the mean of the ranks' paths, as the report prints
    them (gate/path.py); None where neither side's analysis sought a path (CPU traces)."""
    if not (sought(a) or sought(b)):
        return None
    rows = []
    ma, mb = rank_means(a), rank_means(b)
    for who, get in (("job", lambda x, m, f, ratio: read(x.critical_path, f, ratio)),
                     ("rank", lambda x, m, f, ratio: m[f])):
        rows.append(row(f"{who} length", "time", get(a, ma, "length_ms", False), get(b, mb, "length_ms", False)))
        rows += [row(f"{who} {word}", "path_compute" if key == "gpu_compute_bound" else "path_share",
                     get(a, ma, key, True), get(b, mb, key, True)) for word, key in CP_COLUMNS]
    notes = []
    for who, m in (("job path", "path_length"), ("rank path", "rank_path_length")):
        why = reasons([("A", a), ("B", b)], GATED[m])  # type: ignore[arg-type]
        partly = m == "rank_path_length" and None not in (ma["length_ms"], mb["length_ms"])
        if why:
            notes.append(f"{who} {'compared over the ranks that state one' if partly else 'not compared'}: {why}")
    na, nb = (sum(r.critical_path is not None for r in x.ranks) for x in (a, b))
    return Section(f"Critical path (job: the job's path; rank: the mean of the ranks' paths, over the A {na} and B {nb} "
                   "ranks that state one; ms per step, and % of the path in HTA's categories: cpu = cpu_bound, compute "
                   "= gpu_compute_bound, comm = gpu_communication_bound, launch = gpu_kernel_launch_overhead, "
                   "kernel-kernel = gpu_kernel_kernel_overhead)", _defined(rows), "\n".join(notes))


MAX_RANK_ROWS = 16  # per metric: a 16k-rank diff lists the ranks that moved most, not 65k rows


def _per_rank(a: Analysis, b: Analysis) -> Section:
    """Per metric, the ranks whose value changed (direction not "same"), largest relative change first, at
    most MAX_RANK_ROWS of them; the title says how many changed and how many ranks were compared."""
    rows, hidden = [], 0
    for name, measure in (("step_time", "time"), ("overlap_ratio", "overlap"), ("exposed_comm", "waste_frac"),
                          ("memory_peak", "memory")):
        ua, ub = units(a, METRICS[name]), units(b, METRICS[name])
        unit = MEASURES[measure][0]
        moved = [row(f"{ua[k][0]} {name}", measure, x, y) for k in sorted(ua)  # a row only where a rank moved
                 if (x := ua[k][1]) is not None and (y := ub[k][1]) is not None and _change(unit, x, y) != "same"]
        moved.sort(key=lambda x: -(abs(x.delta) * 100 if x.unit == "pct" else abs(x.rel or 0)))
        rows += moved[:MAX_RANK_ROWS]
        hidden += max(0, len(moved) - MAX_RANK_ROWS)
    n = len(a.ranks)
    title = (f"Per rank (matched by rank number; of {n} ranks, those that changed, largest change first"
             + (f"; {hidden} more changed rows not listed" if hidden else "") + ")")
    return Section(title, rows)


def _kernels(a: Analysis, b: Analysis, top: int) -> Kernels:
    """Kernels by (name, kind), in ms per step, mean over the ranks whose top-K list holds them."""
    ka = {(k.name, k.kind): k.ms_per_step for k in views.kernel_table(a, None)}
    kb = {(k.name, k.kind): k.ms_per_step for k in views.kernel_table(b, None)}
    both = [row(n, "part", ka[(n, kind)], kb[(n, kind)], kind) for n, kind in ka.keys() & kb.keys()]
    moved = [r for r in both if r.change != "same"]
    return Kernels(
        grew=sorted((r for r in moved if r.delta > 0), key=lambda r: (-r.delta, r.name))[:top],
        shrank=sorted((r for r in moved if r.delta < 0), key=lambda r: (r.delta, r.name))[:top],
        new=sorted((row(n, "part", None, v, kind) for (n, kind), v in kb.items() if (n, kind) not in ka),
                   key=lambda r: (-r.b, r.name))[:top],
        vanished=sorted((row(n, "part", v, None, kind) for (n, kind), v in ka.items() if (n, kind) not in kb),
                        key=lambda r: (-r.a, r.name))[:top])


def verdict_line(sections: list[Section]) -> str:
    """B against A in one line: the mean step time's change, then how many rows with a known direction got
    better or worse (the largest of each named), over the cross-rank rows (per-rank rows left out)."""
    rows = [r for s in sections if not s.title.startswith("Per rank") for r in s.rows]  # rank rows repeat these
    step = next((r for r in rows if r.name == "step time" and r.delta is not None), None)
    judged = [r for r in rows if r.effect and (r.rel is not None or r.unit == "pct")]
    size = lambda r: abs(r.delta) * 100 if r.unit == "pct" else abs(r.rel or 0)
    good = sorted((r for r in judged if r.effect == "better"), key=size, reverse=True)
    bad = sorted((r for r in judged if r.effect == "worse"), key=size, reverse=True)
    if step is None:
        head = "B vs A: no step time on both sides"
    elif step.change == "same":
        head = f"B runs at the same speed as A (step time {fmt_delta(step.delta, 'ms', step.a)})"
    else:
        head = (f"B is {'faster' if step.effect == 'better' else 'slower'} than A: step time "
                f"{fmt(step.a, 'ms')} → {fmt(step.b, 'ms')} ({fmt_delta(step.delta, 'ms', step.a)})")
    tail = [f"{len(good)} better" + (f" (most: {good[0].name.strip()})" if good else ""),
            f"{len(bad)} worse" + (f" (most: {bad[0].name.strip()})" if bad else "")]
    return f"{head}; {', '.join(tail)}"


def compare(a: Analysis, b: Analysis, top: int = 10, run_defaults: dict | None = None) -> Comparison:
    """B relative to A; `run_defaults`: run options a manifest predates read as these (gate/settings.py). Each
    side's per-rank values are computed once (`once`), with the cyclic collector off (as in `evaluate`)."""
    with once(), no_gc():
        return _compare(a, b, top, run_defaults)


def _compare(a: Analysis, b: Analysis, top: int, run_defaults: dict | None) -> Comparison:
    sa, sb = describe(a), describe(b)
    matched = sa.world_size == sb.world_size and sorted(r.rank for r in a.ranks) == sorted(r.rank for r in b.ranks)
    sections = [s for s in (_steps(a, b), _overlap(a, b), _comm(a, b), _throughput(a, b), _memory(a, b),
                            _pipeline(a, b), _path(a, b), _per_rank(a, b) if matched else None) if s is not None]
    return Comparison(sa, sb, not matched, _notes(sa, sb, matched), sections, _kernels(a, b, top),
                      differences(a, b, run_defaults), verdict_line(sections))


# ---- terminal -------------------------------------------------------------------------------------------
def change_text(r: Row) -> str:
    return fmt_delta(r.delta, r.unit, r.a)


def _name(r: Row) -> str:
    return terminal(r.name)[:70]


def render_text(c: Comparison) -> str:
    out = [f"{k}: {terminal(s.label)} ({ranks_text(s)}, {terminal(s.trace_kind)})  {terminal(s.source)}"
           for k, s in (("A", c.a), ("B", c.b))]
    if c.aggregate_only:
        out.append("AGGREGATE-ONLY COMPARISON")
    out += [f"differs: {terminal(d)}" for d in c.differs or []]
    out += [f"note: {terminal(n)}" for n in c.notes]
    out += ["", f"verdict: {terminal(c.verdict)}"]
    for s in c.sections:
        if s.rows:
            rows = [[terminal(r.name), fmt(r.a, r.unit), fmt(r.b, r.unit), change_text(r), r.change, r.effect]
                    for r in s.rows]
            out += ["", s.title, table(["", "A", "B", "B - A", "direction", "effect"], rows, right={1, 2, 3})]
        elif s.note:
            out += ["", s.title]
        out += s.note.split("\n") if s.note else []
    k = c.kernels
    titles = {"grew": "Kernels/ops that grew (ms per step, mean over the ranks that list them)",
              "shrank": "Kernels/ops that shrank"}
    for key, rs in (("grew", k.grew), ("shrank", k.shrank)):
        if rs:
            rows = [[_name(r), terminal(r.kind), fmt(r.a, "ms"), fmt(r.b, "ms"), change_text(r)] for r in rs]
            out += ["", titles[key], table(["name", "kind", "A", "B", "B - A"], rows, right={2, 3, 4})]
    if k.new:
        out += ["", "New in B (not in A's top kernels)",
                table(["name", "kind", "B"], [[_name(r), r.kind, fmt(r.b, "ms")] for r in k.new], {2})]
    if k.vanished:
        out += ["", "Vanished in B (not in B's top kernels)",
                table(["name", "kind", "A"], [[_name(r), r.kind, fmt(r.a, "ms")] for r in k.vanished], {2})]
    out += ["", LEGEND]
    return prose(out)


LEGEND = ('direction: "up"/"down", "same" under 2 % (1 point for percentages, whose changes are in points); '
          'effect: "better"/"worse" where the metric has a good direction')
