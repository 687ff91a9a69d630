"""Communication rules: exposed data-parallel and tensor-parallel collectives, stragglers, low bus bandwidth."""

from __future__ import annotations

import statistics

from diagnose.model.analysis import Finding
from diagnose.model.devices import link_busbw_gbps
from diagnose.model.format import fmt
from diagnose.rules.base import Ctx, severity_for, steps_where

TORCH_DDP_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.DistributedDataParallel's own default


def _exposed_comm_rule(c: Ctx, roles: tuple) -> tuple | None:
    """Per-rank exposed comm of some roles; fires when the mean is ≥ 5 % of the step and overlap < 70 %."""
    rows = []
    for r in c.ranks:
        tot, exp, cs = c.comm_of(r, roles)
        if cs and r.step_time_ms:
            rows.append((r, tot, exp, cs))
    if not rows:
        return None
    tot = sum(x[1] for x in rows)
    ov = sum(sum(cc.overlapped_ms for cc in x[3]) / x[0].nsteps for x in rows)
    ratio = ov / tot if tot else None
    exp_mean = statistics.fmean(x[2] for x in rows)
    step = statistics.fmean(x[0].step_time_ms for x in rows)
    if exp_mean < 0.05 * step or (ratio is not None and ratio >= 0.70):
        return None
    gain = statistics.fmean(min(x[2], x[0].compute_only_ms) for x in rows)
    if gain < 0.01 * step:  # nothing to hide it under (e.g. a trace of communication only)
        return None
    bad = [x for x in rows if x[2] >= 0.05 * x[0].step_time_ms]
    worst = max(rows, key=lambda x: x[2] / x[0].step_time_ms)
    kinds: dict[tuple, int] = {}
    for x in rows:
        for cc in x[3]:
            kinds[(cc.kind, cc.pg)] = kinds.get((cc.kind, cc.pg), 0) + cc.count
    what = ", ".join(f"{k} on pg '{pg}'" if pg else k for (k, pg) in sorted(kinds, key=lambda kp: -kinds[kp])[:3])
    ev = (f"{what}: overlap ratio {fmt(ratio, 'pct')}, exposed {fmt(exp_mean, 'ms')} per step = "
          f"{fmt(exp_mean / step, 'pct')} of the {fmt(step, 'ms')} step (mean over {len(rows)} ranks; worst rank "
          f"{worst[0].rank}: {fmt(worst[2], 'ms')})")
    ranks = [x[0].rank for x in bad] or [worst[0].rank]
    steps = steps_where([x[0] for x in bad] or [worst[0]], lambda st: st.exposed_comm_ms >= 0.05 * st.time_ms)
    return ev, ranks, steps, gain, step, {k for k, _ in kinds}, rows


def dp_overlap(c: Ctx) -> list[Finding]:
    """Data-parallel / FSDP collectives not hidden behind backward/forward compute."""
    res = _exposed_comm_rule(c, ("dp",))
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
        read = c.option("bucket_cap_mb")
        cap = float(read) if read else TORCH_DDP_BUCKET_CAP_MB
        ar = [cc for x in rows for cc in x[3] if cc.kind == "allreduce"]
        per_step = statistics.fmean(sum(cc.count for cc in x[3] if cc.kind == "allreduce") / x[0].nsteps
                                    for x in rows)
        sized = sum(cc.sized_count for cc in ar)
        msg = sum(cc.bytes for cc in ar) / sized if sized else None
        small = msg is not None and msg < 4 * 2**20
        new = cap * 2 if small else max(1.0, cap / 2)
        why = ("small messages are latency-bound: fewer, larger buckets" if small else
               "a smaller last bucket shortens the exposed tail after backward and starts the first one earlier")
        now = f"now {cap:g}" if read else f"the traces do not record the cap; torch's default is {cap:g}"
        act = (f"DDP: `bucket_cap_mb={new:g}` (`--bucket-cap-mb {new:g}`, {now}; "
               f"{fmt(per_step, 'avg')} all-reduces per step, mean message {fmt(msg, 'gib')}: {why}); "
               "`gradient_as_bucket_view=True`")
    eg = c.gain_text(gain, "the exposed DP communication, capped by the compute-only time it can hide under")
    return [c.finding("dp_overlap", severity_for(gain, step), "Data-parallel communication is exposed", ev, ranks,
                      steps, act, eg, gain, "ranks[].comm_by_kind[].overlap_ratio")]


def tp_exposed(c: Ctx) -> list[Finding]:
    """Tensor-parallel collectives on the critical path (they sit between dependent matmuls)."""
    res = _exposed_comm_rule(c, ("tp",))
    if not res:
        return []
    ev, ranks, steps, gain, step, kinds, rows = res
    tp = int(c.layout.get("tp") or max((cc.group_size or 0) for x in rows for cc in x[3]) or 0)
    acts = []
    per_host = c.gpus_per_host()
    if tp and per_host and tp > per_host:
        acts.append(f"keep TP inside a node: tp ≤ {per_host} GPUs per host (now tp={tp} crosses hosts)")
    if not c.option("sp"):
        acts.append("sequence parallel (`--sp`: all-reduce → reduce-scatter + all-gather, smaller activations)")
    if tp >= 2:
        acts.append(f"smaller TP: tp={max(1, tp // 2)} with twice the DP/FSDP degree")
    eg = c.gain_text(gain, "up to the exposed TP communication, capped by compute-only time")
    return [c.finding("tp_exposed", severity_for(gain, step), "Tensor-parallel communication is exposed", ev, ranks,
                      steps, "; or ".join(acts) or "smaller TP degree", eg, gain,
                      "ranks[].comm_by_kind[].overlap_ratio")]


