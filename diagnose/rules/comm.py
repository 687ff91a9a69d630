"""Communication rules: exposed data-parallel and tensor-parallel collectives, stragglers, low bus bandwidth."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.devices import host_backends, link_peak
from llmdiag.diagnose.model.format import fmt, plural, ranges
from llmdiag.diagnose.model.roles import role_note
from llmdiag.diagnose.rules.comm_host_set import held_now, later_bound, words as host_set_words
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where
from llmdiag.diagnose.rules.comm_gain import (gain_text as _gain_text, kind as _kind, on_path as _on_path, overlap_unmeasured,
                                              path_holder, simulated as _simulated)
from llmdiag.diagnose.rules.stragglers import stragglers
from llmdiag.diagnose.rules.comm_kinds import OVERLAP_GATE, open_kinds, open_words, wait_words

TORCH_DDP_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.DistributedDataParallel's own default


def _exposed_comm_rule(c: Ctx, roles: tuple) -> tuple | None:
    """Per-rank exposed comm of some roles; fires when the mean is ≥ 5 % of the step and overlap < 70 %. Event-
    sampled ranks are left out (comm_gain.py overlap_unmeasured): their overlap is not measured.

    Where a straggler finding fires, the exposed part of each rank's wait for late peers at matched collectives
    (skew.wait_exposed_ms_by_rank: the wait with no compute under it) is taken out first: that time is the
    straggler's, credited there, and no overlap would hide it; the part under compute was never exposed, so there
    is nothing to take out. Without a straggler finding the waits stay in (two ranks, or waits within chance)."""
    waits = _peer_waits(c)
    rows: list = []
    for r in c.ranks:
        if overlap_unmeasured(r):  # event-sampled: its compute under the collectives is partly dropped
            continue
        tot, exp, cs = c.comm_of(r, roles)
        if cs and r.step_time_ms:
            rows.append((r, tot, max(0.0, exp - min(exp, waits.get(r.rank, 0.0))), cs))
    if not rows:
        return None
    held = None
    if statistics.fmean(x[2] for x in rows) < 0.05 * statistics.fmean(x[0].step_time_ms for x in rows):
        held = path_holder(c, rows)  # the mean dilutes the straggler's own exposure, which the job pays
        held = held if held is not None and held[2] >= 0.05 * held[0].step_time_ms else None
        rows = [held] if held is not None else rows
    tot = sum(x[1] for x in rows)
    ov = sum(sum(cc.overlapped_ms for cc in x[3]) / x[0].nsteps for x in rows)
    ratio = ov / tot if tot else None
    exp_mean = statistics.fmean(x[2] for x in rows)
    step = statistics.fmean(x[0].step_time_ms for x in rows)
    opened = open_kinds(rows, step) if ratio is not None and ratio >= OVERLAP_GATE else []
    if exp_mean < 0.05 * step or (ratio is not None and ratio >= OVERLAP_GATE and not opened):
        return None  # well overlapped, unless one kind on its own is not (rules/comm_kinds.py)
    sims = [_simulated(x[0], x[3], waits.get(x[0].rank, 0.0)) for x in rows]
    simulated = all(g is not None for g in sims)
    gain = statistics.fmean([g for g in sims if g is not None] if simulated else
                            [min(x[2], x[0].compute_only_ms, _on_path(x[0], x[2])) for x in rows])
    if gain < 0.01 * step:  # nothing to hide it under (e.g. a trace of communication only), or none on the path
        return None
    bad = [x for x in rows if x[2] >= 0.05 * x[0].step_time_ms]
    worst = max(rows, key=lambda x: x[2] / x[0].step_time_ms)
    kinds: dict[tuple, int] = {}
    for x in rows:
        for cc in x[3]:
            kinds[(cc.kind, cc.pg)] = kinds.get((cc.kind, cc.pg), 0) + cc.count
    what = ", ".join(f"{k} on pg '{pg}'" if pg else k for (k, pg) in sorted(kinds, key=lambda kp: -kinds[kp])[:3])
    ev = (f"{what}: overlap ratio {fmt(ratio, 'pct')}, exposed {fmt(exp_mean, 'ms')} per step = "
          f"{fmt(exp_mean / step, 'pct')} of the {fmt(step, 'ms')} step (mean over {plural(len(rows), 'rank')}; worst rank "
          f"{worst[0].rank}: {fmt(worst[2], 'ms')})") + (open_words(opened, rows, ratio) if opened and ratio is not None else "")
    ev += wait_words(worst[0].rank, c.comm_of(worst[0], roles)[1], waits.get(worst[0].rank, 0.0), _late(c))
    if (w := worst[0]).critical_path is not None and _on_path(w, worst[2]) < worst[2]:
        ev += (f"; rank {w.rank}'s critical path holds {fmt(_on_path(w, worst[2]), 'ms')} of communication per step "
               "(the rest of the exposed time runs while the step waits on something else: hiding it gains nothing)")
    if held is not None and c.a.critical_path is not None:
        ev += (f"; rank {worst[0].rank} holds {fmt(c.a.critical_path.held_by[str(worst[0].rank)], 'ms')} of the job's "
               f"{fmt(c.a.critical_path.length_ms, 'ms')} critical path per step: its exposure is the job's (its peers' "
               "exposed time is their wait for it)")
    ranks = [x[0].rank for x in bad] or [worst[0].rank]
    steps = steps_where([x[0] for x in bad] or [worst[0]], lambda st: st.exposed_comm_ms >= 0.05 * st.time_ms)
    return ev, ranks, steps, gain, step, {k for k, _ in kinds}, rows, simulated


def _peer_waits(c: Ctx) -> dict[int, float]:
    """rank -> ms per step of exposed communication it spent waiting for late peers at matched collectives, only
    where a straggler finding fires; computed once per analysis (three exposed-communication rules ask). A summary
    older than the exposed measure gives the whole waits (wait_ms_by_rank)."""
    if c.peer_waits is None:
        sk = c.a.skew
        by = None if not sk else sk.wait_ms_by_rank if sk.wait_exposed_ms_by_rank is None else sk.wait_exposed_ms_by_rank
        c.peer_waits = {} if not by or not stragglers(c) else {
            r.rank: by.get(str(r.rank), 0.0) / r.nsteps for r in c.ranks if r.nsteps}
    return c.peer_waits


def _late(c: Ctx) -> list[int]:
    """The late-arriving ranks a straggler finding names (none where none fires)."""
    return sorted({x.rank for x in (c.a.skew.stragglers if c.a.skew else []) if x.kind}) if stragglers(c) else []


def dp_wrapper(c: Ctx, kinds: set | None = None) -> str | None:
    """"fsdp", "ddp" or None: which data-parallel wrapper the manifest or the trace's own ops identify."""
    ev = [r.training for r in c.ranks if r.training is not None]
    if int(c.layout.get("fsdp") or 1) > 1 or any(e.fsdp_ops for e in ev):
        return "fsdp"
    if any(e.ddp_ops for e in ev):
        return "ddp"
    if kinds and kinds & {"reducescatter", "allgather"}:
        return "fsdp"
    return "ddp" if c.man and int(c.layout.get("dp") or 1) > 1 else None


