"""Recommendation rules: measured numbers in, findings with evidence and a computed gain out.

Each rule is one function over the summary dict (`Analysis.to_dict()`), so rules run on a summary loaded
from disk as well as on a fresh analysis; all are listed in `RULES`. Numbers are printed with `fmt`, the
one rounding function the HTML report also uses, so evidence and report tables agree digit for digit.
docs/recommendations.md describes every rule: trigger, evidence, action and how the gain is computed.
"""

from __future__ import annotations

import statistics

from diagnose.rules.base import (  # noqa: F401  (fmt, UNITS, pg_role, headline_order re-exported for reports/)
    FP32_TO_BF16_SPEEDUP, LINK_BUSBW_GBPS, SEVERITIES, UNITS, Ctx, finding, fmt, gain_text, headline_order, pg_role,
    severity_for, steps_where)
from diagnose.rules.pipeline import pipeline_bubble, pipeline_imbalance


# ---- the rules ----------------------------------------------------------------------------------------
def _exposed_comm_rule(s: dict, c: Ctx, roles: tuple) -> tuple | None:
    """Per-rank exposed comm of some roles; fires when the mean is ≥ 5 % of the step and overlap < 70 %."""
    rows = []
    for r in c.ranks:
        tot, exp, cs = c.comm_of(r, roles)
        if cs and r.get("step_time_ms"):
            rows.append((r, tot, exp, cs))
    if not rows:
        return None
    tot = sum(x[1] for x in rows)
    ov = sum(sum(cc["overlapped_ms"] for cc in x[3]) / c.nsteps(x[0]) for x in rows)
    ratio = ov / tot if tot else None
    exp_mean = statistics.fmean(x[2] for x in rows)
    step = statistics.fmean(x[0]["step_time_ms"] for x in rows)
    if exp_mean < 0.05 * step or (ratio is not None and ratio >= 0.70):
        return None
    gain = statistics.fmean(min(x[2], x[0].get("compute_only_ms") or 0.0) for x in rows)
    if gain < 0.01 * step:  # nothing to hide it under (e.g. a trace of communication only)
        return None
    bad = [x for x in rows if x[2] >= 0.05 * x[0]["step_time_ms"]]
    worst = max(rows, key=lambda x: x[2] / x[0]["step_time_ms"])
    kinds = {}
    for x in rows:
        for cc in x[3]:
            kinds[(cc["kind"], cc.get("pg") or "")] = kinds.get((cc["kind"], cc.get("pg") or ""), 0) + cc["count"]
    what = ", ".join(f"{k} on pg '{pg}'" if pg else k for (k, pg) in sorted(kinds, key=lambda kp: -kinds[kp])[:3])
    ev = (f"{what}: overlap ratio {fmt(ratio, 'pct')}, exposed {fmt(exp_mean, 'ms')} per step = "
          f"{fmt(exp_mean / step, 'pct')} of the {fmt(step, 'ms')} step (mean over {len(rows)} ranks; worst rank "
          f"{worst[0]['rank']}: {fmt(worst[2], 'ms')})")
    ranks = [x[0]["rank"] for x in bad] or [worst[0]["rank"]]
    steps = steps_where([x[0] for x in bad] or [worst[0]],
                         lambda st: st["exposed_comm_ms"] >= 0.05 * st["time_ms"])
    return ev, ranks, steps, gain, step, {k for k, _ in kinds}, rows