def stragglers(c: Ctx) -> list[Finding]:
    """A rank that arrives last at collectives (or computes > 5 % longer) makes every other rank wait."""
    sk = c.a.skew
    if not sk or not sk.stragglers:
        return []
    st = sk.stragglers
    nsteps = statistics.median([r.nsteps for r in c.ranks]) if c.ranks else 1
    wait = sum(b.mean_skew_ms * b.matched for b in sk.by_collective) / nsteps
    times = {r.rank: r.step_time_ms for r in c.ranks}
    med = statistics.median(times.values()) if times else 0.0
    slow = max((times.get(x.rank, 0.0) - med for x in st), default=0.0)
    gain = min(max(wait, slow), c.step_ms or max(wait, slow))
    why: dict[int, list[str]] = {}
    for x in st:
        why.setdefault(x.rank, []).append(f"{x.reason}: {fmt(x.value, 'pct')}")
    who = "; ".join(f"rank {r} on host {c.host(r)} ({'; '.join(w)})" for r, w in list(why.items())[:5])
    ev = who + (f"; arrival skew totals {fmt(wait, 'ms')} per step over {sk.matched} matched collectives"
                if sk.matched else "") + f"; median step {fmt(med, 'ms')}"
    hosts = sorted({c.host(x.rank) for x in st})
    all_hosts = {r.host for r in c.ranks if r.host}
    acts = []
    if len(all_hosts) > 1:
        check = "clocks/throttling (`nvidia-smi -q -d PERFORMANCE`), NIC errors" if c.gpu else "CPU frequency"
        acts.append(f"inspect host(s) {', '.join(hosts[:5])}: {check}, other processes; replace or exclude the node")
    stage_of = {b.rank: b.stage for b in (c.a.pipeline.stage_bubbles if c.a.pipeline else [])}
    staged = sorted({stage_of[r] for r in why if r in stage_of})
    if staged:
        acts.append(f"move layers off pipeline stage(s) {', '.join(map(str, staged))} (the straggler's compute "
                    "sets the pipeline's pace)")
    if not acts:
        acts.append("all ranks share one host: look for uneven work (data, sequence lengths, layer split) on "
                    f"rank(s) {', '.join(map(str, list(why)[:5]))}")
    eg = c.gain_text(gain, "the waiting the straggler imposes (arrival skew per step, or its extra step time over "
                     "the median)")
    return [c.finding("stragglers", severity_for(gain, c.step_ms), "Straggler rank(s)", ev, [x.rank for x in st],
                      [], "; ".join(acts), eg, gain, "skew.stragglers")]


def low_busbw(c: Ctx) -> list[Finding]:
    """Collective bus bandwidth far below the NVLink peak for large messages (topology or NCCL settings)."""
    peak = link_busbw_gbps(c.device)
    if peak is None:
        return []
    per_host = c.gpus_per_host()
    groups: dict[tuple, list] = {}
    for r in c.ranks:
        for cc in r.comm_by_kind:
            gs, bw = cc.group_size or 0, cc.busbw_gbps
            if bw is None or gs < 2 or not cc.sized_count or (per_host and gs > per_host):
                continue
            if cc.bytes / cc.sized_count < 4 * 2**20:  # small messages are latency-bound
                continue
            groups.setdefault((cc.kind, cc.pg), []).append((r, cc))
    out = []
    for (kind, pg), xs in groups.items():
        bw = statistics.fmean(cc.busbw_gbps for _, cc in xs)
        if bw >= 0.5 * peak:
            continue
        target = 0.8 * peak
        gain = statistics.fmean((cc.total_ms - cc.overlapped_ms) / r.nsteps for r, cc in xs) * (1 - bw / target)
        ev = (f"{kind}{f' on pg {pg!r}' if pg else ''}: busbw {fmt(bw, 'gbps')} (mean over {len(xs)} ranks) vs "
              f"≈ {fmt(peak, 'gbps')} achievable on {c.device} NVLink ({fmt(bw / peak, 'pct')})")
        act = ("check the topology (`nvidia-smi topo -m`: NVLink, not PCIe/SYS, between the group's GPUs), "
               "`NCCL_DEBUG=INFO` for the transport, unset `NCCL_P2P_DISABLE`/`NCCL_P2P_LEVEL` overrides; "
               "keep the group inside one node")
        eg = c.gain_text(gain, f"its exposed time × (1 − busbw / {fmt(target, 'gbps')}), i.e. at 80 % of the link "
                         "peak")
        out.append(c.finding("low_busbw", "low" if severity_for(gain, c.step_ms) == "low" else "medium",
                             f"Low {kind} bus bandwidth", ev, [r.rank for r, _ in xs], [], act, eg, gain,
                             "ranks[].comm_by_kind[].busbw_gbps"))
    return out
