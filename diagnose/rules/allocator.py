"""Device idle inside allocator calls (cudaMalloc / cudaFree and their HIP names): a flush of the caching
allocator's cache in mid-capture (memory pressure), its cache growing at warm-up, or an allocator that is off.
Allocator-off advice only where allocator calls per step are as many as an allocator that is off makes."""

from __future__ import annotations

import re

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for
from llmdiag.diagnose.rules.idle_calls import _blocking, _flushes, _ops_text, _outlier_step, short

# An allocator that is off calls cudaMalloc/hipMalloc for every new tensor: about one per kernel that writes a new
# output. One that is on calls it only to grow its cache (a handful per step, most steps none). Off means a median
# step with at least ALLOC_OFF_PER_KERNEL mallocs per kernel (capped at ALLOC_OFF_ABS mallocs, enough on any
# model) and never fewer than ALLOC_OFF_MIN.
ALLOC_OFF_MIN, ALLOC_OFF_ABS, ALLOC_OFF_PER_KERNEL = 20, 100, 0.25

def mallocs_per_step(r) -> float:
    """Allocator mallocs of the median step (steps without any count as 0); from the calls per step where the
    summary has no per-step record."""
    if r.idle.alloc_steps:
        counts = [a.mallocs for a in r.idle.alloc_steps]
        counts += [0] * max(0, r.nsteps - len(counts))
        return float(statistics.median(counts))
    return sum(v for k, v in r.idle.runtime_calls.items() if re.search(r"Malloc|MemAlloc", k, re.I))


def alloc_off_threshold(r) -> float:
    return max(ALLOC_OFF_MIN, min(ALLOC_OFF_ABS, ALLOC_OFF_PER_KERNEL * (r.hints.kernels_per_step or 0)))


def _mid_flush(r, top) -> bool:
    """A flush (`_flushes`) after at least one earlier profiled step: seen to come back after normal steps."""
    return _flushes(top) and any(st.step < top.step for st in r.steps)


def allocator_churn(c: Ctx) -> list[Finding]:
    """Device idle inside malloc/free runtime calls. Where calls per step show the caching allocator off (about
    one per new tensor), the action is to turn it on; where they are a handful (an allocator growing, or
    releasing its cache to retry a failed allocation), it is about fragmentation and memory pressure, naming
    the step that paid when one step holds most of it (the gain is then the typical step's, not the mean)."""
    bad = _blocking(c, alloc=True)
    if not bad:
        return []
    r, tot, ops = max(bad, key=lambda x: x[1])
    mal, thr = mallocs_per_step(r), alloc_off_threshold(r)
    ev = (f"rank {r.rank}: {fmt(tot, 'ms')} of the {fmt(r.step_time_ms, 'ms')} step the {c.dev} is idle inside "
          f"{_ops_text(r, ops)} per step ({plural(len(bad), 'rank')})")
    if mal >= thr:
        gain = statistics.fmean(x[1] for x in bad)
        ev += (f"; {fmt(mal, 'avg')} allocations in the median step against {fmt(r.hints.kernels_per_step, 'int')} "
               f"kernels: the caching allocator is off (on, it allocates only to grow its cache)")
        act = ("keep PyTorch's caching allocator on: unset `PYTORCH_NO_CUDA_MEMORY_CACHING` / "
               "`PYTORCH_NO_HIP_MEMORY_CACHING`, remove `torch.cuda.empty_cache()` from the step loop")
        eg = c.gain_text(gain, "the device idle inside allocator calls (a cached allocation costs microseconds)", True)
        steps = []
    else:
        outs = [(x, *_outlier_step(x[0])) for x in bad]
        # A flush (frees at least as many as mallocs) is the allocator retrying a failed allocation: after normal
        # steps it is seen to come back, so its cost counts, averaged over the steps. In the capture's first step
        # whether it comes back is outside the trace: the per-step gain is then the typical step's, and the flush
        # is told as paid once in this capture (averaging it in would call a one-off 30-40 % of every step).
        # Growth without frees is warm-up, not paid again. Each rank is judged on its own outlier step.
        gain = statistics.fmean(x[1] if top is None or _mid_flush(x[0], top) else med for x, top, med in outs)
        _, top, _ = next(o for o in outs if o[0][0] is r)
        ev += (f"; {fmt(mal, 'avg')} allocations in the median step against {fmt(r.hints.kernels_per_step, 'int')} "
               f"kernels: the caching allocator is on (off, it would allocate about once per new tensor, "
               f"≥ {fmt(thr, 'int')} per step)")
        flush = top is not None and _mid_flush(r, top)
        frees = top is not None and _flushes(top)
        if top is not None:
            ev += (f"; step {top.step} alone holds {fmt(top.idle_ms, 'ms')} of it in {top.calls} calls "
                   f"({top.mallocs} allocations, {top.calls - top.mallocs} frees), the other steps "
                   f"{fmt(sum(a.idle_ms for a in r.idle.alloc_steps) - top.idle_ms, 'ms')} together")
            n_before = sum(1 for st in r.steps if st.step < top.step)
            ev += (f"; a flush in mid-capture, not warm-up: step {top.step} follows {plural(n_before, 'normal step')}"
                   " and frees the cache" if flush else
                   "; it frees the cache in the capture's first step (memory pressure, not the cache growing at warm-up): the steps "
                   "before it are outside the capture, so how often it recurs is not in the trace" if frees else
                   "; in the capture's first step: warm-up growth")
        why = ("frees with repeated allocations in one step are the allocator releasing its cache to retry an "
               "allocation that failed (memory pressure or fragmentation)" if frees else
               "allocations in one step and none after are the cache growing to its working size (warm-up); "
               "nothing to change unless later steps allocate too" if top is not None else
               "allocations in every step mean the cache never settles (shapes that change each step, or memory "
               "close to capacity)")
        act = (f"the caching allocator is on but calls the driver: {why}. Set "
               "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (ROCm: `PYTORCH_HIP_ALLOC_CONF`), lower the "
               "peak (smaller batch, activation checkpointing), keep `torch.cuda.empty_cache()` out of the loop; "
               "check `torch.cuda.memory_stats()['num_alloc_retries']`")
        eg = c.gain_text(gain, "the mean step's idle inside allocator calls, the flush included: a cache "
                         "released after normal steps is released again whenever memory runs short" if flush else
                         "the typical (median) step's idle inside allocator calls; the first captured step's flush "
                         f"({fmt(top.idle_ms, 'ms')}) is paid once in this capture and is not in it: how often it "
                         "recurs is outside the trace (were it once per "
                         f"{plural(r.nsteps, 'step')}, {fmt(top.idle_ms / r.nsteps, 'ms')} per step more)"
                         if frees and top is not None else
                         "the typical (median) step's idle inside allocator calls where one step holds most "
                         "of it, else the mean; growth during warm-up is not paid again", True)
        steps = [top.step] if top is not None else []
    return [c.finding("allocator_churn", severity_for(gain, c.step_ms), f"{c.Dev} idle in memory allocation calls",
                      ev, [x[0].rank for x in bad], steps, act, eg, gain, "ranks[].idle.runtime_ops",
                      gain_kind="bound", events=[short(k) for k in sorted(ops)])]
