"""Analysis windows: one per ProfilerStep#N, else one per iteration read from the host ops, else one.

On the host a step is its ProfilerStep span; without ProfilerStep, an iteration between consecutive
`Optimizer.step#...` ops, else one read from the repeated sequence of the main thread's top-level ops or from
the forward/backward alternation (iterations.py); `steps_source` says which (iteration_spans). On a GPU the device side of step N runs later than its host
side, so its window is [first, last] device event correlated (launch ↔ kernel) with the host events
inside step N's span. A trace where none of these holds is analysed as one window, with a warning.
"""

from __future__ import annotations

import re
import weakref

import numpy as np

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.metrics.rank.classify import prefiltered
from llmdiag.diagnose.metrics.rank.iterations import detect
from llmdiag.diagnose.metrics.rank.idle_stretch import SAMPLED_SHARE, op_ids_contiguous
from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, SYNC, RankTrace
from llmdiag.diagnose.model.lazy_re import lazy_compile

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_RE = re.compile(r"DataLoader|dataloader.*__next__")
is_dataloader = prefiltered(DATALOADER_RE, "DataLoader", "dataloader")  # names capped: linear time


@dataclass
class Window:
    """One analysis window (a ProfilerStep): its device span and the host span it comes from, in ns."""

    step: int
    start: int  # ns
    end: int  # ns
    host_start: int
    host_end: int


def host_steps(t: RankTrace) -> list[tuple[int, int, int]]:
    """(step number, start, end) of each host ProfilerStep span, merged when a step appears on several host
    threads. GPU-side `ProfilerStep#N` annotations (`gpu_user_annotation`, ROCm and recent CUDA) are device
    markers of the same steps, never merged in: one lies after the next host step has begun, and merging it
    stretched step N over step N+1 (and, with the last step dropped, folded the two)."""
    ids = {i: int(m.group(1)) for i, n in enumerate(t.names) if len(n) < 40 and (m := STEP_RE.match(n))}
    if not ids:
        return []
    mask = np.isin(t.name, list(ids)) & (t.kind == ANNOTATION if t.kind is not None else True)
    mask &= (t.stream < 0) & ~t.cat_mask("gpu_user_annotation")
    out: dict[int, list[int]] = {}
    for i in np.flatnonzero(mask):
        n = ids[int(t.name[i])]
        s, e = int(t.ts[i]), int(t.ts[i] + t.dur[i])
        if n in out:
            out[n][0], out[n][1] = min(out[n][0], s), max(out[n][1], e)
        else:
            out[n] = [s, e]
    return sorted((n, s, e) for n, (s, e) in out.items())


OPTIMIZER_STEP_RE = lazy_compile(r"^Optimizer\.step#")
MIN_ITERATIONS = 2  # iterations (optimizer steps less one) below which the capture is one window


def step_source(t: RankTrace) -> str:
    """Where the rank's steps come from: "ProfilerStep", "Optimizer.step" (no ProfilerStep: between consecutive
    `Optimizer.step#...` ops, optimizer_iterations), "repeated_pattern" or "forward_backward" (neither: read
    from the host ops, iterations.py) or "capture" (one window over the capture)."""
    return iteration_spans(t)[0]


_SPANS: dict[int, tuple[weakref.ref, tuple[str, list[tuple[int, int, int]]]]] = {}


def iteration_spans(t: RankTrace) -> tuple[str, list[tuple[int, int, int]]]:
    """(steps_source, (step, host start, host end) per step) of a rank, from the first source that holds in the
    order step_source lists; no spans for "capture". Read once per trace (windows and step_source both ask)."""
    hit = _SPANS.get(id(t))
    if hit is not None and hit[0]() is t:
        return hit[1]
    if steps := host_steps(t):
        out = ("ProfilerStep", steps)
    elif steps := optimizer_iterations(t):
        out = ("Optimizer.step", steps)
    else:
        source, steps = detect(t)
        out = (source, steps) if steps else ("capture", [])
    if t.kind is not None:  # an unclassified trace's answer is not kept: classify() may follow
        key = id(t)
        _SPANS[key] = (weakref.ref(t), out)
        weakref.finalize(t, _SPANS.pop, key, None)
    return out


def optimizer_iterations(t: RankTrace) -> list[tuple[int, int, int]]:
    """(iteration, start, end) host spans of a trace without ProfilerStep, one per pair of consecutive top-level
    `Optimizer.step#...` ops on the thread that runs them (PyTorch's optimizer hook names each step so): an
    iteration runs from one optimizer step's end to the next's. The part before the first optimizer step is
    left out (the capture may start mid-iteration). Empty with fewer than MIN_ITERATIONS."""
    if t.kind is None or not len(t):
        return []
    opt = np.flatnonzero(t.name_mask(OPTIMIZER_STEP_RE.match, (t.stream < 0) & (t.kind == CPU_OP)))
    if len(opt) < MIN_ITERATIONS + 1:
        return []
    th = np.bincount(t.thread[opt]).argmax()
    opt = opt[t.thread[opt] == th]
    top: list[int] = []
    for a, b in zip(t.ts[opt].tolist(), (t.ts[opt] + t.dur[opt]).tolist()):  # in start order: outermost only
        if not top or a >= top[-1]:
            top.append(int(b))
    if len(top) < MIN_ITERATIONS + 1:
        return []
    return [(i, a, b) for i, (a, b) in enumerate(zip(top, top[1:]))]


