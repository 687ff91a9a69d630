"""`llmdiag diff`: two summaries side by side, as plain data a terminal table and the HTML both render.

Ranks are matched by rank number when both sides have the same ranks; otherwise only aggregates over
ranks are compared, and the result says so (`aggregate_only`), because rank 3 of an 8-rank job and rank 3
of a 16-rank job are not the same worker. Kernel times are per step and per rank, so runs with different
step counts or world sizes still compare; a kernel is "new" or "vanished" relative to each side's
top-kernel list, which is truncated, and the labels say that too.
"""

from __future__ import annotations

from diagnose.errors import printable
from diagnose.gate.verdict import METRICS, aggregate, fmt_value, units, world_size
from diagnose.gate.format import table

SAME_REL = 0.02  # changes under 2 % (or 0.01 for ratios) read as "same"
SAME_RATIO = 0.01


def _mean(vals):
    vals = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(vals) / len(vals) if vals else None


def _row(name: str, unit: str, a, b, better: str | None = None) -> dict:
    delta = rel = None
    change = ""
    if a is not None and b is not None:
        delta = b - a
        rel = delta / abs(a) if a else None
        small = abs(delta) < SAME_RATIO if unit == "ratio" else (rel is not None and abs(rel) < SAME_REL) or delta == 0
        if small:
            change = "same"
        elif better:
            change = "better" if (delta > 0) == (better == "higher") else "worse"
        else:
            change = "up" if delta > 0 else "down"
    return {"name": name, "unit": unit, "a": a, "b": b, "delta": delta, "rel": rel, "better": better,
            "change": change}


def _rank_mean(s: dict, key: str):
    return _mean([r.get(key) for r in s.get("ranks") or []])


def _agg(s: dict, key: str):
    v = (s.get("aggregate") or {}).get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _steps(r: dict) -> int:
    return max(1, len(r.get("steps") or []))


def _comm(s: dict) -> dict:
    """kind -> {ms: per step per rank, overlap: duration-weighted, busbw: mean}."""
    out: dict = {}
    n = max(1, len(s.get("ranks") or []))
    for r in s.get("ranks") or []:
        for c in r.get("comm_by_kind") or []:
            d = out.setdefault(c["kind"], {"ms": 0.0, "ov": 0.0, "tot": 0.0, "bw": []})
            d["ms"] += (c.get("total_ms") or 0.0) / _steps(r) / n
            d["ov"] += c.get("overlapped_ms") or 0.0
            d["tot"] += c.get("total_ms") or 0.0
            if c.get("busbw_gbps") is not None:
                d["bw"].append(c["busbw_gbps"])
    return {k: {"ms": d["ms"], "overlap": d["ov"] / d["tot"] if d["tot"] else None, "busbw": _mean(d["bw"])}
            for k, d in out.items()}


def _kernels(s: dict) -> dict:
    """name -> {kind, ms: time per step per rank (0 where absent from a rank's top list)}."""
    out: dict = {}
    n = max(1, len(s.get("ranks") or []))
    for r in s.get("ranks") or []:
        for k in r.get("top_kernels") or []:
            d = out.setdefault(k["name"], {"kind": k.get("kind", ""), "ms": 0.0})
            d["ms"] += (k.get("total_ms") or 0.0) / _steps(r) / n
    return out


def _memory(s: dict, key: str):
    vals = [m.get(key) for r in s.get("ranks") or [] for m in r.get("memory") or []]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return max(vals) if vals else None


def _side(s: dict, name: str) -> dict:
    return {"label": printable(s.get("name") or s.get("source") or name), "source": printable(s.get("source") or ""),
            "world_size": world_size(s), "trace_kind": s.get("trace_kind"),
            "ranks": sorted(r["rank"] for r in s.get("ranks") or []), "layout": s.get("layout"),
            "ranks_missing": s.get("ranks_missing") or []}


def _drop_empty(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["a"] is not None or r["b"] is not None]