def _ddp_volume(rows) -> float | None:
    """Gradient bytes all-reduced per step (mean over ranks), where the trace records message sizes."""
    vols = [sum(cc.bytes for cc in x[3] if cc.kind == "allreduce") / x[0].nsteps for x in rows
            if all(cc.sized_count == cc.count for cc in x[3] if cc.kind == "allreduce")]
    return statistics.fmean(vols) if vols and any(vols) else None


def dp_overlap(c: Ctx) -> list[Finding]:
    """Data-parallel / FSDP collectives not hidden behind backward/forward compute. DDP advice needs DDP identified
    (manifest or `DistributedDataParallel.forward` in the trace) and a gradient volume above the bucket cap (else
    no bucket setting changes anything); the cap is quoted as current only when the manifest recorded it."""
    res = _exposed_comm_rule(c, ("dp",))
    if not res or c.training is False:
        return []
    ev, ranks, steps, gain, step, kinds, rows, simulated = res
    wrapper = dp_wrapper(c, kinds)
    events = ["collective kernels (kind, process group, sizes)", "compute kernels"]
    source = "trace"
    if wrapper == "fsdp":
        act = ("FSDP: `reshard_after_forward=False` (`--no-reshard-after-forward`; keeps parameters gathered "
               "between forward and backward, one all-gather per layer less, at the cost of unsharded-parameter "
               "memory) and explicit prefetch (`module.set_modules_to_forward_prefetch([...])`, "
               "`set_modules_to_backward_prefetch([...])`)")
    elif wrapper == "ddp":
        read = c.option("bucket_cap_mb")
        cap = float(read) if read else TORCH_DDP_BUCKET_CAP_MB
        vol = _ddp_volume(rows)
        if vol is None or vol <= cap * 2**20:  # every gradient fits one bucket: no cap changes the schedule
            return []
        n_ar = statistics.fmean(sum(cc.count for cc in x[3] if cc.kind == "allreduce") / x[0].nsteps for x in rows)
        msg = vol / n_ar if n_ar else None
        if msg is None or msg > 2 * cap * 2**20:  # not buckets of this cap: some other all-reduce, or another cap
            return []
        small = msg is not None and msg < 4 * 2**20
        new = cap * 2 if small else max(1.0, cap / 2)
        why = ("small messages are latency-bound: fewer, larger buckets" if small else
               "a smaller last bucket shortens the exposed tail after backward and starts the first one earlier")
        now = f"now {cap:g}, read from the manifest" if read else f"the cap is not recorded; torch's default is {cap:g}"
        source = "manifest" if read else "trace"
        events.append("DistributedDataParallel.forward" if not c.man else "manifest.layout.dp")
        act = (f"DDP: `bucket_cap_mb={new:g}` (`--bucket-cap-mb {new:g}`, {now}; {fmt(vol, 'bytes')} of gradients "
               f"in {fmt(n_ar, 'avg')} all-reduces per step, mean message {fmt(msg, 'bytes')}: {why}); "
               "`gradient_as_bucket_view=True`")
    else:
        return []  # the wrapper is not identified: exposed_comm reports the time without DP advice
    eg = _gain_text(c, gain, "DP communication", simulated)
    return [c.finding("dp_overlap", severity_for(gain, step), "Data-parallel communication is exposed", ev, ranks,
                      steps, act, eg, gain, "ranks[].comm_by_kind[].overlap_ratio", gain_kind=_kind(simulated),
                      source=source, events=events)]


