"""The report's view model: which ranks to show, cross-rank tables, every number tagged with its source.

A number taken from the summary is a `Num` carrying its path (`ranks.3.step_time_ms`); it renders as
`<span data-k=path data-u=unit>` with the shared `fmt`, so tests can check each printed number against the
JSON. Numbers computed here (cross-rank means) carry no path and are marked derived. With hundreds of ranks
the tables show the aggregate first and then at most MAX_RANKS ranks picked as the worst.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict

from jinja2 import Undefined
from markupsafe import Markup

from diagnose.rules.base import LINK_BUSBW_GBPS, fmt, pg_role

MAX_RANKS = 32
MAX_MEMORY_SERIES = 8
TOP_KERNELS = 20
MAX_LIST = 40


class Num:
    """A printed number: value, summary path (None when derived here), unit, unit suffix shown or not."""

    __slots__ = ("v", "k", "u", "suffix")

    def __init__(self, v, k: str | None, u: str, suffix: bool = False):
        v = None if isinstance(v, Undefined) else v  # a key an older or foreign summary lacks: n/a
        self.v, self.k, self.u, self.suffix = v, k, u, suffix

    @property
    def s(self) -> Num:
        return Num(self.v, self.k, self.u, True)

    def __html__(self) -> str:
        text = fmt(self.v, self.u, self.suffix)
        if self.k is None:
            return Markup('<span class="n d" data-u="{}" data-s="{}">{}</span>').format(self.u, int(self.suffix), text)
        return Markup('<span class="n" data-k="{}" data-u="{}" data-s="{}">{}</span>').format(
            self.k, self.u, int(self.suffix), text)

    def __str__(self) -> str:
        return fmt(self.v, self.u, self.suffix)


def resolve(summary: dict, path: str):
    """The value at a dotted path; list parts are indices, dict parts keys."""
    cur = summary
    for part in path.split("."):
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


def pick_ranks(ranks: list[dict], k: int = MAX_RANKS) -> tuple[list[int], dict[int, list[str]]]:
    """Indices of the ranks to show (all when ≤ k), round-robin over the worst by each criterion."""
    if len(ranks) <= k:
        return list(range(len(ranks))), {}
    crit = [("slowest step", lambda r: -(r.get("step_time_ms") or 0)),
            ("most exposed comm", lambda r: -(r.get("exposed_comm_frac") or 0)),
            ("most idle / bubble", lambda r: -(r.get("idle_frac") or 0)),
            ("lowest overlap", lambda r: r["overlap_ratio"] if r.get("overlap_ratio") is not None else 2.0)]
    orders = [(why, sorted(range(len(ranks)), key=lambda i: (key(ranks[i]), ranks[i]["rank"]))) for why, key in crit]
    chosen: dict[int, list[str]] = {}
    depth = 0
    while len(chosen) < k and depth < len(ranks):
        for why, order in orders:
            i = order[depth]
            if i in chosen:
                if why not in chosen[i]:
                    chosen[i].append(why)
            elif len(chosen) < k:
                chosen[i] = [why]
        depth += 1
    idx = sorted(chosen, key=lambda i: ranks[i]["rank"])
    return idx, chosen


def distribution(ranks: list[dict], key: str, unit: str) -> dict | None:
    """min / median (lower) / max over all ranks, each an exact value of one rank."""
    vals = sorted((r[key], i) for i, r in enumerate(ranks) if r.get(key) is not None)
    if not vals:
        return None
    pick = {"min": vals[0], "median": vals[(len(vals) - 1) // 2], "max": vals[-1]}
    return {name: (Num(v, f"ranks.{i}.{key}", unit), ranks[i]["rank"]) for name, (v, i) in pick.items()}


def comm_table(s: dict) -> list[dict]:
    """Per (kind, process group) over all ranks: per-step means, duration-weighted overlap, bandwidth."""
    ranks = s.get("ranks") or []
    groups: dict[tuple, list] = defaultdict(list)
    for i, r in enumerate(ranks):
        n = max(1, len(r.get("steps") or []))
        for j, c in enumerate(r.get("comm_by_kind") or []):
            groups[(c["kind"], c.get("pg") or "")].append((i, j, r, c, n))
    peak = next((v for k, v in LINK_BUSBW_GBPS.items()
                 if k in str(((s.get("manifest") or {}).get("device") or {}).get("name") or "").upper()), None)
    out = []
    for (kind, pg), xs in groups.items():
        tot = sum(c["total_ms"] for *_, c, _ in xs)
        ov = sum(c["overlapped_ms"] for *_, c, _ in xs)
        worst = min(xs, key=lambda x: x[3]["overlap_ratio"] if x[3]["overlap_ratio"] is not None else 2.0)
        bws = [x for x in xs if x[3].get("busbw_gbps") is not None]
        sized = sum(c["sized_count"] for *_, c, _ in xs)
        low = min(bws, key=lambda x: x[3]["busbw_gbps"]) if bws else None
        mean_bw = statistics.fmean(x[3]["busbw_gbps"] for x in bws) if bws else None
        out.append({
            "kind": kind, "pg": pg, "role": pg_role(kind, pg, xs[0][3].get("group_size"), s.get("layout")),
            "ranks": len(xs), "group_size": xs[0][3].get("group_size"),
            "ops": Num(statistics.fmean(c["count"] / n for *_, c, n in xs), None, "avg"),
            "time": Num(statistics.fmean(c["total_ms"] / n for *_, c, n in xs), None, "ms"),
            "exposed": Num(statistics.fmean((c["total_ms"] - c["overlapped_ms"]) / n for *_, c, n in xs), None, "ms"),
            "overlap": Num(ov / tot if tot else None, None, "pct"),
            "worst": Num(worst[3]["overlap_ratio"], f"ranks.{worst[0]}.comm_by_kind.{worst[1]}.overlap_ratio", "pct"),
            "worst_rank": worst[2]["rank"],
            "msg": Num(sum(c["bytes"] for *_, c, _ in xs) / sized if sized else None, None, "gib"),
            "algbw": Num(statistics.fmean(x[3]["algbw_gbps"] for x in bws) if bws else None, None, "gbps"),
            "busbw": Num(mean_bw, None, "gbps"),
            "busbw_min": Num(low[3]["busbw_gbps"] if low else None,
                             f"ranks.{low[0]}.comm_by_kind.{low[1]}.busbw_gbps" if low else None, "gbps"),
            "busbw_min_rank": low[2]["rank"] if low else None,
            "of_peak": Num(mean_bw / peak if peak and mean_bw is not None else None, None, "pct"),
        })
    return sorted(out, key=lambda g: -(g["time"].v or 0))


def kernel_table(ranks: list[dict], top: int = TOP_KERNELS) -> list[dict]:
    """Kernels summed over ranks (means per rank), the top by time."""
    acc: dict[tuple, dict] = {}
    for r in ranks:
        for k in r.get("top_kernels") or []:
            a = acc.setdefault((k["name"], k["kind"]), {"name": k["name"], "kind": k["kind"], "count": 0, "ms": 0.0,
                                                        "max": 0.0, "share": 0.0, "ranks": 0})
            a["count"] += k["count"]
            a["ms"] += k["total_ms"]
            a["max"] = max(a["max"], k["max_us"])
            a["share"] += k["share"]
            a["ranks"] += 1
    rows = sorted(acc.values(), key=lambda a: -a["ms"])[:top]
    n = max(1, len(ranks))
    return [{"name": a["name"], "kind": a["kind"], "ranks": a["ranks"], "ms": Num(a["ms"] / n, None, "ms"),
             "count": Num(a["count"] / n, None, "avg"),
             "mean": Num(a["ms"] * 1e3 / a["count"] if a["count"] else None, None, "us"),
             "max": Num(a["max"], None, "us"), "share": Num(a["share"] / a["ranks"], None, "pct")} for a in rows]


def memory_rows(ranks: list[dict], k: int = MAX_RANKS) -> list[dict]:
    rows = []
    for i, r in enumerate(ranks):
        for j, m in enumerate(r.get("memory") or []):
            p = f"ranks.{i}.memory.{j}."
            used = max(m["peak_reserved"], m["peak_allocated"])  # old traces record no Total Reserved
            frac = used / m["capacity"] if m.get("capacity") else None
            rows.append({"rank": r["rank"], "device": m["device"], "op": m.get("peak_op") or "", "m": m, "frac": frac,
                         "alloc": Num(m["peak_allocated"], p + "peak_allocated", "gib"),
                         "reserved": Num(m["peak_reserved"], p + "peak_reserved", "gib"),
                         "capacity": Num(m.get("capacity"), p + "capacity", "gib"),
                         "of_cap": Num(frac, None, "pct"), "at": Num(m["peak_ms"], p + "peak_ms", "ms")})
    rows.sort(key=lambda x: -(x["frac"] if x["frac"] is not None else x["m"]["peak_reserved"] / 2**60))
    return rows[:k]


def pipeline_view(s: dict) -> dict | None:
    """Rows of one pipeline replica (the one holding the worst stage) and the window of one step."""
    p = s.get("pipeline")
    ranks = s.get("ranks") or []
    if not p:
        return None
    by_rank = {r["rank"]: r for r in ranks}
    sb = p.get("stage_bubbles") or []
    view = {"bubbles": sb, "rows": [], "t0": 0.0, "t1": 0.0, "replicas": 1}
    with_acts = [r for r in ranks if r.get("pipeline_actions")]
    if not with_acts:
        return view
    worst = by_rank.get(max(sb, key=lambda b: b["measured"])["rank"]) if sb else None
    worst = worst if worst and worst.get("pipeline_actions") else with_acts[0]
    key = {k: v for k, v in (worst.get("coords") or {}).items() if k != "pp"}
    replica = [r for r in with_acts if {k: v for k, v in (r.get("coords") or {}).items() if k != "pp"} == key]
    if len(replica) < 2:  # no coordinates: one rank per first stage it holds
        seen: dict[int, dict] = {}
        for r in with_acts:
            seen.setdefault(min(a["stage"] for a in r["pipeline_actions"]), r)
        replica = list(seen.values())
    replica.sort(key=lambda r: (min(a["stage"] for a in r["pipeline_actions"]), r["rank"]))
    view["replicas"] = max(1, len(with_acts) // max(1, len(replica)))
    first = replica[0]["pipeline_actions"]
    starts = sorted(a["start_ms"] for a in first if a["kind"] == "F" and a["microbatch"] == 0
                    and a["stage"] == min(x["stage"] for x in first))
    k = len(starts) // 2
    lo = starts[k] if starts else min(a["start_ms"] for r in replica for a in r["pipeline_actions"])
    hi = starts[k + 1] if k + 1 < len(starts) else float("inf")
    view["steps_seen"] = len(starts)
    bmap = {b["rank"]: b for b in sb}
    for r in replica:
        acts = [a for a in r["pipeline_actions"] if lo - 1e-9 <= a["start_ms"] < hi]
        stages = sorted({a["stage"] for a in r["pipeline_actions"]})
        b = bmap.get(r["rank"])
        label = f"rank {int(r['rank'])} · stage {','.join(str(int(x)) for x in stages)}"
        if b:
            label += f" · bubble {fmt(b['measured'], 'pct')}"
        view["rows"].append((label, acts))
    ends = [a["end_ms"] for _, acts in view["rows"] for a in acts]
    view["t0"], view["t1"] = lo, max(ends) if ends else lo
    return view


def step_table(ranks: list[dict]) -> list[dict]:
    """Per step number over ranks: mean time (derived) and the slowest rank's time (exact)."""
    acc: dict[int, list] = defaultdict(list)
    for i, r in enumerate(ranks):
        for j, st in enumerate(r.get("steps") or []):
            acc[st["step"]].append((st["time_ms"], i, j, r["rank"]))
    rows = []
    for step in sorted(acc):
        xs = acc[step]
        t, i, j, rank = max(xs)
        rows.append({"step": step, "ranks": len(xs), "mean": Num(statistics.fmean(x[0] for x in xs), None, "ms"),
                     "max": Num(t, f"ranks.{i}.steps.{j}.time_ms", "ms"), "max_rank": rank})
    return rows


