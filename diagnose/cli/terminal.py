"""Plain-text tables for the terminal: one per concern, worst ranks first."""

from __future__ import annotations

from diagnose.rules.base import headline_order

MAX_ROWS = 16


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:5.1f}%"


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:9.2f}"


def _table(title: str, header: list[str], rows: list[list[str]], note: str = "") -> str:
    if not rows:
        return ""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths)))
    out = [f"\n{title}", line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
    if note:
        out.append(note)
    return "\n".join(out)


def render(s: dict) -> str:
    """The summary dict (Analysis.to_dict()) as text."""
    a = s["aggregate"]
    parts = [f"llmdiag {s['llmdiag_version']} — {s['name']}: {a['ranks']} rank(s) analysed "
             f"({s['trace_kind']} traces, world size {s['world_size'] or 'unknown'})"]
    head = [f"step time {a['step_time_ms']:.2f} ms (slowest rank {a['step_time_max_ms']:.2f} ms)"]
    if a["overlap_ratio_mean"] is not None:
        head.append(f"overlap mean {_pct(a['overlap_ratio_mean']).strip()}, worst {_pct(a['overlap_ratio_min']).strip()} "
                    f"(rank {a['overlap_worst_rank']})")
    else:
        head.append("no communication in the analysed steps")
    if a["tokens_per_s"]:
        head.append(f"{a['tokens_per_s']:,.0f} tokens/s")
    if a["mfu"] is not None:
        head.append(f"MFU {_pct(a['mfu']).strip()}")
    parts.append("  " + "; ".join(head))

    ranks = sorted(s["ranks"], key=lambda r: -r["exposed_comm_frac"] - r["step_time_ms"] * 1e-9)
    rows = [[r["rank"], _ms(r["step_time_ms"]), _ms(r["compute_only_ms"]), _ms(r["overlapped_comm_ms"]),
             _ms(r["exposed_comm_ms"]), _ms(r["idle_ms"]), _pct(r["overlap_ratio"]), len(r["steps"])]
            for r in ranks[:MAX_ROWS]]
    parts.append(_table("Step breakdown per rank (ms per step, worst exposed communication first)",
                        ["rank", "step", "compute", "overlapped", "exposed", "idle", "overlap", "steps"], rows,
                        f"  ... {len(ranks) - MAX_ROWS} more ranks in the JSON summary" if len(ranks) > MAX_ROWS else ""))

    comm = {}
    for r in s["ranks"]:
        for c in r["comm_by_kind"]:
            g = comm.setdefault((c["kind"], c["pg"]), [0, 0.0, 0.0, []])
            g[0] += c["count"]
            g[1] += c["total_ms"]
            g[2] += c["overlapped_ms"]
            if c["busbw_gbps"] is not None:
                g[3].append(c["busbw_gbps"])
    rows = [[k or "?", pg or "-", n, _ms(t), _pct(o / t if t else None), f"{sum(b) / len(b):.2f}" if b else "n/a"]
            for (k, pg), (n, t, o, b) in sorted(comm.items(), key=lambda kv: -kv[1][1])]
    parts.append(_table("Communication by collective and process group (all ranks)",
                        ["kind", "group", "ops", "total ms", "overlap", "busbw GB/s"], rows))

    p = s.get("pipeline")
    if p:
        rows = [[b["stage"], b["rank"], _ms(b["busy_ms"]), _pct(b["measured"]), _pct(b["replay"]), _pct(b["theory"]),
                 f"{100 * b['gap']:+.1f}"] for b in p["stage_bubbles"]]
        parts.append(_table(f"Pipeline bubbles ({p['schedule']}, p={p['stages']}, m={p['microbatches']}, "
                            f"window {p['window_ms']:.2f} ms)",
                            ["stage", "rank", "busy ms", "measured", "replay", "theory", "gap pts"], rows,
                            "  " + p["explanation"]))

    rows = []
    for r in sorted(s["ranks"], key=lambda r: -max([m["peak_allocated"] for m in r["memory"]] or [0]))[:MAX_ROWS]:
        for m in r["memory"]:
            cap = m["capacity"]
            rows.append([r["rank"], m["device"], f"{m['peak_allocated'] / 2**20:.1f}", f"{m['peak_reserved'] / 2**20:.1f}",
                         _pct(max(m["peak_reserved"], m["peak_allocated"]) / cap) if cap else "n/a", m["peak_op"][:40]])
    parts.append(_table("Memory peaks (MiB)", ["rank", "device", "allocated", "reserved", "of capacity", "op at peak"], rows))

    if s["ranks"]:
        r0 = max(s["ranks"], key=lambda r: r["step_time_ms"])
        rows = [[k["name"][:60], k["kind"], k["count"], _ms(k["total_ms"]), _pct(k["share"])] for k in r0["top_kernels"][:10]]
        parts.append(_table(f"Top kernels / ops on rank {r0['rank']} (slowest step)", ["name", "kind", "count", "total ms", "share"], rows))

    sk = s.get("skew")
    if sk and sk["matched"]:
        rows = [[c["kind"], c["pg"] or "-", c["matched"], _ms(c["mean_skew_ms"]), _ms(c["max_skew_ms"]),
                 _ms(c["mean_transfer_ms"])] for c in sk["by_collective"][:MAX_ROWS]]
        parts.append(_table("Arrival skew of matched collectives", ["kind", "group", "matched", "mean skew ms",
                                                                    "max skew ms", "transfer ms"], rows))
    if sk and sk["stragglers"]:
        parts.append("\nStragglers\n" + "\n".join(f"  rank {x['rank']}: {x['reason']} ({x['value']:.2f})" for x in sk["stragglers"]))

    if s.get("findings"):
        lines = [f"  [{f['severity']}] {f['title']}\n      evidence: {f['evidence']}\n      action: {f['action']}"
                 f"\n      expected gain: {f['expected_gain']}"
                 for f in (s["findings"][i] for i in headline_order(s["findings"])[:5])]
        parts.append("\nRecommendations\n" + "\n".join(lines))
    issues = s.get("issues") or []
    if issues:
        shown = issues[:MAX_ROWS]
        parts.append("\nIssues\n" + "\n".join(f"  {i['severity']}: {i['file']}: {i['message']}" for i in shown)
                     + (f"\n  ... {len(issues) - MAX_ROWS} more" if len(issues) > MAX_ROWS else ""))
    if s.get("ranks_missing"):
        miss = s["ranks_missing"]
        parts.append(f"\nRanks without a trace: {len(miss)} of {s['world_size']}"
                     + (f" ({', '.join(map(str, miss[:20]))}{' ...' if len(miss) > 20 else ''})"))
    return "\n".join(x for x in parts if x)