def exposed_comm(c: Ctx) -> list[Finding]:
    """Exposed communication no specific rule claims: groups of unknown role (foreign traces), context/expert
    groups, and data-parallel traffic whose wrapper is not identified. Says what it is and how much, no setting."""
    # DP time no DP advice claims is reported here; EP time only where no moe rule reads it (Analysis.moe)
    roles = ("?", "cp") + (() if c.a.moe else ("ep",)) + (() if dp_overlap(c) else ("dp",))
    roles += () if c.a.pipeline else ("pp",)  # send/recv outside an identified pipeline
    res = _exposed_comm_rule(c, roles)
    if not res:
        return []
    ev, ranks, steps, gain, step, kinds, rows, simulated = res
    act = _exposed_action(c, rows)
    eg = _gain_text(c, gain, "communication", simulated)
    return [c.finding("exposed_comm", severity_for(gain, step), "Communication is exposed", ev, ranks, steps, act,
                      eg, gain, "ranks[].exposed_comm_ms", gain_kind=_kind(simulated),
                      events=["collective kernels (kind, process group)", "compute kernels"])]


BLOCKING_SHARE = 0.25  # the host waits in communication for ≥ 25 % of the exposed time: the collective blocks it


def _exposed_action(c: Ctx, rows) -> str:
    """`async_op=True` only where the host thread is seen waiting in communication (IdleBreakdown.comm_wait_ms:
    a wait op or a blocking collective spans the device idle); a collective already launched asynchronously
    gains nothing from it. Where a straggler finding fires, its peers' exposed waits for it are named as its (taken
    out of the exposure above); what is left is the ranks' own exchange, with the action that fits it."""
    late = _late(c)
    late = [] if {x[0].rank for x in rows} <= set(late) else late  # the straggler's own exposure: not a wait
    rest = _own_action(c, rows, blocked_ok=not late)
    if late:
        return (f"the ranks also wait here for straggler rank(s) {ranges(late)} (that wait is taken out above; see "
                "the `stragglers` finding): fix the straggler first; for the exposure left, their own exchange: "
                + rest)
    return rest