def facts(s: dict) -> list[tuple[str, str]]:
    """Run facts as (label, text) pairs; the template escapes the text."""
    man = s.get("manifest") or {}
    lay = s.get("layout") or man.get("layout") or {}
    dev = man.get("device") or {}
    pl = man.get("pipeline") or {}
    p = s.get("pipeline") or {}
    rows = [("Run", s.get("name") or ""), ("Source", s.get("source") or ""), ("Trace kind", s.get("trace_kind") or "")]
    if man.get("workload"):
        rows.append(("Workload", str(man["workload"])))
    rows.append(("World size", f"{s.get('world_size') or 'unknown'} ({len(s.get('ranks') or [])} ranks analysed"
                 + (f", missing: {_list(s.get('ranks_missing'))}" if s.get("ranks_missing") else "") + ")"))
    if lay:
        rows.append(("Layout", " × ".join(f"{k}={v}" for k, v in lay.items() if isinstance(v, int) and v > 1)
                     or "single rank / pure data-parallel 1"))
    if man.get("mesh_dim_names"):
        rows.append(("Mesh", ", ".join(map(str, man["mesh_dim_names"]))))
    if pl or p:
        sched = pl.get("schedule") or p.get("schedule")
        v = pl.get("stages_per_rank") or p.get("stages_per_rank")
        rows.append(("Pipeline", f"{sched}, {pl.get('microbatches') or p.get('microbatches')} microbatches, "
                     f"{pl.get('stages') or p.get('stages')} stages, v={v}"))
    if dev:
        mem = fmt(dev.get("memory_bytes"), "gib") if dev.get("memory_bytes") else "memory unknown"
        rows.append(("Device", f"{dev.get('count', '?')} × {dev.get('name', '?')} ({dev.get('type', '?')}, {mem})"))
    for label, key in (("Backend", "backend"), ("dtype", "dtype"), ("torch", "torch_version"),
                       ("Tokens per step", "tokens_per_step"), ("Status", "status"), ("Started", "started_at")):
        if man.get(key) is not None:
            rows.append((label, f"{man[key]:,}" if isinstance(man[key], int) else str(man[key])))
    if man.get("model"):
        rows.append(("Model", ", ".join(f"{k}={v}" for k, v in man["model"].items())))
    if man.get("batch"):
        rows.append(("Batch", ", ".join(f"{k}={v}" for k, v in man["batch"].items())))
    if man.get("options"):
        rows.append(("Options", ", ".join(f"{k}={v}" for k, v in man["options"].items() if v is not None)))
    if man.get("command"):
        rows.append(("Command", " ".join(map(str, man["command"]))))
    rows.append(("llmdiag", f"{s.get('llmdiag_version') or man.get('llmdiag_version') or '?'} (summary schema "
                 f"{s.get('schema_version')})"))
    return rows