def compare(a: dict, b: dict, top: int = 10) -> dict:
    sa, sb = _side(a, "A"), _side(b, "B")
    matched = sa["world_size"] == sb["world_size"] and sa["ranks"] == sb["ranks"]
    notes = []
    if sa["world_size"] != sb["world_size"]:
        notes.append(f"world sizes differ ({sa['world_size']} vs {sb['world_size']}): aggregate-only "
                     "comparison (means and extremes over ranks), no rank-by-rank rows")
    elif not matched:
        notes.append("rank sets differ: aggregate-only comparison over the ranks each side has")
    if sa["trace_kind"] and sb["trace_kind"] and sa["trace_kind"] != sb["trace_kind"]:
        notes.append(f"trace kinds differ ({sa['trace_kind']} vs {sb['trace_kind']}): CPU and GPU "
                     "timings measure different things")
    if sa["layout"] and sb["layout"] and sa["layout"] != sb["layout"]:
        notes.append(f"layouts differ ({sa['layout']} vs {sb['layout']})")
    sections = []

    def pair(name: str, unit: str, get, better: str | None = None) -> dict:
        return _row(name, unit, get(a), get(b), better)

    step = [("step time", "step_time_ms", "lower"), ("compute", "compute_ms", None),
            ("communication", "comm_ms", None), ("  overlapped", "overlapped_comm_ms", None),
            ("  exposed", "exposed_comm_ms", "lower"), ("compute only", "compute_only_ms", None),
            ("memcpy/memset", "other_ms", "lower"), ("idle", "idle_ms", "lower")]
    rows = [_row(n, "ms", _rank_mean(a, k), _rank_mean(b, k), d) for n, k, d in step]
    rows.append(pair("step time, slowest rank", "ms", lambda s: _agg(s, "step_time_max_ms"), "lower"))
    sections.append({"title": "Step breakdown (ms per step, mean over ranks)", "rows": _drop_empty(rows)})

    ov, ex = METRICS["overlap_ratio"], METRICS["exposed_comm"]
    rows = [pair("overlap ratio, worst rank", "ratio", lambda s: aggregate(s, ov, "min")[0], "higher"),
            pair("overlap ratio, mean", "ratio", lambda s: aggregate(s, ov, "mean")[0], "higher"),
            pair("exposed comm / step, mean", "ratio", lambda s: _rank_mean(s, "exposed_comm_frac"), "lower"),
            pair("exposed comm / step, worst", "ratio", lambda s: aggregate(s, ex, "max")[0], "lower"),
            pair("idle / step, mean", "ratio", lambda s: _rank_mean(s, "idle_frac"), "lower")]
    ca, cb = _comm(a), _comm(b)
    for kind in sorted(ca.keys() | cb.keys()):
        x, y = ca.get(kind, {}), cb.get(kind, {})
        rows += [_row(f"{kind}: ms per step", "ms", x.get("ms"), y.get("ms"), "lower"),
                 _row(f"{kind}: overlap", "ratio", x.get("overlap"), y.get("overlap"), "higher"),
                 _row(f"{kind}: bus bandwidth GB/s", "gbps", x.get("busbw"), y.get("busbw"), "higher")]
    sections.append({"title": "Overlap and communication", "rows": _drop_empty(rows)})

    rows = [pair("tokens/s", "num", lambda s: _agg(s, "tokens_per_s"), "higher"),
            pair("MFU", "ratio", lambda s: _agg(s, "mfu"), "higher"),
            pair("TFLOP/s per device", "num", lambda s: _agg(s, "achieved_tflops_per_device"), "higher")]
    sections.append({"title": "Throughput", "rows": _drop_empty(rows)})

    rows = [pair("peak allocated, max over ranks", "bytes", lambda s: _memory(s, "peak_allocated"), "lower"),
            pair("peak reserved, max over ranks", "bytes", lambda s: _memory(s, "peak_reserved"), "lower")]
    rows = [r for r in rows if r["a"] or r["b"]]  # CPU traces report no reserved memory: 0 on both sides
    sections.append({"title": "Memory", "rows": rows})

    pa, pb = a.get("pipeline") or {}, b.get("pipeline") or {}
    if pa or pb:
        rows = [_row("bubble, measured (mean over stages)", "ratio", pa.get("measured"), pb.get("measured"),
                     "lower"),
                _row("bubble, replay", "ratio", pa.get("replay"), pb.get("replay"), "lower"),
                _row("bubble, theory", "ratio", pa.get("theory"), pb.get("theory"), "lower"),
                _row("pipeline window", "ms", pa.get("window_ms"), pb.get("window_ms"), "lower"),
                _row("stage imbalance", "ratio", pa.get("imbalance"), pb.get("imbalance"), "lower")]
        ua, ub = units(a, METRICS["bubble"]), units(b, METRICS["bubble"])
        if ua.keys() == ub.keys():
            rows += [_row(f"bubble, {ub[k][0]}", "ratio", ua[k][1], ub[k][1], "lower") for k in sorted(ua)]
        sections.append({"title": f"Pipeline ({pa.get('schedule', '-')} vs {pb.get('schedule', '-')})",
                         "rows": _drop_empty(rows)})

    if matched:
        rows = []
        for name, unit, better in (("step_time", "ms", "lower"), ("overlap_ratio", "ratio", "higher"),
                                   ("exposed_comm", "ratio", "lower"), ("memory_peak", "bytes", "lower")):
            ua, ub = units(a, METRICS[name]), units(b, METRICS[name])
            rows += [_row(f"{ua[k][0]} {name}", unit, ua[k][1], ub[k][1], better) for k in sorted(ua)]
        sections.append({"title": "Per rank (matched by rank number)", "rows": _drop_empty(rows)})

    ka, kb = _kernels(a), _kernels(b)
    both = [_row(n, "ms", ka[n]["ms"], kb[n]["ms"], "lower") | {"kind": kb[n]["kind"]} for n in ka.keys() & kb.keys()]
    grew = sorted((r for r in both if r["delta"] > 0 and r["change"] != "same"), key=lambda r: -r["delta"])[:top]
    shrank = sorted((r for r in both if r["delta"] < 0 and r["change"] != "same"), key=lambda r: r["delta"])[:top]
    new = sorted(({"name": n, "kind": kb[n]["kind"], "b": kb[n]["ms"]} for n in kb.keys() - ka.keys()),
                 key=lambda r: -r["b"])[:top]
    gone = sorted(({"name": n, "kind": ka[n]["kind"], "a": ka[n]["ms"]} for n in ka.keys() - kb.keys()),
                  key=lambda r: -r["a"])[:top]
    return {"a": sa, "b": sb, "aggregate_only": not matched, "notes": notes, "sections": sections,
            "kernels": {"grew": grew, "shrank": shrank, "new": new, "vanished": gone}}


