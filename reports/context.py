"""The report's view model: which ranks to show, the shared cross-rank views, every number tagged.

A number read directly from the analysis is a `Num` carrying its summary path (`ranks.3.step_time_ms`,
the key `Analysis.to_dict()` writes it under); it renders as `<span data-k=path data-u=unit>` with the
shared `fmt`, so tests check each printed number against the JSON. Cross-rank numbers come from
`llmdiag.diagnose.model.views` (the terminal prints the same rows) and carry no path unless they are one rank's
exact value. With hundreds of ranks the tables show the distribution first, then at most MAX_RANKS ranks
picked as the worst.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from operator import attrgetter

from markupsafe import Markup, escape

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.model import views
from llmdiag.diagnose.model.analysis import Analysis, PipelineAction, RankMetrics
from llmdiag.diagnose.model.fields import FIELDS
from llmdiag.diagnose.model.format import column_unit, fmt, header_unit, ranges
from llmdiag.diagnose.model.idle_view import IDLE_COLUMNS, IDLE_HEADER, IDLE_NOTE, idle_rows
from llmdiag.diagnose.model.dims import layout_text
from llmdiag.diagnose.model.names import demangle_many, short_names
from llmdiag.diagnose.model.pack import file_schema
from llmdiag.diagnose.model.runs import others_hint
from llmdiag.diagnose.model.views import DISTRIBUTIONS
from llmdiag.reports import charts
from llmdiag.reports.kernel_views import kernel_views
from llmdiag.reports.critical_path import critical_path_view
from llmdiag.reports.steps import step_view

MAX_RANKS = 32
MAX_MEMORY_SERIES = 8
TOP_KERNELS = 20
MAX_LIST = 40
KERNEL_NAME_WIDTH = 64  # cut in the middle and kept distinct (model/names.py); the full name on hover


SIGNED = ("pct", "x")  # units whose suffix is part of the number, printed in every cell


class Num:
    """A printed number: value, summary path (None when derived), unit, unit suffix shown or not."""

    __slots__ = ("v", "k", "u", "suffix")

    def __init__(self, v, k: str | None, u: str, suffix: bool = False):
        # a share or a factor always carries its sign ("42.4%", "1.20×"): a bare 42.4 under "share" reads as a
        # ratio or a count (the gate's config uses ratios); other units are stated once, in the column header
        self.v, self.k, self.u, self.suffix = v, k, u, suffix or u in SIGNED

    @property
    def s(self) -> Num:
        return Num(self.v, self.k, self.u, True)

    def __html__(self) -> str:
        # Markup.format's escaping of each argument, spelled out: its string.Formatter pass cost ~25 us a number,
        # ~5 ms of every report (hundreds of numbers)
        text = escape(fmt(self.v, self.u, self.suffix))
        if self.k is None:
            return Markup(f'<span class="n d" data-u="{escape(self.u)}" data-s="{int(self.suffix)}">{text}</span>')
        return Markup(f'<span class="n" data-k="{escape(self.k)}" data-u="{escape(self.u)}" '
                      f'data-s="{int(self.suffix)}">{text}</span>')

    def __str__(self) -> str:
        return fmt(self.v, self.u, self.suffix)


class Paths:
    """Summary paths of values inside one analysis, for `Num`: the index of a rank, a stat, a step."""

    def __init__(self, a: Analysis):
        self.a = a
        self.index = {r.rank: i for i, r in enumerate(a.ranks)}

    def rank(self, rank: int | None, key: str) -> str | None:
        i = self.index.get(rank)
        return None if i is None else f"ranks.{i}.{key}"

    def comm(self, rank: int | None, kind: str, pg: str, key: str) -> str | None:
        i = self.index.get(rank)
        if i is None:
            return None
        j = next((j for j, c in enumerate(self.a.ranks[i].comm_by_kind) if (c.kind, c.pg) == (kind, pg)), None)
        return None if j is None else f"ranks.{i}.comm_by_kind.{j}.{key}"

    def step(self, rank: int, step: int) -> str | None:
        i = self.index.get(rank)
        j = next((j for j, st in enumerate(self.a.ranks[i].steps) if st.step == step), None) if i is not None else None
        return None if j is None else f"ranks.{i}.steps.{j}.time_ms"

    def memory(self, row: views.MemoryRow) -> str:
        i = self.index[row.rank]
        j = next(j for j, m in enumerate(self.a.ranks[i].memory) if m is row.stat)
        return f"ranks.{i}.memory.{j}."


OUTLIER_TESTS = [  # (why, value of a rank, +1 where higher is worse / -1 where lower is, unit): model/fields.py's
    (why, attrgetter(k), 1 if FIELDS[k].better == "lower" else -1, FIELDS[k].unit)
    for why, k in (("slow step", "step_time_ms"), ("exposed comm", "exposed_comm_frac"), ("idle", "idle_frac"),
                   ("low overlap", "overlap_ratio"))
]


def pick_ranks(ranks: list[RankMetrics], k: int = MAX_RANKS) -> tuple[list[int], dict[int, list[str]]]:
    """Indices of the ranks to list: all when ≤ k; else the outliers, named with why. A rank is an outlier
    on a metric when it lies on the bad side of the median by more than 3 scaled MADs and 2 % of the median
    (so 32 identical ranks are not listed as "the worst"), and shares by half a point; at most k, largest
    deviation first."""
    if len(ranks) <= k:
        return list(range(len(ranks))), {}
    found: dict[int, list[tuple[float, str]]] = {}
    for why, get, sign, unit in OUTLIER_TESTS:
        vals = [(i, get(r)) for i, r in enumerate(ranks) if get(r) is not None]
        if len(vals) < 3:
            continue
        xs = [v for _, v in vals]
        med = statistics.median(xs)
        mad = 1.4826 * statistics.median(abs(v - med) for v in xs)
        # a share must also move by half a point: idle 1e-8 vs a median of 1e-9 printed "0.0% (median 0.0%)"
        limit = max(3 * mad, 0.02 * abs(med), 0.005 if unit == "pct" else 1e-9)
        for i, v in vals:
            dev = (v - med) * sign
            if dev > limit:
                found.setdefault(i, []).append((dev / limit, f"{why} {fmt(v, unit)} (median {fmt(med, unit)})"))
    order = sorted(found, key=lambda i: (-max(d for d, _ in found[i]), ranks[i].rank))[:k]
    idx = sorted(order, key=lambda i: ranks[i].rank)
    return idx, {i: [w for _, w in sorted(found[i], reverse=True)] for i in idx}


def distributions(a: Analysis, paths: Paths) -> list[tuple]:
    """(label, glossary key, {min|median|p90|max: (Num, rank)}) from `views.spread`: each an exact rank value."""
    out = []
    for label, key, unit, g in DISTRIBUTIONS:
        sp = views.spread(a, key)
        if sp:
            out.append((label, g, {w: (Num(v, paths.rank(rank, key), unit), rank)
                                   for w, (v, rank) in (("min", sp.min), ("median", sp.median), ("p90", sp.p90),
                                                         ("max", sp.max))}))
    return out


@dataclass(frozen=True)
class CommView:
    """One `views.CommGroupRow` with its printed numbers (per step, mean over the ranks that run it)."""

    row: views.CommGroupRow
    ops: Num
    time: Num
    exposed: Num
    overlap: Num
    worst: Num
    msg: Num
    algbw: Num
    busbw: Num
    busbw_min: Num
    of_peak: Num


def comm_units(rows: list[CommView]) -> dict[str, tuple[str, str]]:
    """Column -> (unit, header name) fitted to the column's values (bytes B…GiB, bandwidth MB/s or GB/s)."""
    out = {}
    for col, unit in (("msg", "gib"), ("algbw", "gbps"), ("busbw", "gbps"), ("busbw_min", "gbps")):
        u = column_unit([getattr(c, col).v for c in rows], unit)
        for c in rows:
            getattr(c, col).u = u
        out[col] = (u, header_unit(u))
    return out