def _own_action(c: Ctx, rows, blocked_ok: bool = True) -> str:
    """The action for the ranks' own exposed exchange (no wait for a straggler in it). `blocked_ok` False where
    the ranks wait for a straggler: the host's wait in the collective is then largely that wait, and launching
    it asynchronously would not shorten it, so no `async_op` advice."""
    tail = "; " + role_note({(cc.kind, cc.pg): c.role(cc) for x in rows for cc in x[3]}, c.a.layout)
    if ddp := _ddp_link_bound(c, rows):
        return ddp + tail
    exp = statistics.fmean(x[2] for x in rows)
    blocked = statistics.fmean((x[0].idle.comm_wait_ms if x[0].idle is not None else 0.0) for x in rows)
    if all(x[0].idle is None for x in rows):  # CPU-only traces: no device idle says whether the host waits
        cores = (" (gloo's exchange and the compute share the cores, so less hides than on GPUs)"
                 if host_backends(x[0].backend for x in rows) else "")
        return ("find what the collective waits for with `llmdiag analyze --timeline`; the trace does not show "
                "whether the calling thread waits in it (no device activity to attribute): where it is called "
                "without `async_op=True`, issue it asynchronously and wait just before its result is used, with "
                f"independent compute beside it{cores}, or shrink it" + tail)
    if blocked_ok and exp > 0 and blocked >= BLOCKING_SHARE * exp:
        return (f"the host waits in the collective ({fmt(blocked, 'ms')} per step): launch it asynchronously "
                "(`async_op=True`, wait just before its result is used) and overlap it with independent compute "
                "(prefetch), or shrink it" + tail)
    return ("find what the collective waits for before tuning it: with `llmdiag analyze --timeline` look at the "
            "compute just before each exposed op; the host does not wait in it (already launched asynchronously), "
            "so overlap needs independent compute scheduled beside it (prefetch the next batch's exchange), or "
            "shrink it" + tail)


def _ddp_link_bound(c: Ctx, rows) -> str | None:
    """DDP whose gradients fit one bucket and whose collectives take longer than all the step's compute: no
    bucket size or schedule hides them (overlap hides at most the compute-only time, the gain's bound), so the
    levers are the link, fewer bytes, or more compute per all-reduce. None where any precondition is unread."""
    if any(c.role(cc) != "dp" for x in rows for cc in x[3]) or dp_wrapper(c) != "ddp":
        return None
    read = c.option("bucket_cap_mb")
    cap = float(read) if read else TORCH_DDP_BUCKET_CAP_MB
    vol = _ddp_volume(rows)
    comm = statistics.fmean(x[1] for x in rows)
    compute = statistics.fmean(x[0].compute_ms for x in rows)
    if vol is None or vol > cap * 2**20 or comm < compute:
        return None
    n_ar = statistics.fmean(sum(cc.count for cc in x[3] if cc.kind == "allreduce") / x[0].nsteps for x in rows)
    bws = [cc.busbw_gbps for x in rows for cc in x[3] if cc.kind == "allreduce" and cc.busbw_gbps]
    bw = f" (busbw {fmt(statistics.fmean(bws), 'gbps')})" if bws else ""
    peers = (f" ({plural(len(c.ranks), 'rank')} of {c.a.world_size} traced: kernel time, which includes waiting for "
             "peers)" if c.a.world_size and len(c.ranks) < c.a.world_size else "")
    now = f"{cap:g} MiB, read from the manifest" if read else f"torch's default {cap:g} MiB; the cap is not recorded"
    return (f"DDP ({'the manifest' if c.man else 'DistributedDataParallel.forward in the trace'}): "
            f"{fmt(vol, 'bytes')} of gradients per step in {fmt(n_ar, 'avg')} all-reduces fit one bucket ({now}): "
            f"a smaller cap starts them earlier in backward, but the data-parallel collectives take "
            f"{fmt(comm, 'ms')} per step{peers} against {fmt(compute, 'ms')} of compute in the whole step, so overlap "
            "hides at most the compute-only time (the gain below), whatever the bucket size; the levers are the "
            f"all-reduce's bandwidth{bw}, fewer gradient bytes (a DDP comm hook: PowerSGD, or `bf16_compress_hook` "
            "for fp32 gradients), or more compute per all-reduce (a larger batch per rank, or gradient accumulation "
            "under `model.no_sync()`)")