def dp_overlap(s: dict, c: Ctx) -> list[dict]:
    """Data-parallel / FSDP collectives not hidden behind backward/forward compute."""
    res = _exposed_comm_rule(s, c, ("dp",))
    if not res:
        return []
    ev, ranks, steps, gain, step, kinds, rows = res
    fsdp = int(c.layout.get("fsdp") or 1) > 1 or bool(kinds & {"reducescatter", "allgather"})
    if fsdp:
        act = ("FSDP: `reshard_after_forward=False` (`--no-reshard-after-forward`; keeps parameters gathered "
               "between forward and backward, one all-gather per layer less, at the cost of unsharded-parameter "
               "memory) and explicit prefetch (`module.set_modules_to_forward_prefetch([...])`, "
               "`set_modules_to_backward_prefetch([...])`)")
    else:
        cap = float(c.opts.get("bucket_cap_mb") or 25.0)
        ar = [cc for x in rows for cc in x[3] if cc["kind"] == "allreduce"]
        per_step = statistics.fmean(sum(cc["count"] for cc in x[3] if cc["kind"] == "allreduce") / c.nsteps(x[0])
                                    for x in rows)
        sized = sum(cc["sized_count"] for cc in ar)
        msg = sum(cc["bytes"] for cc in ar) / sized if sized else None
        small = msg is not None and msg < 4 * 2**20
        new = cap * 2 if small else max(1.0, cap / 2)
        why = ("small messages are latency-bound: fewer, larger buckets" if small else
               "a smaller last bucket shortens the exposed tail after backward and starts the first one earlier")
        act = (f"DDP: `bucket_cap_mb={new:g}` (`--bucket-cap-mb {new:g}`, now {cap:g}; "
               f"{fmt(per_step, 'avg')} all-reduces per step, mean message {fmt(msg, 'gib')}: {why}); "
               "`gradient_as_bucket_view=True`")
    eg = gain_text(gain, step, "the exposed DP communication, capped by the compute-only time it can hide under")
    return [finding("dp_overlap", severity_for(gain, step), "Data-parallel communication is exposed", ev, ranks,
                     steps, act, eg, gain, "ranks[].comm_by_kind[].overlap_ratio")]


def tp_exposed(s: dict, c: Ctx) -> list[dict]:
    """Tensor-parallel collectives on the critical path (they sit between dependent matmuls)."""
    res = _exposed_comm_rule(s, c, ("tp",))
    if not res:
        return []
    ev, ranks, steps, gain, step, kinds, rows = res
    tp = int(c.layout.get("tp") or max((cc.get("group_size") or 0) for x in rows for cc in x[3]) or 0)
    acts = []
    per_host = c.gpus_per_host()
    if tp and per_host and tp > per_host:
        acts.append(f"keep TP inside a node: tp ≤ {per_host} GPUs per host (now tp={tp} crosses hosts)")
    if not c.opts.get("sp"):
        acts.append("sequence parallel (`--sp`: all-reduce → reduce-scatter + all-gather, smaller activations)")
    if tp >= 2:
        acts.append(f"smaller TP: tp={max(1, tp // 2)} with twice the DP/FSDP degree")
    eg = gain_text(gain, step, "up to the exposed TP communication, capped by compute-only time")
    return [finding("tp_exposed", severity_for(gain, step), "Tensor-parallel communication is exposed", ev, ranks,
                     steps, "; or ".join(acts) or "smaller TP degree", eg, gain,
                     "ranks[].comm_by_kind[].overlap_ratio")]


def _mem_rows(c: Ctx) -> list[tuple]:
    """(rank, memory stat, used/capacity, activation bytes = peak − baseline allocated).

    Used = max(peak reserved, peak allocated): older traces record Total Reserved as 0.
    """
    out = []
    for r in c.ranks:
        for m in r.get("memory") or []:
            if m.get("capacity") and m["capacity"] > 0 and m["device"] != "cpu":
                tl = [pt[1] for pt in m.get("timeline") or [] if len(pt) >= 2]
                act = m["peak_allocated"] - min(tl) if tl else None
                out.append((r, m, max(m["peak_reserved"], m["peak_allocated"]) / m["capacity"], act))
    return out