def comm_rows(a: Analysis, paths: Paths) -> list[CommView]:
    out = []
    for g in views.comm_by_group(a):
        out.append(CommView(
            g, Num(g.ops_per_step, None, "avg"), Num(g.time_ms_per_step, None, "ms"),
            Num(g.exposed_ms_per_step, None, "ms"), Num(g.overlap, None, "pct"),
            Num(g.worst_overlap, paths.comm(g.worst_rank, g.kind, g.pg, "overlap_ratio"), "pct"),
            Num(g.msg_bytes, None, "gib"), Num(g.algbw_gbps, None, "gbps"), Num(g.busbw_gbps, None, "gbps"),
            Num(g.busbw_min_gbps, paths.comm(g.busbw_min_rank, g.kind, g.pg, "busbw_gbps"), "gbps"),
            Num(g.of_link_peak, None, "pct")))
    return out


def kernel_rows(a: Analysis, top: int = TOP_KERNELS) -> list[dict]:
    """`views.kernel_table`: per step, mean over the ranks whose top-K list holds the kernel (all derived)."""
    rows = views.kernel_table(a, top)
    full = demangle_many(k.name for k in rows)
    short = short_names(list(dict.fromkeys(full.values())), KERNEL_NAME_WIDTH)
    return [{"k": k, "full": full[k.name], "short": short[full[k.name]], "ms": Num(k.ms_per_step, None, "ms"),
             "count": Num(k.count_per_step, None, "avg"), "mean": Num(k.mean_us, None, "us"),
             "max": Num(k.max_us, None, "us"), "share": Num(k.share, None, "pct")} for k in rows]