def tp_exposed(c: Ctx) -> list[Finding]:
    """Tensor-parallel collectives on the critical path (they sit between dependent matmuls)."""
    res = _exposed_comm_rule(c, ("tp",))
    if not res:
        return []
    ev, ranks, steps, gain, step, kinds, rows, simulated = res
    tp = int(c.layout.get("tp") or max((cc.group_size or 0) for x in rows for cc in x[3]) or 0)
    acts = []
    per_host = c.gpus_per_host()
    if tp and per_host and tp > per_host:
        acts.append(f"keep TP inside a node: tp ≤ {per_host} GPUs per host (now tp={tp} crosses hosts)")
    if not c.option("sp"):
        acts.append("sequence parallel (`--sp`: all-reduce → reduce-scatter + all-gather, smaller activations)")
    if tp >= 2:
        acts.append(f"smaller TP: tp={max(1, tp // 2)} with twice the DP/FSDP degree")
    eg = _gain_text(c, gain, "TP communication", simulated)
    return [c.finding("tp_exposed", severity_for(gain, step), "Tensor-parallel communication is exposed", ev, ranks,
                      steps, "; or ".join(acts) or "smaller TP degree", eg, gain,
                      "ranks[].comm_by_kind[].overlap_ratio", gain_kind=_kind(simulated),
                      source="manifest" if c.layout.get("tp") else "trace",
                      events=["collective kernels (kind, process group, group size)", "compute kernels"])]


NIC_FLOOR_GBPS = 25.0  # one 200 Gb/s NIC per GPU: what even a group spanning nodes reaches on large messages