def fmt(unit: str, v) -> str:
    if v is None:
        return "-"
    if unit in ("ms", "ratio", "bytes"):
        return fmt_value(unit, v)
    if unit == "gbps":
        return f"{v:.1f}"
    return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def fmt_change(r: dict) -> str:
    if r["delta"] is None:
        return "-"
    sign = "+" if r["delta"] >= 0 else "-"
    d = fmt(r["unit"], abs(r["delta"]))
    rel = f" ({sign}{abs(r['rel']) * 100:.1f}%)" if r.get("rel") is not None and r["unit"] != "ratio" else ""
    return f"{sign}{d}{rel}"


def ranks_text(s: dict) -> str:
    n = len(s["ranks"])
    word = "rank" if n == 1 else "ranks"
    return f"{n} {word}" if n == s["world_size"] else f"world size {s['world_size']}, {n} {word} analyzed"


def _name(r: dict) -> str:
    return printable(r["name"])[:70]


def render_text(c: dict) -> str:
    a, b = c["a"], c["b"]
    out = [f"{k}: {s['label']} ({ranks_text(s)}, {s['trace_kind']})  {s['source']}" for k, s in (("A", a), ("B", b))]
    if c["aggregate_only"]:
        out.append("AGGREGATE-ONLY COMPARISON")
    out += [f"note: {n}" for n in c["notes"]]
    for s in c["sections"]:
        if not s["rows"]:
            continue
        rows = [[r["name"], fmt(r["unit"], r["a"]), fmt(r["unit"], r["b"]), fmt_change(r), r["change"]]
                for r in s["rows"]]
        out += ["", s["title"], table(["", "A", "B", "B - A", ""], rows, right={1, 2, 3})]
    k = c["kernels"]
    lab = {"grew": "Kernels/ops that grew (ms per step per rank)", "shrank": "Kernels/ops that shrank"}
    for key in ("grew", "shrank"):
        if k[key]:
            rows = [[_name(r), r["kind"], fmt("ms", r["a"]), fmt("ms", r["b"]), fmt_change(r)] for r in k[key]]
            out += ["", lab[key], table(["name", "kind", "A", "B", "B - A"], rows, right={2, 3, 4})]
    if k["new"]:
        out += ["", "New in B (not in A's top kernels)",
                table(["name", "kind", "B"], [[_name(r), r["kind"], fmt("ms", r["b"])] for r in k["new"]], {2})]
    if k["vanished"]:
        out += ["", "Vanished in B (not in B's top kernels)",
                table(["name", "kind", "A"], [[_name(r), r["kind"], fmt("ms", r["a"])] for r in k["vanished"]], {2})]
    return "\n".join(out)