def memory_rows(a: Analysis, paths: Paths, k: int = MAX_RANKS) -> list[dict]:
    """`views.memory_use`, closest to capacity first; each number is one device's exact value."""
    rows, seen = [], set()
    for x in views.memory_use(a)[:k]:
        p, m = paths.memory(x), x.stat
        rows.append({"rank": x.rank, "m": m, "frac": x.frac, "first": x.rank not in seen,
                     "alloc": Num(m.peak_allocated, p + "peak_allocated", "gib"),
                     "reserved": Num(m.peak_reserved, p + "peak_reserved", "gib"),
                     "capacity": Num(m.capacity, p + "capacity", "gib"), "of_cap": Num(x.frac, None, "pct"),
                     "at": Num(m.peak_ms, p + "peak_ms", "ms")})
        seen.add(x.rank)
    return rows


def memory_units(rows: list[dict]) -> dict[str, str]:
    """Each byte column in the unit that prints its largest value at 1 or more; column -> header unit."""
    out = {}
    for col in ("alloc", "reserved", "capacity"):
        u = column_unit([r[col].v for r in rows], "gib")
        for r in rows:
            r[col].u = u
        out[col] = header_unit(u)
    return out


def step_rows(a: Analysis, paths: Paths) -> dict:
    """The per-step block (reports/steps.py): every step's medians over ranks, the median step, outlier steps."""
    return step_view(a, Num)


def _stage0(acts: list[PipelineAction]) -> int:
    return min(x.stage for x in acts)


