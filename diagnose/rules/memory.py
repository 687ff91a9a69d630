"""Memory rules: a device close to capacity, or most of it unused."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding, MemoryStat, RankMetrics
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.base import Ctx, steps_where

MEM_EVENTS = ["[memory] instant events (Total Allocated / Total Reserved)", "deviceProperties.totalGlobalMem"]


def _mem_rows(c: Ctx) -> list[tuple[RankMetrics, MemoryStat, float, int | None]]:
    """(rank, device memory, used/capacity, activation bytes = peak − lowest allocated) of every device with
    a known capacity."""
    out = []
    for r in c.ranks:
        for m in r.memory:
            if m.capacity and m.capacity > 0 and m.device != "cpu":
                tl = [pt[1] for pt in m.timeline if len(pt) >= 2]
                act = int(m.peak_allocated - min(tl)) if tl else None
                out.append((r, m, m.used_frac, act))
    return out


def memory_near_capacity(c: Ctx) -> list[Finding]:
    """Peak reserved > 90 % of the device: one longer sequence or allocator fragmentation away from OOM."""
    rows = [x for x in _mem_rows(c) if x[2] > 0.90]
    if not rows:
        return []
    r, m, f, act = max(rows, key=lambda x: x[2])
    batch = c.man.batch if c.man else None
    mb = int(c.option("micro_batch") or (batch.micro_batch if batch else None) or 0)
    ev = (f"rank {r.rank} {m.device}: peak reserved {fmt(m.peak_reserved, 'gib')} of {fmt(m.capacity, 'gib')} "
          f"({fmt(f, 'pct')}), peak allocated {fmt(m.peak_allocated, 'gib')}; {len(rows)} device(s) above 90 %")
    acts = ["activation checkpointing (`--ac`, or selective per-layer `checkpoint_wrapper`)",
            "more FSDP sharding (larger fsdp degree, `reshard_after_forward=True`)"]
    acts.append(f"smaller microbatch ({mb} → {max(1, mb // 2)} sequences)" if mb > 1 else "smaller microbatch")
    head = m.capacity - m.used
    eg = f"headroom {fmt(head, 'gib')} now"
    if act:
        eg += (f"; activations are ≈ {fmt(act, 'gib')} of the peak (peak − lowest allocated): halving them "
               f"gives ≈ {fmt(head + act / 2, 'gib')} headroom")
    return [c.finding("memory_near_capacity", "high" if f > 0.95 else "medium", "Memory close to device capacity",
                      ev, [x[0].rank for x in rows], steps_where([r]), "; ".join(acts), eg, None,
                      "ranks[].memory[].peak_reserved", events=MEM_EVENTS)]


LOADER_FLOOR = 0.05  # DataLoader idle from this share of the step (the rules' floor for an idle part) stops the advice


def _loader_idle(r: RankMetrics) -> float:
    """Device idle per step (ms) while the host waits in DataLoader `__next__` (the `dataloader` rule's measure)."""
    if r.idle is not None:
        return r.idle.dataloader_ms
    return (r.hints.dataloader_frac or 0.0) * (r.step_time_ms or 0.0)


def memory_unused(c: Ctx) -> list[Finding]:
    """Every device below 40 % of capacity: a larger microbatch makes bigger, more efficient GEMMs. That advice
    holds only where the device, not the input pipeline, sets the step: where a rank's device idles ≥ LOADER_FLOOR
    of its step waiting for the DataLoader, a k× batch makes the loader's per-sample work k× too (the idle keeps
    its share) and changes the recipe for a gain only the device's part of the step could give; the finding then
    states the headroom alone, low, and points at the loader. Launch-bound idle does not stop it: a larger batch
    amortises per-op host cost."""
    rows = _mem_rows(c)
    if not rows or max(x[2] for x in rows) >= 0.40 or c.training is False:  # microbatch advice needs training
        return []
    r, m, f, act = max(rows, key=lambda x: x[2])
    ev = (f"highest use: rank {r.rank} {m.device} peak reserved {fmt(m.peak_reserved, 'gib')}, allocated "
          f"{fmt(m.peak_allocated, 'gib')} of {fmt(m.capacity, 'gib')} ({fmt(f, 'pct')}) over {len(rows)} device(s)")
    k = None
    if act and act > 0:
        k = int((0.85 * m.capacity - (m.peak_allocated - act)) // act)
    fit = (f"≈ {k}× the activations fit under 85 % of capacity (activations ≈ {fmt(act, 'gib')}, baseline "
           f"{fmt(m.peak_allocated - act, 'gib')})" if k else "unused memory")
    starved = [x for x in c.ranks if x.step_time_ms and _loader_idle(x) >= LOADER_FLOOR * x.step_time_ms]
    if starved:
        w = max(starved, key=lambda x: _loader_idle(x) / x.step_time_ms)
        ev += (f"; rank {w.rank}'s device idles {fmt(_loader_idle(w), 'ms')} of its {fmt(w.step_time_ms, 'ms')} "
               f"step ({fmt(_loader_idle(w) / w.step_time_ms, 'pct')}) waiting for the DataLoader")
        act_s = ("no batch change while the steps wait for the DataLoader: its per-sample work grows with the "
                 "batch, so a larger one keeps the device waiting as long per sample; feed the device first "
                 "(`dataloader`), then judge the headroom")
        eg = f"none while the input pipeline sets the step; the headroom: {fit}"
    else:
        act_s = f"raise the microbatch {k}× (`--batch`, same microbatch count)" if k and k >= 2 else \
            "raise the microbatch size (`--batch`)"
        eg = (f"{fit}; larger GEMMs usually raise MFU" if k else
              "unused memory can hold larger microbatches; larger GEMMs usually raise MFU")
    return [c.finding("memory_unused", "low", "Most device memory unused", ev, [x[0].rank for x in rows], [],
                      act_s, eg, None, "ranks[].memory[].peak_reserved", events=MEM_EVENTS)]