def _safe(name: str) -> str:
    """A device name for a figure label: figures never carry raw trace strings."""
    return str(name) if re.fullmatch(r"[A-Za-z0-9:_]{1,16}", str(name)) else "device"


def _list(xs, n: int = MAX_LIST) -> str:
    xs = list(xs or [])
    return ", ".join(map(str, xs[:n])) + (f" … and {len(xs) - n} more" if len(xs) > n else "")


def build(s: dict) -> dict:
    """Everything the template needs, computed once."""
    ranks = s.get("ranks") or []
    idx, why = pick_ranks(ranks)
    agg = s.get("aggregate") or {}
    dist = [(label, g, distribution(ranks, key, unit)) for label, key, unit, g in (
        ("step time", "step_time_ms", "ms", "step_time"), ("compute", "compute_ms", "ms", "compute"),
        ("exposed comm", "exposed_comm_ms", "ms", "exposed_comm"),
        ("exposed comm fraction", "exposed_comm_frac", "pct", "exposed_comm"),
        ("idle fraction", "idle_frac", "pct", "idle"), ("overlap ratio", "overlap_ratio", "pct", "overlap_ratio"))]
    worst_overlap = next((i for i, r in enumerate(ranks) if r["rank"] == agg.get("overlap_worst_rank")), None)
    warn = [(r["rank"], w) for r in ranks for w in r.get("warnings") or []]
    skew = s.get("skew") or None
    last = sorted((skew or {}).get("last_arrivals", {}).items(), key=lambda kv: -kv[1])[:10]
    mem = memory_rows(ranks)
    gpu_mem = [x for x in mem if x["device"] != "cpu"] or mem  # plot device memory when there is any
    shown_mem = [(f"rank {int(x['rank'])} {_safe(x['device'])}", x["m"]) for x in gpu_mem[:MAX_MEMORY_SERIES]]
    return {
        "s": s, "agg": agg, "ranks": ranks, "shown": [(i, ranks[i], why.get(i, [])) for i in idx],
        "omitted": len(ranks) - len(idx), "dist": [d for d in dist if d[2]], "steps": step_table(ranks),
        "comm": comm_table(s), "kernels": kernel_table(ranks), "memory": mem, "memory_series": shown_mem,
        "pipe": pipeline_view(s), "facts": facts(s), "warnings": warn[:200], "warnings_more": max(0, len(warn) - 200),
        "worst_overlap": worst_overlap, "last_arrivals": last, "skew": skew,
        "host_shift": sorted(((skew or {}).get("host_shift_ms") or {}).items())[:32],
        "hosts": {r["rank"]: r.get("host") or "unknown" for r in ranks},
        "oversubscribed": bool((s.get("manifest") or {}).get("oversubscribed")), "list": _list, "Num": Num,
    }