def pipeline_view(a: Analysis) -> dict | None:
    """Rows of one pipeline replica (the one holding the worst stage) and the window of one step."""
    p = a.pipeline
    if not p:
        return None
    sb = p.stage_bubbles
    view = {"rows": [], "t0": 0.0, "t1": 0.0, "replicas": 1, "peers": 1}
    with_acts = [r for r in a.ranks if r.pipeline_actions]
    if not with_acts:
        return view
    worst = a.rank(max(sb, key=lambda b: b.measured).rank) if sb else None
    worst = worst if worst and worst.pipeline_actions else with_acts[0]
    key = {k: v for k, v in worst.coords.items() if k != "pp"}
    replica = [r for r in with_acts if {k: v for k, v in r.coords.items() if k != "pp"} == key]
    if len(replica) < 2:  # no coordinates: one rank per first stage it holds
        seen: dict[int, RankMetrics] = {}
        for r in with_acts:
            seen.setdefault(_stage0(r.pipeline_actions), r)
        replica = list(seen.values())
    replica.sort(key=lambda r: (_stage0(r.pipeline_actions), r.rank))
    # replicas are data-parallel copies of the pipeline; TP / CP peers run the same actions and are not counted
    dp_keys = {tuple(sorted((k, v) for k, v in r.coords.items() if k not in ("pp", "tp", "cp"))) for r in with_acts
               if r.coords}
    view["replicas"] = len(dp_keys) if dp_keys else max(1, len(with_acts) // max(1, len(replica)))
    view["peers"] = max(1, len(with_acts) // max(1, len(replica)) // max(1, view["replicas"]))
    first = replica[0].pipeline_actions
    starts = sorted(x.start_ms for x in first if x.kind == "F" and x.microbatch == 0 and x.stage == _stage0(first))
    k = len(starts) // 2
    lo = starts[k] if starts else min(x.start_ms for r in replica for x in r.pipeline_actions)
    hi = starts[k + 1] if k + 1 < len(starts) else float("inf")
    view["steps_seen"] = len(starts)
    bmap = {b.rank: b for b in sb}
    for r in replica:
        acts = [x for x in r.pipeline_actions if lo - 1e-9 <= x.start_ms < hi]
        stages = sorted({x.stage for x in r.pipeline_actions})
        label = f"rank {int(r.rank)} · stage {','.join(str(int(s)) for s in stages)}"
        if r.rank in bmap:
            label += f" · bubble {fmt(bmap[r.rank].measured, 'pct')}"
        view["rows"].append((label, acts))
    ends = [x.end_ms for _, acts in view["rows"] for x in acts]
    view["t0"], view["t1"] = lo, max(ends) if ends else lo
    return view


def _pairs(d) -> str:
    return ", ".join(f"{k}={v}" for k, v in (d or {}).items() if v is not None)


def made_by(a: Analysis) -> list[tuple[str, str]]:
    """How this analysis was made (command, options, input files with sizes, version, time), or that the
    summary does not say (written by an older llmdiag, or not by `analyze`)."""
    pv = a.provenance
    if pv is None:
        return [("Made by", "not recorded (a summary written before llmdiag recorded its command)")]
    sizes = [f.bytes for f in pv.inputs if f.bytes is not None]
    shown = ", ".join(f"{f.path} ({fmt(f.bytes, 'gib')})" for f in pv.inputs[:8])
    more = f" … and {len(pv.inputs) - 8} more" if len(pv.inputs) > 8 else ""
    opts = ", ".join(f"{k}={v}" for k, v in pv.options.items()) or "defaults"
    return [("Command", " ".join(pv.command)), ("Analysis options", opts),
            ("Inputs", f"{len(pv.inputs)} file(s), {fmt(sum(sizes), 'gib')} in all: {shown}{more}"),
            ("Made", f"llmdiag {pv.version or '?'} at {pv.created_at or '?'}")]


def facts(a: Analysis) -> list[tuple[str, str]]:
    """Run facts as (label, text) pairs; the template escapes the text."""
    man = a.manifest
    rows = [("Run", a.name), ("Source", a.source), ("Trace kind", a.trace_kind)]
    if man and man.workload:
        rows.append(("Workload", man.workload))
    rows.append(("World size", f"{a.world_size or 'unknown'} ({len(a.ranks)} ranks analysed"
                 + (f", missing: {ranges(a.ranks_missing)}" if a.ranks_missing else "") + ")"))
    if a.layout:
        rows.append(("Layout", layout_text(a.layout)))
    if man and man.mesh_dim_names:
        rows.append(("Mesh", ", ".join(map(str, man.mesh_dim_names))))
    pl, p = (man.pipeline if man else None), a.pipeline
    if pl or p:
        pick = lambda name: (getattr(pl, name, None) if pl else None) or (getattr(p, name, None) if p else None)
        rows.append(("Pipeline", f"{pick('schedule')}, {pick('microbatches')} microbatches, {pick('stages')} stages, "
                     f"v={pick('stages_per_rank')}"))
    if man is None:
        schema = file_schema(len(a.ranks), a.schema_version)  # the file's: packed above 256 ranks
        return rows + [("llmdiag", f"{a.llmdiag_version or '?'} (summary schema {schema})")]
    if man.device:
        d = man.device
        mem = fmt(d.memory_bytes, "gib") if d.memory_bytes else "memory unknown"
        rows.append(("Device", f"{d.count or '?'} × {d.name or '?'} ({d.type or '?'}, {mem})"))
    for label, v in (("Backend", man.backend), ("dtype", man.dtype), ("torch", man.torch_version),
                     ("Tokens per step", man.tokens_per_step), ("Status", man.status), ("Started", man.started_at)):
        if v is not None:
            rows.append((label, fmt(v, "int") if isinstance(v, int) else str(v)))
    for label, v in (("Model", _pairs(man.model)), ("Batch", _pairs(asdict(man.batch)) if man.batch else ""),
                     ("Options", _pairs(man.options)), ("Command", " ".join(map(str, man.command)))):
        if v:
            rows.append((label, v))
    schema = file_schema(len(a.ranks), a.schema_version)
    rows.append(("llmdiag", f"{a.llmdiag_version or man.llmdiag_version or '?'} (summary schema {schema})"))
    return rows


def safe_label(name: str) -> str:
    """A device name for a figure label: figures never carry raw trace strings."""
    return str(name) if re.fullmatch(r"[A-Za-z0-9:_]{1,16}", str(name)) else "device"


def _list(xs, n: int = MAX_LIST) -> str:
    xs = list(xs or [])
    return ", ".join(map(str, xs[:n])) + (f" … and {len(xs) - n} more" if len(xs) > n else "")


def build(a: Analysis) -> dict:
    """Everything the template needs, computed once."""
    paths = Paths(a)
    idx, why = pick_ranks(a.ranks)
    agg = a.aggregate
    warn = [(r.rank, w) for r in a.ranks for w in r.warnings]
    skew = a.skew
    last = sorted(skew.last_arrivals.items(), key=lambda kv: -kv[1])[:10] if skew else []
    mem = memory_rows(a, paths)
    comm = comm_rows(a, paths)
    gpu_mem = [x for x in mem if x["m"].device != "cpu"] or mem  # plot device memory when there is any
    shown_mem = [(f"rank {int(x['rank'])} {safe_label(x['m'].device)}", x["m"]) for x in gpu_mem[:MAX_MEMORY_SERIES]]
    worst = paths.index.get(agg.overlap_worst_rank) if agg.overlap_worst_rank is not None else None
    stepv = step_rows(a, paths)
    return {
        "a": a, "agg": agg, "ranks": a.ranks, "shown": [(i, a.ranks[i], why.get(i, [])) for i in idx],
        "omitted": len(a.ranks) - len(idx), "dist": distributions(a, paths), "stepv": stepv, "steps": stepv["rows"],
        "comm": comm, "comm_units": comm_units([c for c in comm if c.busbw.v is not None]), "link_note": views.link_note(a), "p2p_note": views.comm_note(a), "kernels": kernel_rows(a),
        "memory": mem, "memory_units": memory_units(mem), "memory_series": shown_mem,
        "pipe": pipeline_view(a), "facts": facts(a), "runs_hint": others_hint(a.runs), "made_by": made_by(a), "warnings": warn[:200], "warnings_more": max(0, len(warn) - 200),
        "worst_overlap": worst, "last_arrivals": last, "skew": skew,
        "stragglers": views.stragglers(a)[:MAX_RANKS],
        "host_shift": sorted(skew.host_shift_ms.items())[:32] if skew else [], "hosts": views.hosts(a),
        "oversubscribed": bool(a.manifest and a.manifest.oversubscribed), "list": _list, "ranges": ranges,
        "Num": Num, "step_series": charts.step_series(a), "whatif": whatif_view(a),
        "idle": idle_view(a),
        "kv": kernel_views(a, Num),
        "cpath": critical_path_view(a, Num),
    }


def idle_view(a: Analysis) -> dict | None:
    """The idle-by-cause section (diagnose.model.idle_view; the terminal prints the same rows), each number
    tagged with its summary path."""
    rows, n = idle_rows(a, MAX_RANKS)
    if not any(x.idle.idle_ms > 0 for x in rows):
        return None
    out = []
    for x in rows:
        p = f"ranks.{x.index}.idle."
        out.append({"rank": x.rank, "idle": Num(x.idle.idle_ms, p + "idle_ms", "ms"),
                    "parts": [Num(getattr(x.idle, f), p + f, "ms") for _, f in IDLE_COLUMNS],
                    "top_call": x.top_call, "top_ms": Num(x.top_ms, None, "ms")})
    return {"rows": out, "header": IDLE_HEADER, "note": IDLE_NOTE, "more": n - len(rows)}


def whatif_view(a: Analysis) -> dict | None:
    """The what-if section's rows, formatted by diagnose.model.whatif_view (the terminal prints the same)."""
    w = a.whatif
    if w is None:
        return None
    # imported only for a run with a what-if (its model types are ~1 % of a small report run's imports)
    from llmdiag.diagnose.model.whatif_view import (CONTRIB_HEADER, STAGE_HEADER, contribution_rows, plant_of,
                                                    stage_rows, whatif_cards)

    return {"cards": whatif_cards(w, plant_of(a)), "stages": stage_rows(w), "stage_header": STAGE_HEADER,
            "imbalance": fmt(w.imbalance, "pct"), "header": CONTRIB_HEADER,
            "rows": contribution_rows(w) if not w.missing else []}