_FOUND = {
    "Optimizer.step": "between consecutive `Optimizer.step#...` ops (each from one optimizer step's end to the next's)",
    "repeated_pattern": "where the main thread's top-level ops repeat one sequence (each from a repeat's first op "
                        "to the next repeat's; a longer first iteration is the warm-up, iteration 0)",
    "forward_backward": "from the forward/backward alternation (each from the start of its forward ops to the "
                        "next iteration's; the last ends with its backward)",
}


def windows(t: RankTrace, exclude_last: bool = False) -> tuple[list[Window], list[str]]:
    """The analysis windows of a rank and any warnings about them."""
    warnings: list[str] = []
    if (share := op_ids_contiguous(t)) is not None and share < SAMPLED_SHARE:
        warnings.append(f"the trace has holes in its host ops' numbering (External ids): only {share:.0%} of its ops "
                        "are followed by the next one, so events were sampled or dropped; idle and host gaps are "
                        "overstated and a long op with no child may be missing events")
    source, steps = iteration_spans(t)
    stub = source == "ProfilerStep" and _stop_stub(t, steps)
    if stub:
        n, s, e = steps[-1]
        steps = steps[:-1]
        warnings.append(f"the last ProfilerStep (#{n}, {(e - s) / 1e6:.2f} ms) records no op, runtime call or device "
                        "work: the profiler stopping in it, not an iteration; left out of the steps")
    if source in _FOUND:
        warnings.append(f"no ProfilerStep in the trace: {len(steps)} iterations found {_FOUND[source]}")
    if not steps:
        if len(t) == 0:
            return [], ["trace has no complete events"]
        s, e = int(t.ts.min()), int((t.ts + t.dur).max())
        dev = _device_activity(t)
        if dev.any():  # one window from the first device activity to the last: host-only lead-in is not idle
            ds, de = int(t.ts[dev].min()), int((t.ts[dev] + t.dur[dev]).max())
            warnings.append(f"no ProfilerStep in the trace: one window from the first to the last GPU activity "
                            f"({(de - ds) / 1e6:.2f} ms; {(e - s - (de - ds)) / 1e6:.2f} ms of host-only time "
                            "around it left out)")
            return [Window(-1, ds, de, s, e)], warnings
        warnings.append("no ProfilerStep in the trace: the whole trace is analysed as one step")
        steps = [(-1, s, e)]
    drop = exclude_last and len(steps) > 1 and not stub  # the stub was the last step: excluded already
    if exclude_last and not drop and not stub:
        warnings.append("only one ProfilerStep: it is kept although the last step is excluded")
    if not t.is_gpu:
        out = [Window(n, s, e, s, e) for n, s, e in steps]
    else:  # device windows of every step first: the dropped last step still bounds the one before it
        out = _lead_in(t, _clip_overlaps(_device_windows(t, steps, warnings), warnings))
    return (out[:-1] if drop else out), warnings


def _stop_stub(t: RankTrace, steps: list[tuple[int, int, int]]) -> bool:
    """The last of several ProfilerSteps is the profiler's stop, not an iteration: `prof.step()` after the last
    iteration opens the next ProfilerStep, and the capture ends in it before any op runs, so no host event (op,
    runtime call, annotation other than ProfilerStep itself) starts inside its span, on any thread, and it launches
    nothing. hta amd_mi250_minitoy: ProfilerStep#2, 0.05 ms, holds no event beside an 8.9 ms ProfilerStep#1; counted,
    it halved the mean step and flagged the one real iteration as a 2x outlier."""
    if len(steps) < 2 or t.kind is None:
        return False
    _, s, e = steps[-1]
    inside = (t.stream < 0) & (t.ts >= s) & (t.ts <= e)
    return not (inside & ~t.name_mask(lambda n: n.startswith("ProfilerStep#"), inside)).any()


