"""Host-side rules: launch-bound GPUs, DataLoader waits, exposed copies, and timings that cannot be trusted."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.devices import cpu_only_words
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where
from llmdiag.diagnose.rules.idle_calls import allocator_churn, host_sync, single_op_ms, stack_caveat  # noqa: F401 (re-export)


IDLE_FLOOR = 0.05  # an idle part below 5 % of the step gets no finding
MANY_LAUNCHES = 50  # kernels per step below which launch overhead cannot be what keeps the device idle
# Below MANY_LAUNCHES, the host-bound idle per launch must exceed what dispatching one eager op costs (~10-150 µs)
# for "the host is slow between launches" to be a claim: a toy with 7 kernels idles ~130 µs per launch.
FEW_LAUNCH_GAP_US = 200.0
LAUNCH_SHARE = 0.10  # launch calls' time per step, as a share of the host-bound idle, below which launches are
# not the cost (removing every launch call gives back under a tenth of it): the idle is the host's own op work
# (ATen, Python) and graphs/fusion advice does not follow. TorchRec-like (issue #34): 0.7 ms of launches against
# 12 ms of idle (6 %); vLLM eager decode on B200 (with_stack): 8.85 ms against 46.3 ms (19 %), launch-bound.
LAUNCH_IDLE = 0.15  # device idle, less what the DataLoader, blocking calls and single long ops hold, below which
# (as a share of the step) launch overhead is not what keeps the device idle


def host_bound(c: Ctx) -> list[Finding]:
    """GPU idle while the host runs ops and launches short kernels: launch overhead, not GPU work, sets the pace.
    Precondition: many launches per step (MANY_LAUNCHES), and the device idle less what the DataLoader, blocking
    runtime calls and single long host ops or launch calls (a first launch loading code) hold at least
    LAUNCH_IDLE of the step. The gain is the host-bound idle (device idle under host ops that are not blocking
    runtime calls, DataLoader waits or communication waits) less what single long ops hold, a bound: neither
    counts idle torch.compile or CUDA graphs do not remove (a DataLoader-bound step's idle is the DataLoader's).
    With fewer than MANY_LAUNCHES kernels per step the claim is "the host is slow between launches" (no fusion
    advice) and needs more idle per launch than an eager op's dispatch (FEW_LAUNCH_GAP_US): a toy's 7 kernels
    after one 6.5 ms first launch (amd_mi250_minitoy) are no such claim."""
    p = c.a.pipeline
    bad = []
    for r in c.ranks:
        h = r.hints
        idle, short, med = h.device_idle_frac, h.short_kernel_frac, h.median_kernel_us
        if r.trace_kind != "gpu" or idle is None or idle < LAUNCH_IDLE:
            continue
        if r.idle is not None:  # direct evidence: gaps the host caused (next kernel launched inside the gap)
            # The profiler's own host work (recording every op) lengthens the host's path between launches:
            # where the manifest shows what a step costs without it, that part of the idle is not the job's.
            # Idle that one long host op holds is that op's (host_op_stall): fusion or graphs do not remove it.
            gain = max(0.0, r.idle.host_bound_ms - (_profiler_cost(c, r.rank) or 0.0) - single_op_ms(r))
            other = r.idle.dataloader_ms + r.idle.runtime_ms + single_op_ms(r)  # idle other rules own
            if idle * r.step_time_ms - other < LAUNCH_IDLE * r.step_time_ms:
                continue
            kps = h.kernels_per_step or 0
            if kps < MANY_LAUNCHES and gain * 1e3 < FEW_LAUNCH_GAP_US * kps:
                continue  # a few launches each behind an eager op's dispatch: a tiny job, nothing to move off
        elif not ((short is not None and short >= 0.5) or (short is None and med is not None and med < 10)):
            continue
        else:  # a summary without the idle split: idle less pipeline bubble and DataLoader waits
            bubble = (p.measured * p.window_ms) if p else 0.0
            gain = max(0.0, idle * r.step_time_ms - bubble - (h.dataloader_frac or 0.0) * r.step_time_ms)
        if gain > 0 and gain >= IDLE_FLOOR * r.step_time_ms:
            bad.append((r, gain))
    if not bad:
        return []
    gain = statistics.fmean(g for _, g in bad)
    r = max(bad, key=lambda x: x[1])[0]
    h = r.hints
    split = (f"; of the idle, {fmt(r.idle.host_bound_ms, 'ms')} per step waits for the host's next launch while "
             f"host ops run, {fmt(r.idle.queued_ms, 'ms')} waits on already-queued work (dependencies), "
             f"{fmt(r.idle.runtime_ms, 'ms')} in blocking runtime calls" if r.idle else "")
    if r.idle and single_op_ms(r) > 0:
        split += (f"; {fmt(single_op_ms(r), 'ms')} of the host-bound idle is held by single long host ops "
                  "(host_op_stall), not counted here")
    if r.idle and r.idle.dataloader_ms > 0:
        split += (f"; {fmt(r.idle.dataloader_ms, 'ms')} of the idle waits for the DataLoader (its own finding), "
                  "not counted here")
    cost = _profiler_cost(c, r.rank)
    if cost and r.idle is not None:
        split += (f"; without the profiler a step took {fmt(r.step_time_ms - cost, 'ms')} (`llmdiag run`'s "
                  f"unprofiled steps), so {fmt(cost, 'ms')} per step of that host time is the profiler's own, "
                  "taken off the gain")
    ev = (f"rank {r.rank}: {c.dev} idle {fmt(h.device_idle_frac, 'pct')} of the step, {fmt(h.kernels_per_step, 'int')} "
          f"kernels per step, median {fmt(h.median_kernel_us, 'us')}, {fmt(h.short_kernel_frac, 'pct')} under "
          f"10 µs{split} ({plural(len(bad), 'rank')} alike){stack_caveat(r)}")
    # Fusion and graphs remove per-launch overhead: their precondition is many launches, mostly short kernels,
    # and launch calls that are the cost (their time per step a share of the idle they explain).
    many = (h.kernels_per_step or 0) >= MANY_LAUNCHES
    launch_ms = None
    if r.launch is not None:  # kernels' launch calls only (a summary written before they were apart: all of them)
        launch_ms = (r.launch.kernel_launch_ms_per_step if r.launch.kernel_launch_ms_per_step is not None
                     else r.launch.launch_ms_per_step)
    calls_cost = launch_ms is None or r.idle is None or launch_ms >= LAUNCH_SHARE * gain
    short = h.short_kernel_frac is not None and h.short_kernel_frac >= 0.5 and many and calls_cost
    a2a = any(cs.kind == "alltoall" for x, _ in bad for cs in x.comm_by_kind)
    if launch_ms is not None and r.idle is not None:
        ev += (f"; kernel launch calls take {fmt(launch_ms, 'ms')} per step of the {fmt(gain, 'ms')} idle: "
               + (("the launch calls are most of it" if launch_ms >= 0.5 * gain else
                   "the rest is the host's own op work (Python, ATen) between launches, which CUDA graphs also "
                   "skip and fusion reduces") if calls_cost else
                  "the host's own op work between launches is the cost, not the launch calls"))
    graphs = ("" if a2a else ", or CUDA graphs (`torch.compile(mode=\"reduce-overhead\")` / `torch.cuda.CUDAGraph`)"
              " to remove launch overhead")
    act = ("`torch.compile(model)` to fuse the short kernels" + graphs
           + ("; not CUDA graphs: the step holds all_to_all, whose splits are data-dependent" if a2a else "")
           if short else "the host is slow between launches, not the kernels: profile the Python side of the step "
           "(`py-spy record`), move per-step host work (logging, metric math, data munging) off the training "
           "thread" + ("; `torch.compile(model)` removes per-op Python overhead" if many else
                       f" (with {fmt(h.kernels_per_step, 'int')} kernels per step, launch overhead is not what "
                       "the host spends its time on: fusion or CUDA graphs would not help)"))
    eg = c.gain_text(gain, "the device idle spent waiting for the host's next launch, mean over those ranks; what "
                     + ("fusion or graphs actually recover" if short else "less host work per op recovers")
                     + " depends on the ops", bound=True)
    # named for what the host spends the idle in: the launch calls only where they are most of it
    launches = calls_cost and (launch_ms is None or r.idle is None or launch_ms >= 0.5 * gain)
    title = f"{c.Dev} idle behind kernel launches" if launches else f"{c.Dev} idle behind host ops"
    return [c.finding("host_bound", severity_for(gain, c.step_ms), title,
                      ev,
                      [x[0].rank for x in bad], steps_where([r], lambda st: st.idle_ms >= 0.15 * st.time_ms),
                      act, eg, gain, "ranks[].idle.host_bound_ms", gain_kind="bound",
                      events=["kernels", "host ops and runtime launches overlapping device idle"])]


def _profiler_cost(c: Ctx, rank: int) -> float | None:
    """Profiled minus unprofiled step time of `rank`, from the manifest of an own run (None for foreign traces)."""
    return c.a.manifest.profiler_cost_ms(rank) if c.a.manifest else None


def _short(name: str, n: int = 80) -> str:
    """A name from a trace (untrusted, unbounded) cut for a one-line evidence text; outputs escape it."""
    return name if len(name) <= n else name[: n - 1] + "…"


def dataloader(c: Ctx) -> list[Finding]:
    """Host waiting in DataLoader.__next__ for > 10 % of the step: input pipeline starves the GPU. The gain is the
    device idle during those waits where the idle split exists (else the wait itself): a bound."""
    bad = [r for r in c.ranks if (r.hints.dataloader_frac or 0) > 0.10]
    gains = [(r, r.idle.dataloader_ms if r.idle is not None else r.hints.dataloader_frac * r.step_time_ms) for r in bad]
    gains = [(r, g) for r, g in gains if g > 0 and g >= IDLE_FLOOR * r.step_time_ms]
    if not gains:
        return []
    gain = statistics.fmean(g for _, g in gains)
    w = max(bad, key=lambda r: r.hints.dataloader_frac)
    ev = (f"rank {w.rank}: {fmt(w.hints.dataloader_frac, 'pct')} of the {fmt(w.step_time_ms, 'ms')} step inside "
          f"DataLoader `__next__` ({plural(len(bad), 'rank')} above 10 %)")
    cores, per_host = (c.man.cpu_cores if c.man else None), c.gpus_per_host()
    nw = max(2, int(cores) // int(per_host) - 1) if cores and per_host else 4
    act = (f"`DataLoader(num_workers={nw}, pin_memory=True, persistent_workers=True, prefetch_factor=2)`; "
           "move tokenisation/augmentation offline")
    eg = c.gain_text(gain, "the device idle while the host waits for the next batch, mean over those ranks", True)
    return [c.finding("dataloader", severity_for(gain, c.step_ms), "Steps wait for the DataLoader", ev,
                      [r.rank for r, _ in gains], steps_where([w]), act, eg, gain, "ranks[].hints.dataloader_frac",
                      gain_kind="bound", events=["DataLoader __next__ spans"])]


def contaminated_timings(c: Ctx) -> list[Finding]:
    """Oversubscribed CPU runs (more ranks than cores) or CPU-only traces: absolute times are not GPU times."""
    if c.man and c.man.oversubscribed:
        per_host = c.gpus_per_host() or c.a.world_size
        ev = (f"manifest says oversubscribed: {per_host} local ranks on {c.man.cpu_cores or '?'} CPU cores; "
              "ranks compete for cores, so waits and bubbles include scheduling delays")
        return [c.finding("contaminated_timings", "high", "Timings contaminated by CPU oversubscription", ev, [], [],
                          "rerun with at most one rank per core (fewer ranks or a bigger machine); compare only "
                          "relative numbers from this run", "not a speed-up: makes the other numbers trustworthy",
                          None, "manifest.oversubscribed", source="manifest",
                          events=["oversubscribed", "cpu_cores"])]
    if c.a.trace_kind == "cpu":
        what = cpu_only_words(r.backend for r in c.ranks)
        return [c.finding("contaminated_timings", "low", "CPU-only traces", f"every trace is {what}; "
                          "compute and communication times are those of CPU ops, not GPU kernels", [], [],
                          "use these numbers for structure (overlap, bubbles, order), not for GPU tuning",
                          "none: informational", None, "trace_kind")]
    return []


def exposed_memcpy(c: Ctx) -> list[Finding]:
    """Device time in memcpy/memset that no kernel or collective overlaps (CPU offload, pageable H2D/D2H copies,
    device-to-device copies on the compute stream): the SMs compute nothing while the copies run. The advice
    follows the copies' direction (read from their names): host<->device copies are hidden by pinned memory and
    a side stream; device-to-device copies are removed at their source (`.contiguous()`, `torch.cat`, clones)."""
    bad = [r for r in c.ranks if r.trace_kind == "gpu" and r.step_time_ms > 0 and r.other_ms > 0
           and r.other_ms >= IDLE_FLOOR * r.step_time_ms]
    if not bad:
        return []
    gain = statistics.fmean(r.other_ms for r in bad)
    w = max(bad, key=lambda r: r.other_ms)
    copies = [k for k in w.top_kernels if k.kind in ("memcpy", "memset")][:3]
    names = ", ".join(f"`{_short(k.name)}` {fmt(k.total_ms / w.nsteps, 'ms')}" for k in copies)
    ev = (f"rank {w.rank}: {fmt(w.other_ms, 'ms')} per step ({fmt(w.other_ms / w.step_time_ms, 'pct')}) of memcpy/"
          f"memset with no kernel or collective running{' (all copies, per step: ' + names + ')' if names else ''} "
          f"({plural(len(bad), 'rank')})")
    by_dir = _copy_directions(copies)
    acts = []
    if by_dir.get("host", 0) > 0:
        pinned = all("Pinned" in k.name for k in copies if _copy_directions([k]).get("host"))
        acts.append("overlap the host<->device copies with compute: "
                    + ("they are already from pinned memory, so issue them `non_blocking=True` on a side stream"
                       if pinned else "pinned host memory (`pin_memory=True`) and `non_blocking=True` copies on a "
                       "side stream")
                    + "; with CPU offload (FSDP `CPUOffload`, optimizer offload) prefetch the next layer's "
                    f"parameters, or keep them on the {c.dev} if memory allows")
    if by_dir.get("device", 0) > 0:
        acts.append("find the ops that launch the device-to-device copies (`torch.profiler` with `with_stack=True`, "
                    "or `llmdiag analyze --timeline`): `.contiguous()` after a transpose, `torch.cat`/`clone`, dtype "
                    "casts; use views, preallocated buffers or in-place ops so the copy is not needed")
    if not acts:
        acts.append("find the ops that launch the copies and overlap them with compute (a side stream) or remove them")
    if by_dir.get("device", 0) > by_dir.get("host", 0):
        acts.reverse()
    eg = c.gain_text(gain, "the copy time no compute hides, mean over those ranks", True)
    return [c.finding("exposed_memcpy", severity_for(gain, c.step_ms), f"{c.Dev} busy only with memory copies", ev,
                      [r.rank for r in bad], [], "; ".join(acts), eg, gain, "ranks[].other_ms", gain_kind="bound",
                      events=["gpu_memcpy / gpu_memset events"] + [_short(k.name) for k in copies])]


def _copy_directions(copies) -> dict[str, float]:
    """ms of copies host<->device vs device-to-device, from Kineto's names (`Memcpy HtoD (Pinned -> Device)`,
    `Memcpy DtoD (Device -> Device)`, `hipMemcpyDtoDAsync`, `CopyDeviceToHost`); memsets and unknown names count
    for neither."""
    out: dict[str, float] = {}
    for k in copies:
        n = k.name
        if "DtoD" in n or "Device -> Device" in n or "DeviceToDevice" in n:
            out["device"] = out.get("device", 0.0) + k.total_ms
        elif any(x in n for x in ("HtoD", "DtoH", "Host", "Pinned", "Pageable")):
            out["host"] = out.get("host", 0.0) + k.total_ms
    return out