def memory_near_capacity(s: dict, c: Ctx) -> list[dict]:
    """Peak reserved > 90 % of the device: one longer sequence or allocator fragmentation away from OOM."""
    rows = [x for x in _mem_rows(c) if x[2] > 0.90]
    if not rows:
        return []
    r, m, f, act = max(rows, key=lambda x: x[2])
    mb = int(c.opts.get("micro_batch") or (c.man.get("batch") or {}).get("micro_batch") or 0)
    ev = (f"rank {r['rank']} {m['device']}: peak reserved {fmt(m['peak_reserved'], 'gib')} of "
          f"{fmt(m['capacity'], 'gib')} ({fmt(f, 'pct')}), peak allocated {fmt(m['peak_allocated'], 'gib')}; "
          f"{len(rows)} device(s) above 90 %")
    acts = ["activation checkpointing (`--ac`, or selective per-layer `checkpoint_wrapper`)",
            "more FSDP sharding (larger fsdp degree, `reshard_after_forward=True`)"]
    acts.append(f"smaller microbatch ({mb} → {max(1, mb // 2)} sequences)" if mb > 1 else "smaller microbatch")
    head = m["capacity"] - max(m["peak_reserved"], m["peak_allocated"])
    eg = f"headroom {fmt(head, 'gib')} now"
    if act:
        eg += (f"; activations are ≈ {fmt(act, 'gib')} of the peak (peak − lowest allocated): halving them "
               f"gives ≈ {fmt(head + act / 2, 'gib')} headroom")
    return [finding("memory_near_capacity", "high" if f > 0.95 else "medium", "Memory close to device capacity",
                     ev, [x[0]["rank"] for x in rows], steps_where([r]), "; ".join(acts), eg, None,
                     "ranks[].memory[].peak_reserved")]