def _lead_in(t: RankTrace, wins: list[Window]) -> list[Window]:
    """A step whose host fetches its batch (DataLoader `__next__`) before its first launch: its device window
    begins where that fetch begins (not before its host step, nor before the previous window's end). The
    device idle while the step waits for its data is the step's time; without this it fell between windows,
    in no step, so no trace with ProfilerSteps could show a DataLoader wait (kineto's resnet50 samples: 118 ms
    device windows of 175 ms host steps, 69 ms of them in `__next__`)."""
    dl = np.flatnonzero(t.name_mask(is_dataloader, t.stream < 0)) if len(wins) else np.zeros(0, np.int64)
    if not len(dl):
        return wins
    ds = np.sort(t.ts[dl])
    prev = None
    for w in wins:
        if w.start == w.host_start and w.end == w.host_end:  # a step without device work keeps its host span
            prev = w.end
            continue
        lo = w.host_start if prev is None else max(w.host_start, prev)
        k = int(np.searchsorted(ds, w.host_start))  # the first fetch that begins inside this host step
        if k < len(ds) and ds[k] < w.start and ds[k] <= w.host_end:
            w.start = max(lo, int(ds[k]))
        prev = w.end
    return wins


def _clip_overlaps(wins: list[Window], warnings: list[str]) -> list[Window]:
    """Device windows partition device time: step N's ends where step N+1's begins when its last kernel
    runs later (comm kernels queued behind the next step's work). Without this the same device time was
    counted in two steps (HTA's trace_diff/test: 74.2 % overlap instead of HTA's 68.8 %)."""
    carry = []  # per step but the last: how far its device work ran into the next step's window
    for a, b in zip(wins, wins[1:]):
        carry.append(a.end - b.start if a.end > b.start > a.start else 0)
        a.end -= carry[-1]
    if n := sum(c > 0 for c in carry):
        warnings.append(f"device side of {n} step(s) ran past the start of the next step's (up to "
                        f"{max(carry) / 1e6:.2f} ms): each window ends where the next begins, so no time counts twice")
    _end_last(wins, carry, warnings)
    return wins


def _end_last(wins: list[Window], carry: list[int], warnings: list[str]) -> None:
    """The last step has no next window to end at, so clipped like the others it would keep the device work that,
    in every earlier step, ran inside the next step's window: its time would be the period plus that carry (the
    queue drained under the capture-end `cudaDeviceSynchronize`). It ends where the next step's window would
    begin: its own end less the median carry of the earlier steps, never before its host end plus the delay at
    which its device side began (the next step's first launch cannot run earlier). Work of its own past that (a
    kernel that really ran long) stays. TorchRec optimizer_3: windows 378/135/230 ms of host steps 378/134/155,
    the last carrying the 46-76 ms every step carries; a100_16rank: 372 ms of a 216 ms host step, 158 ms of it
    the carry every step has. With no carry (the MI300X DDP trace: windows back to back) nothing changes."""
    if not carry or not any(carry):
        return
    w = wins[-1]
    if w.start == w.host_start and w.end == w.host_end:  # no device work: its host span
        return
    typical = int(statistics.median(carry))
    end = max(w.end - typical, w.host_end + max(w.start - w.host_start, 0))
    if not w.start < end < w.end:
        return
    if w.end - end >= 0.05 * (end - w.start):  # a cut of a few % is the carry's noise: not worth a line
        warnings.append(f"the last step's device work ran {(w.end - end) / 1e6:.2f} ms past where the next step's "
                        f"window would begin (the earlier steps' ran a median {typical / 1e6:.2f} ms into the next "
                        "one's): its window ends there, as theirs do; the rest, drained at the capture's end, is in "
                        "no step")
    w.end = end


def _device_activity(t: RankTrace) -> np.ndarray:
    """Device events that are work (kernels, copies, sets, syncs), not annotations."""
    if t.kind is None:
        return np.zeros(len(t), bool)
    return (t.stream >= 0) & t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET, SYNC)


def _device_windows(t: RankTrace, steps, warnings: list[str]) -> list[Window]:
    device = t.stream >= 0
    host = ~device & (t.corr >= 0)
    hs, hc = t.ts[host], t.corr[host]
    starts = np.array([s for _, s, _ in steps], np.int64)
    ends = np.array([e for _, _, e in steps], np.int64)
    # Step index of each correlated host event (the launch), -1 outside every step.
    k = np.searchsorted(starts, hs, side="right") - 1
    inside = (k >= 0) & (hs <= ends[np.maximum(k, 0)])
    corr_step = dict(zip(hc[inside].tolist(), k[inside].tolist()))
    dev_idx = np.flatnonzero(device)
    dc = t.corr[dev_idx]
    step_of = np.fromiter((corr_step.get(c, -1) for c in dc.tolist()), np.int64, len(dc))
    out = []
    missing = 0
    for j, (n, s, e) in enumerate(steps):
        sel = dev_idx[step_of == j]
        if len(sel):
            out.append(Window(n, int(t.ts[sel].min()), int((t.ts[sel] + t.dur[sel]).max()), s, e))
        else:
            missing += 1
            out.append(Window(n, s, e, s, e))
    if missing:
        warnings.append(f"{missing} step(s) launched no GPU work; their host span is used as the window")
    return out