def low_busbw(c: Ctx) -> list[Finding]:
    """Collective bus bandwidth far below the device's intra-node link peak for large messages (topology or NCCL
    settings). Where the traces do not say whether a group spans nodes (a foreign trace of some of the ranks),
    the reference is the lower of the link peak and one 200 Gb/s NIC, and the evidence says so."""
    lp = link_peak(c.device)
    if lp is None:
        return []
    ws = c.a.world_size
    known = c.man is not None or (bool(ws) and len(c.ranks) == ws and all(r.host for r in c.ranks))
    per_host = c.gpus_per_host() if known else None
    ref = lp.busbw_gbps if known else min(lp.busbw_gbps, NIC_FLOOR_GBPS)
    groups: dict[tuple, list] = {}
    for r in c.ranks:
        for cc in r.comm_by_kind if not overlap_unmeasured(r) else []:  # its exposure (the gain) not measured
            gs, bw = cc.group_size or 0, cc.busbw_gbps
            if bw is None or gs < 2 or not cc.sized_count or (per_host and gs > per_host):
                continue
            if cc.bytes / cc.sized_count < 4 * 2**20:  # small messages are latency-bound
                continue
            groups.setdefault((cc.kind, cc.pg), []).append((r, cc))
    out = []
    waits, late = _peer_waits(c), _late(c)
    for (kind, pg), xs in groups.items():
        judged = _transfer_rows(xs, waits, late)
        bw = statistics.fmean(cc.busbw_gbps for _, cc in judged)
        if bw >= 0.5 * ref:
            continue
        target = 0.8 * ref
        gain = statistics.fmean(min(max(0.0, (cc.total_ms - cc.overlapped_ms) / r.nsteps - waits.get(r.rank, 0.0)),
                                    held_now(r, cc)) for r, cc in xs) * (1 - bw / target)
        floor = 0.01 * statistics.fmean(r.step_time_ms for r, _ in xs)
        later = later_bound(judged, bw, target) if gain < floor else None
        if gain < floor and (later is None or later < floor):  # off the critical path: a slow link that nothing
            continue  # waits on costs nothing (unless the host sets the step: then it may once that is fixed)
        where = (f"≈ {fmt(lp.busbw_gbps, 'gbps')} achievable on {c.device} ({lp.link})" if known else
                 f"{fmt(ref, 'gbps')}: the traces do not say whether the group spans nodes, so it is judged "
                 f"against the lower of {c.device}'s {fmt(lp.busbw_gbps, 'gbps')} ({lp.link}) and one 200 Gb/s NIC")
        over = (f"{plural(len(judged), 'rank')}" if judged is xs else
                f"straggler rank(s) {ranges([r.rank for r, _ in judged])}: its peers' kernels also hold their wait for it")
        ev = (f"{kind}{f' on pg {pg!r}' if pg else ''}: busbw {fmt(bw, 'gbps')} (mean over {over}, messages "
              f"≥ 4 MiB) vs {where} ({fmt(bw / ref, 'pct')})")
        act = ("check the topology (`nvidia-smi topo -m` / `rocm-smi --showtopo`: the fabric, not PCIe/SYS, between "
               "the group's GPUs), `NCCL_DEBUG=INFO` for the transport (and the NIC for groups across nodes), unset "
               "`NCCL_P2P_DISABLE`/`NCCL_P2P_LEVEL` overrides; keep the group inside one node")
        eg = c.gain_text(gain, f"its exposed time × (1 − busbw / {fmt(target, 'gbps')}), i.e. at 80 % of the "
                         "reference")
        if later is not None:  # the host sets the step: nothing now, a bound once the host-side findings are fixed
            ev += host_set_words(c, xs)
            act += ("; first trace every rank of the group (the peers' arrival splits waiting from transfer)"
                    if c.a.world_size and len(c.ranks) < c.a.world_size else "")
            eg = c.gain_text(gain, "its exposed time on the critical path now × (1 − busbw / "
                             f"{fmt(target, 'gbps')}): the host sets the step; once it no longer does, up to "
                             f"{fmt(later, 'ms')} per step (its whole kernel time × the same factor: fix the host "
                             "first, then profile again)", bound=True)
        out.append(c.finding("low_busbw", "low" if severity_for(gain, c.step_ms) == "low" else "medium",
                             f"Low {kind} bus bandwidth", ev, [r.rank for r, _ in xs], [], act, eg, gain,
                             "ranks[].comm_by_kind[].busbw_gbps", source="trace" if known else "assumed",
                             gain_kind="bound" if later is not None else "estimate",
                             events=["collective kernels with message sizes (In/Out msg nelems, dtype, Group size)",
                                     "deviceProperties.name"]))
    return out


def _transfer_rows(xs: list, waits: dict[int, float], late: list[int]) -> list:
    """The (rank, collectives) rows whose kernel time is the transfer: where a straggler finding fires, its peers'
    kernels also hold their wait for it (bytes over that time read as a slow link), so the bandwidth is judged on
    the straggler's own rows, which wait least; all rows otherwise, or where the straggler has none. The gain
    takes each rank's exposed wait out as the exposed rules do: a faster link does not shorten a wait."""
    own = [x for x in xs if x[0].rank in late] if waits else []
    return own or xs