def memory_unused(s: dict, c: Ctx) -> list[dict]:
    """Every device below 40 % of capacity: a larger microbatch makes bigger, more efficient GEMMs."""
    rows = _mem_rows(c)
    if not rows or max(x[2] for x in rows) >= 0.40:
        return []
    r, m, f, act = max(rows, key=lambda x: x[2])
    ev = (f"highest use: rank {r['rank']} {m['device']} peak reserved {fmt(m['peak_reserved'], 'gib')}, allocated "
          f"{fmt(m['peak_allocated'], 'gib')} of {fmt(m['capacity'], 'gib')} ({fmt(f, 'pct')}) over {len(rows)} "
          "device(s)")
    k = None
    if act and act > 0:
        k = int((0.85 * m["capacity"] - (m["peak_allocated"] - act)) // act)
    act_s = f"raise the microbatch {k}× (`--batch`, same microbatch count)" if k and k >= 2 else \
        "raise the microbatch size (`--batch`)"
    eg = (f"≈ {k}× the activations fit under 85 % of capacity (activations ≈ {fmt(act, 'gib')}, baseline "
          f"{fmt(m['peak_allocated'] - act, 'gib')}); larger GEMMs usually raise MFU" if k else
          "unused memory can hold larger microbatches; larger GEMMs usually raise MFU")
    return [finding("memory_unused", "low", "Most device memory unused", ev, [x[0]["rank"] for x in rows], [],
                     act_s, eg, None, "ranks[].memory[].peak_reserved")]


def host_bound(s: dict, c: Ctx) -> list[dict]:
    """GPU idle while the host launches many short kernels: launch overhead, not GPU work, sets the pace."""
    p = s.get("pipeline")
    bad = []
    for r in c.ranks:
        h = r.get("hints") or {}
        idle, short, med = h.get("device_idle_frac"), h.get("short_kernel_frac"), h.get("median_kernel_us")
        if r.get("trace_kind") != "gpu" or idle is None or idle < 0.15:
            continue
        if not ((short is not None and short >= 0.5) or (short is None and med is not None and med < 10)):
            continue
        bubble = (p["measured"] * p["window_ms"]) if p else 0.0  # idle for the schedule, not for launches
        loader = (h.get("dataloader_frac") or 0.0) * r["step_time_ms"]  # idle waiting for input: other rule
        gain = max(0.0, idle * r["step_time_ms"] - bubble - loader)
        if gain > 0:
            bad.append((r, gain))
    if not bad:
        return []
    gain = statistics.fmean(g for _, g in bad)
    r = max(bad, key=lambda x: x[1])[0]
    h = r["hints"]
    ev = (f"rank {r['rank']}: GPU idle {fmt(h['device_idle_frac'], 'pct')} of the step, "
          f"{fmt(h['kernels_per_step'], 'int')} kernels per step, median {fmt(h.get('median_kernel_us'), 'us')}, "
          f"{fmt(h.get('short_kernel_frac'), 'pct')} under 10 µs ({len(bad)} rank(s) alike)")
    act = ("`torch.compile(model)` to fuse the short kernels, or CUDA graphs "
           "(`torch.compile(mode=\"reduce-overhead\")` / `torch.cuda.CUDAGraph`) to remove launch overhead")
    eg = gain_text(gain, c.step_ms, "up to the idle GPU time less pipeline bubble and DataLoader waits, mean "
                   "over those ranks")
    return [finding("host_bound", severity_for(gain, c.step_ms), "GPU idle behind kernel launches", ev,
                     [x[0]["rank"] for x in bad], steps_where([r], lambda st: st["idle_ms"] >= 0.15 * st["time_ms"]),
                     act, eg, gain, "ranks[].hints.device_idle_frac")]


def stragglers(s: dict, c: Ctx) -> list[dict]:
    """A rank that arrives last at collectives (or computes > 5 % longer) makes every other rank wait."""
    sk = s.get("skew") or {}
    st = sk.get("stragglers") or []
    if not st:
        return []
    nsteps = statistics.median([c.nsteps(r) for r in c.ranks]) if c.ranks else 1
    wait = sum(b["mean_skew_ms"] * b["matched"] for b in sk.get("by_collective") or []) / nsteps
    times = {r["rank"]: r["step_time_ms"] for r in c.ranks}
    med = statistics.median(times.values()) if times else 0.0
    slow = max((times.get(x["rank"], 0.0) - med for x in st), default=0.0)
    gain = min(max(wait, slow), c.step_ms or max(wait, slow))
    why: dict[int, list[str]] = {}
    for x in st:
        why.setdefault(x["rank"], []).append(f"{x.get('reason', '')}: {fmt(x.get('value'), 'pct')}")
    who = "; ".join(f"rank {r} on host {c.host(r)} ({'; '.join(w)})" for r, w in list(why.items())[:5])
    ev = who + (f"; arrival skew totals {fmt(wait, 'ms')} per step over {sk['matched']} matched collectives"
                if sk.get("matched") else "") + f"; median step {fmt(med, 'ms')}"
    hosts = sorted({c.host(x["rank"]) for x in st})
    all_hosts = {r.get("host") for r in c.ranks if r.get("host")}
    acts = []
    if len(all_hosts) > 1:
        check = "clocks/throttling (`nvidia-smi -q -d PERFORMANCE`), NIC errors" if c.gpu else "CPU frequency"
        acts.append(f"inspect host(s) {', '.join(hosts[:5])}: {check}, other processes; replace or exclude the node")
    stage_of = {b["rank"]: b["stage"] for b in (s.get("pipeline") or {}).get("stage_bubbles") or []}
    staged = sorted({stage_of[r] for r in why if r in stage_of})
    if staged:
        acts.append(f"move layers off pipeline stage(s) {', '.join(map(str, staged))} (the straggler's compute "
                    "sets the pipeline's pace)")
    if not acts:
        acts.append("all ranks share one host: look for uneven work (data, sequence lengths, layer split) on "
                    f"rank(s) {', '.join(map(str, list(why)[:5]))}")
    act = "; ".join(acts)
    eg = gain_text(gain, c.step_ms, "the waiting the straggler imposes (arrival skew per step, or its extra "
                    "step time over the median)")
    return [finding("stragglers", severity_for(gain, c.step_ms), "Straggler rank(s)", ev, [x["rank"] for x in st],
                     [], act, eg, gain, "skew.stragglers")]


def low_busbw(s: dict, c: Ctx) -> list[dict]:
    """Collective bus bandwidth far below the NVLink peak for large messages (topology or NCCL settings)."""
    peak = next((v for k, v in LINK_BUSBW_GBPS.items() if k in c.device.upper()), None)
    if peak is None or "PCIE" in c.device.upper():
        return []
    per_host = c.gpus_per_host()
    groups = {}
    for r in c.ranks:
        for cc in r.get("comm_by_kind") or []:
            gs, bw = cc.get("group_size") or 0, cc.get("busbw_gbps")
            if bw is None or gs < 2 or not cc["sized_count"] or (per_host and gs > per_host):
                continue
            if cc["bytes"] / cc["sized_count"] < 4 * 2**20:  # small messages are latency-bound
                continue
            groups.setdefault((cc["kind"], cc.get("pg") or ""), []).append((r, cc))
    out = []
    for (kind, pg), xs in groups.items():
        bw = statistics.fmean(cc["busbw_gbps"] for _, cc in xs)
        if bw >= 0.5 * peak:
            continue
        target = 0.8 * peak
        gain = statistics.fmean((cc["total_ms"] - cc["overlapped_ms"]) / c.nsteps(r) for r, cc in xs) * \
            (1 - bw / target)
        ev = (f"{kind}{f' on pg {pg!r}' if pg else ''}: busbw {fmt(bw, 'gbps')} (mean over {len(xs)} ranks) vs "
              f"≈ {fmt(peak, 'gbps')} achievable on {c.device} NVLink ({fmt(bw / peak, 'pct')})")
        act = ("check the topology (`nvidia-smi topo -m`: NVLink, not PCIe/SYS, between the group's GPUs), "
               "`NCCL_DEBUG=INFO` for the transport, unset `NCCL_P2P_DISABLE`/`NCCL_P2P_LEVEL` overrides; "
               "keep the group inside one node")
        eg = gain_text(gain, c.step_ms, f"its exposed time × (1 − busbw / {fmt(target, 'gbps')}), i.e. at 80 % "
                        "of the link peak")
        out.append(finding("low_busbw", "low" if severity_for(gain, c.step_ms) == "low" else "medium",
                            f"Low {kind} bus bandwidth", ev, [r["rank"] for r, _ in xs], [], act, eg, gain,
                            "ranks[].comm_by_kind[].busbw_gbps"))
    return out


def dataloader(s: dict, c: Ctx) -> list[dict]:
    """Host waiting in DataLoader.__next__ for > 10 % of the step: input pipeline starves the GPU."""
    bad = [r for r in c.ranks if ((r.get("hints") or {}).get("dataloader_frac") or 0) > 0.10]
    if not bad:
        return []
    gain = statistics.fmean(r["hints"]["dataloader_frac"] * r["step_time_ms"] for r in bad)
    w = max(bad, key=lambda r: r["hints"]["dataloader_frac"])
    ev = (f"rank {w['rank']}: {fmt(w['hints']['dataloader_frac'], 'pct')} of the {fmt(w['step_time_ms'], 'ms')} "
          f"step inside DataLoader `__next__` ({len(bad)} rank(s) above 10 %)")
    cores, per_host = c.man.get("cpu_cores"), c.gpus_per_host()
    nw = max(2, int(cores) // int(per_host) - 1) if cores and per_host else 4
    act = (f"`DataLoader(num_workers={nw}, pin_memory=True, persistent_workers=True, prefetch_factor=2)`; "
           "move tokenisation/augmentation offline")
    eg = gain_text(gain, c.step_ms, "the time spent waiting for the next batch, mean over those ranks")
    return [finding("dataloader", severity_for(gain, c.step_ms), "Steps wait for the DataLoader", ev,
                     [r["rank"] for r in bad], steps_where([w]), act, eg, gain, "ranks[].hints.dataloader_frac")]


def fp32_gemm(s: dict, c: Ctx) -> list[dict]:
    """fp32 GEMMs on a tensor-core GPU (sm80+) leave most of the matmul throughput unused."""
    bad = [r for r in c.ranks if ((r.get("hints") or {}).get("fp32_gemm_frac") or 0) > 0.10
           and ((r.get("hints") or {}).get("compute_capability") or 0) >= 8.0]
    if not bad:
        return []
    gain = statistics.fmean(r["hints"]["fp32_gemm_frac"] * r["compute_ms"] for r in bad) * \
        (1 - 1 / FP32_TO_BF16_SPEEDUP)
    w = max(bad, key=lambda r: r["hints"]["fp32_gemm_frac"])
    ev = (f"rank {w['rank']}: {fmt(w['hints']['fp32_gemm_frac'], 'pct')} of {fmt(w['compute_ms'], 'ms')} compute "
          f"per step in fp32 GEMMs on compute capability {fmt(w['hints']['compute_capability'], 'num')} "
          f"({len(bad)} rank(s))")
    act = ("`torch.autocast(\"cuda\", dtype=torch.bfloat16)` around forward and loss (or at least "
           "`torch.set_float32_matmul_precision(\"high\")` for TF32)")
    eg = gain_text(gain, c.step_ms, f"fp32 GEMM time × (1 − 1/{FP32_TO_BF16_SPEEDUP:g}), a conservative "
                    "bf16 speed-up")
    return [finding("fp32_gemm", severity_for(gain, c.step_ms), "fp32 matmuls on a tensor-core GPU", ev,
                     [r["rank"] for r in bad], [], act, eg, gain, "ranks[].hints.fp32_gemm_frac")]


def contaminated_timings(s: dict, c: Ctx) -> list[dict]:
    """Oversubscribed CPU runs (more ranks than cores) or CPU-only traces: absolute times are not GPU times."""
    if c.man.get("oversubscribed"):
        per_host = c.gpus_per_host() or s.get("world_size")
        ev = (f"manifest says oversubscribed: {per_host} local ranks on {c.man.get('cpu_cores', '?')} CPU cores; "
              "ranks compete for cores, so waits and bubbles include scheduling delays")
        return [finding("contaminated_timings", "high", "Timings contaminated by CPU oversubscription", ev, [], [],
                         "rerun with at most one rank per core (fewer ranks or a bigger machine); compare only "
                         "relative numbers from this run", "not a speed-up: makes the other numbers trustworthy",
                         None, "manifest.oversubscribed")]
    if s.get("trace_kind") == "cpu":
        return [finding("contaminated_timings", "low", "CPU-only traces", "every trace is CPU-only (gloo); compute "
                         "and communication times are those of CPU ops, not GPU kernels", [], [],
                         "use these numbers for structure (overlap, bubbles, order), not for GPU tuning",
                         "none: informational", None, "trace_kind")]
    return []


RULES = [  # (id, function): the one table of rules; docs/recommendations.md documents each
    ("pipeline_bubble", pipeline_bubble), ("pipeline_imbalance", pipeline_imbalance), ("dp_overlap", dp_overlap),
    ("tp_exposed", tp_exposed), ("memory_near_capacity", memory_near_capacity), ("memory_unused", memory_unused),
    ("host_bound", host_bound), ("stragglers", stragglers), ("low_busbw", low_busbw), ("dataloader", dataloader),
    ("fp32_gemm", fp32_gemm), ("contaminated_timings", contaminated_timings),
]


def findings(summary: dict) -> list[dict]:
    """All findings of all rules, largest expected gain first (no gain last), then by severity."""
    c = Ctx(summary)
    out = []
    for _, rule in RULES:
        out += rule(summary, c)
    return sorted(out, key=lambda f: (f["gain_ms"] is None, -(f["gain_ms"] or 0.0),
                                      SEVERITIES.index(f["severity"]), f["id"]))
