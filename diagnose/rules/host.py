"""Host-side rules: launch-bound GPUs, DataLoader waits, exposed copies, and timings that cannot be trusted."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.devices import cpu_only_words
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where
from llmdiag.diagnose.rules.allocator import allocator_churn  # noqa: F401 (re-export)
from llmdiag.diagnose.rules.idle_calls import host_sync, single_op_ms, stack_caveat  # noqa: F401 (re-export)
from llmdiag.diagnose.rules.launch import host_bound  # noqa: F401 (re-export)


IDLE_FLOOR = 0.05  # an idle part below 5 % of the step gets no finding


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
