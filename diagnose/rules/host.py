"""Host-side rules: launch-bound GPUs, DataLoader waits, fp32 matmuls, and timings that cannot be trusted."""

from __future__ import annotations

import statistics

from diagnose.model.analysis import Finding
from diagnose.model.format import fmt
from diagnose.rules.base import FP32_TO_BF16_SPEEDUP, Ctx, severity_for, steps_where


def host_bound(c: Ctx) -> list[Finding]:
    """GPU idle while the host launches many short kernels: launch overhead, not GPU work, sets the pace."""
    p = c.a.pipeline
    bad = []
    for r in c.ranks:
        h = r.hints
        idle, short, med = h.device_idle_frac, h.short_kernel_frac, h.median_kernel_us
        if r.trace_kind != "gpu" or idle is None or idle < 0.15:
            continue
        if not ((short is not None and short >= 0.5) or (short is None and med is not None and med < 10)):
            continue
        bubble = (p.measured * p.window_ms) if p else 0.0  # idle for the schedule, not for launches
        loader = (h.dataloader_frac or 0.0) * r.step_time_ms  # idle waiting for input: another rule
        gain = max(0.0, idle * r.step_time_ms - bubble - loader)
        if gain > 0:
            bad.append((r, gain))
    if not bad:
        return []
    gain = statistics.fmean(g for _, g in bad)
    r = max(bad, key=lambda x: x[1])[0]
    h = r.hints
    ev = (f"rank {r.rank}: GPU idle {fmt(h.device_idle_frac, 'pct')} of the step, {fmt(h.kernels_per_step, 'int')} "
          f"kernels per step, median {fmt(h.median_kernel_us, 'us')}, {fmt(h.short_kernel_frac, 'pct')} under "
          f"10 µs ({len(bad)} rank(s) alike)")
    act = ("`torch.compile(model)` to fuse the short kernels, or CUDA graphs "
           "(`torch.compile(mode=\"reduce-overhead\")` / `torch.cuda.CUDAGraph`) to remove launch overhead")
    eg = c.gain_text(gain, "up to the idle GPU time less pipeline bubble and DataLoader waits, mean over those ranks")
    return [c.finding("host_bound", severity_for(gain, c.step_ms), "GPU idle behind kernel launches", ev,
                      [x[0].rank for x in bad], steps_where([r], lambda st: st.idle_ms >= 0.15 * st.time_ms),
                      act, eg, gain, "ranks[].hints.device_idle_frac")]


def dataloader(c: Ctx) -> list[Finding]:
    """Host waiting in DataLoader.__next__ for > 10 % of the step: input pipeline starves the GPU."""
    bad = [r for r in c.ranks if (r.hints.dataloader_frac or 0) > 0.10]
    if not bad:
        return []
    gain = statistics.fmean(r.hints.dataloader_frac * r.step_time_ms for r in bad)
    w = max(bad, key=lambda r: r.hints.dataloader_frac)
    ev = (f"rank {w.rank}: {fmt(w.hints.dataloader_frac, 'pct')} of the {fmt(w.step_time_ms, 'ms')} step inside "
          f"DataLoader `__next__` ({len(bad)} rank(s) above 10 %)")
    cores, per_host = (c.man.cpu_cores if c.man else None), c.gpus_per_host()
    nw = max(2, int(cores) // int(per_host) - 1) if cores and per_host else 4
    act = (f"`DataLoader(num_workers={nw}, pin_memory=True, persistent_workers=True, prefetch_factor=2)`; "
           "move tokenisation/augmentation offline")
    eg = c.gain_text(gain, "the time spent waiting for the next batch, mean over those ranks")
    return [c.finding("dataloader", severity_for(gain, c.step_ms), "Steps wait for the DataLoader", ev,
                      [r.rank for r in bad], steps_where([w]), act, eg, gain, "ranks[].hints.dataloader_frac")]


def fp32_gemm(c: Ctx) -> list[Finding]:
    """fp32 GEMMs on a tensor-core GPU (sm80+) leave most of the matmul throughput unused."""
    bad = [r for r in c.ranks if (r.hints.fp32_gemm_frac or 0) > 0.10 and (r.hints.compute_capability or 0) >= 8.0]
    if not bad:
        return []
    gain = statistics.fmean(r.hints.fp32_gemm_frac * r.compute_ms for r in bad) * (1 - 1 / FP32_TO_BF16_SPEEDUP)
    w = max(bad, key=lambda r: r.hints.fp32_gemm_frac)
    ev = (f"rank {w.rank}: {fmt(w.hints.fp32_gemm_frac, 'pct')} of {fmt(w.compute_ms, 'ms')} compute per step in "
          f"fp32 GEMMs on compute capability {fmt(w.hints.compute_capability, 'num')} ({len(bad)} rank(s))")
    act = ("`torch.autocast(\"cuda\", dtype=torch.bfloat16)` around forward and loss (or at least "
           "`torch.set_float32_matmul_precision(\"high\")` for TF32)")
    eg = c.gain_text(gain, f"fp32 GEMM time × (1 − 1/{FP32_TO_BF16_SPEEDUP:g}), a conservative bf16 speed-up")
    return [c.finding("fp32_gemm", severity_for(gain, c.step_ms), "fp32 matmuls on a tensor-core GPU", ev,
                      [r.rank for r in bad], [], act, eg, gain, "ranks[].hints.fp32_gemm_frac")]


def contaminated_timings(c: Ctx) -> list[Finding]:
    """Oversubscribed CPU runs (more ranks than cores) or CPU-only traces: absolute times are not GPU times."""
    if c.man and c.man.oversubscribed:
        per_host = c.gpus_per_host() or c.a.world_size
        ev = (f"manifest says oversubscribed: {per_host} local ranks on {c.man.cpu_cores or '?'} CPU cores; "
              "ranks compete for cores, so waits and bubbles include scheduling delays")
        return [c.finding("contaminated_timings", "high", "Timings contaminated by CPU oversubscription", ev, [], [],
                          "rerun with at most one rank per core (fewer ranks or a bigger machine); compare only "
                          "relative numbers from this run", "not a speed-up: makes the other numbers trustworthy",
                          None, "manifest.oversubscribed")]
    if c.a.trace_kind == "cpu":
        return [c.finding("contaminated_timings", "low", "CPU-only traces", "every trace is CPU-only (gloo); compute "
                          "and communication times are those of CPU ops, not GPU kernels", [], [],
                          "use these numbers for structure (overlap, bubbles, order), not for GPU tuning",
                          "none: informational", None, "trace_kind")]
    return []
