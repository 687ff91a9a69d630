"""Gains after a fix: what a device-side edit (faster fp32 GEMMs, data-movement kernels removed) would take off a
rank's step once the cause that sets the step today is removed, simulated on the rank's dependency graph
(metrics/rank/critical_path/simulate.py's Simulator).

Why: where the host sets the step (the device idles waiting for it), a faster kernel only lengthens the idle, so
a rule's gain now is small; the same edit may pay well once the host no longer sets the step. Only a bound that a
finding of its own names and whose fix is an edit can be assumed fixed first:
- "dataloader": the host's time inside DataLoader `__next__` ops (the `dataloader` finding: worker processes
  prefetch the batch, so fetching it costs the training thread nothing);
- "allocator": the host's time inside `cudaMalloc`/`cudaFree`/`hipMalloc`/`hipFree` calls and any sync edge
  into them (the `allocator_calls` finding: with the caching allocator on, they are not called per tensor).
Host-bound time between launches (Python, dispatch) has no such single fix and is never assumed away.

The scenario: the bound's host time goes (the chain edges inside its ops' spans on their thread weigh 0, the sync
edges into their ends are removed), alone and together with each candidate edit. The candidate's gain after the
fix is (gain of both) − (gain of the fix alone): the step the fix leaves, shortened by the candidate. Keys in
RankMetrics.simulated_gain_ms: "after_fix:<bound>" (each bound's fix alone), "after_fix" (all material bounds
fixed together), "after_fix:step_ms" (the step then), "after_fix/<candidate>" ("fp32_gemm/<speed-up>", "data_movement:<family>", "elementwise", "norm_fusion"). A bound whose fix
alone takes less than MIN_SHARE of the step in most steps is not assumed fixed (it does not set the step: an
allocator storm in one outlier step is that step's, the allocator finding's). A step freed of its bound is at
least its device's work (`_Scenarios.floor`): the graph holds only the syncs the trace showed, and a host with no
bound would otherwise run ahead of its device without end.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import cast

import numpy as np

from llmdiag.diagnose.io.trace import COMPUTE, RankTrace
from llmdiag.diagnose.metrics.rank.critical_path.graph import DEVICE, LAUNCH, SYNC_EDGE
from llmdiag.diagnose.metrics.rank.critical_path.simulate import NEG, Simulator, simulator
from llmdiag.diagnose.metrics.rank.data_movement import family_kernels
from llmdiag.diagnose.metrics.rank.elementwise import elementwise_facts, is_elementwise
from llmdiag.diagnose.metrics.rank.norm_fusion import chain_kernels, fused_weights
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.idle import is_alloc_call
from llmdiag.diagnose.metrics.rank.precision import fp32_gemm_kernels
from llmdiag.diagnose.metrics.rank.steps import is_dataloader
from llmdiag.diagnose.model.analysis import Hints
from llmdiag.diagnose.model.data_movement import FAMILIES
from llmdiag.diagnose.model.format import NS_PER_MS

WANT = "after_fix"  # the what-if set's name in the wanted set (per_rank.py)
STEP = "after_fix:step_ms"  # the mean step once the bounds are fixed, over the steps the gains are means over
HOST_BOUND_IDLE = 0.10  # the device idles this share of the step: its host may set the step (rules/base.py's)
MIN_SHARE = 0.10  # a bound whose fix alone takes less than this share of a step does not set it (HOST_BOUND_IDLE)
MIN_KERNEL_MS = 0.5  # a data-movement family below this device time per step is not simulated (the rule's floor)
BOUNDS = {"dataloader": is_dataloader, "allocator": is_alloc_call}


def wanted(idle_frac: float | None) -> set[str]:
    """{WANT} where the device idles at least HOST_BOUND_IDLE of the step (else no bound of the host's)."""
    return {WANT} if (idle_frac or 0.0) >= HOST_BOUND_IDLE else set()


def _fixed(s: Simulator, w: np.ndarray, nodes_ev: np.ndarray) -> np.ndarray:
    """`w` with the host time inside these events (positions in Graph.ev) gone: each chain edge from the event's
    begin to its end on its thread, inside the windows, weighs 0; sync edges into its end are removed."""
    g = s.g
    w = w.copy()
    if not len(nodes_ev):
        return w
    pb, pe = s.pos_of[2 * nodes_ev], s.pos_of[2 * nodes_ev + 1]
    m = pe > pb
    # positions (pb, pe] of each span: a difference array marks them in one pass (nested spans add up)
    mark = np.zeros(len(s.order) + 1, np.int64)
    np.add.at(mark, pb[m] + 1, 1)
    np.add.at(mark, pe[m] + 1, -1)
    inside = np.cumsum(mark[:-1]) > 0
    edges = s.link[inside]
    edges = edges[edges >= 0]
    edges = edges[s.in_win[edges]]
    w[edges] = 0
    ends = np.zeros(g.nodes, bool)
    ends[2 * nodes_ev + 1] = True
    w[(g.etype == SYNC_EDGE) & ends[g.dst] & s.in_win] = NEG
    return w


def _merge(w: np.ndarray, base: np.ndarray, edit: np.ndarray) -> np.ndarray:
    """`w` with the edges `edit` changed from `base` taken from `edit` (two edits on different edges, together)."""
    out = w.copy()
    ch = edit != base
    out[ch] = edit[ch]
    return out


class Scenarios:
    """One rank's Simulator and the device floor of each step under an edit (`gains`)."""

    def __init__(self, t: RankTrace, s: Simulator):
        self.s = s
        g = s.g
        dk = np.flatnonzero(g.device)
        self.dev_edge = np.full(len(g.ev), -1, np.int64)  # per selected event, its DEVICE edge
        de = np.flatnonzero(g.etype == DEVICE)
        self.dev_edge[g.src[de] // 2] = de
        at = g.time[2 * dk].copy()  # when each device op was launched (its launch call's begin), else its begin
        le = np.flatnonzero(g.etype == LAUNCH)
        first = np.full(len(g.ev), -1, np.int64)
        first[g.dst[le] // 2] = g.time[g.src[le]]
        at = np.where(first[dk] >= 0, first[dk], at)
        # a step's device ops are those its host span launched (the windows are device spans, which drift)
        starts = np.array([w.host_start for w in s.wins], np.int64)
        ends = np.array([w.host_end for w in s.wins], np.int64)
        win = np.searchsorted(starts, at, side="right") - 1
        ok = (win >= 0) & (at < ends[np.maximum(win, 0)]) & (self.dev_edge[dk] >= 0)
        streams, sid = np.unique(t.stream[g.ev[dk[ok]]], return_inverse=True)
        self.cell = win[ok] * max(len(streams), 1) + sid  # (window, stream) of each counted device op
        self.edges = self.dev_edge[dk[ok]]
        self.shape = (len(s.wins), max(len(streams), 1))
        self.old = s.lengths(s.t0)

    def floor(self, w: np.ndarray) -> np.ndarray:
        """Per step, ns its device needs at least: per stream the sum of the (edited) durations of the ops the
        step launched, the longest stream's (a stream runs its ops one after another; in steady state every step's
        work runs once, so a host freed of its bound cannot run ahead of it for ever)."""
        tot = np.zeros(self.shape[0] * self.shape[1], np.int64)
        np.add.at(tot, self.cell, np.maximum(w[self.edges], 0))
        return tot.reshape(self.shape).max(axis=1) if len(tot) else np.zeros(self.shape[0], np.int64)

    def gains(self, w: np.ndarray) -> np.ndarray:
        """Per step but the last (when there are two or more), ns the edit takes off: old length − max(simulated
        length, device floor)."""
        d = (self.old - self.new(w)).astype(float)
        return d[:-1] if len(d) > 1 else d

    def new(self, w: np.ndarray) -> np.ndarray:
        """Per step, its length in ns under the edit: max(simulated length, device floor)."""
        return np.maximum(self.s.lengths(self.s.retime(w)), self.floor(w))


def after_fix_gains(t: RankTrace, wins, speedup: float, want: set[str], graph=None,
                    sims: Callable[[], Simulator | None] | None = None) -> dict[str, float]:
    """ms per step (module docstring's keys) for the bounds this rank's trace shows and the candidates `want`
    names ("fp32" for the fp32 GEMMs, WANT for the data-movement families; nothing without WANT); `graph`: the
    rank's graph where the path already built it; `sims`: the rank's `shared_simulator`."""
    if WANT not in want or not t.is_gpu or not wins or t.kind is None:
        return {}
    host = t.stream < 0
    masks = {k: t.name_mask(fn, host) for k, fn in BOUNDS.items()}
    if not any(m.any() for m in masks.values()):
        return {}
    sim = (sims or partial(simulator, t, wins, graph))()
    if sim is None:
        return {}
    sc = Scenarios(t, sim)
    pos = np.full(len(t), -1, np.int64)
    pos[sim.g.ev] = np.arange(len(sim.g.ev))
    out: dict[str, float] = {}
    fixed = sim.w
    for name, m in masks.items():
        k = pos[np.flatnonzero(m)]
        k = k[k >= 0]
        if not len(k):
            continue
        d = sc.gains(_fixed(sim, sim.w, k))
        old = sc.old[:-1] if len(sc.old) > 1 else sc.old
        # the bound sets the step in most steps, not in one outlier (an allocator storm in one step is that
        # step's: the allocator finding's, not a bound later edits wait behind)
        if 2 * int((d >= MIN_SHARE * old).sum()) > len(d):
            out[f"{WANT}:{name}"] = round(float(d.mean()) / NS_PER_MS, 3)
            fixed = _fixed(sim, fixed, k)
    if not out:
        return {}
    base = sc.gains(fixed)
    out[WANT] = round(float(base.mean()) / NS_PER_MS, 3)
    then = sc.new(fixed)
    out[STEP] = round(float((then[:-1] if len(then) > 1 else then).mean()) / NS_PER_MS, 3)
    for key, nodes, factor in _candidates(t, wins, speedup, want, pos):
        both = sc.gains(_merge(fixed, sim.w, sim.scaled(nodes, factor)))
        out[f"{WANT}/{key}"] = round(max(float((both - base).mean()), 0.0) / NS_PER_MS, 3)
    if "fusion" in want and (nf := chain_kernels(t, wins)) is not None and len(nf[1]) + len(nf[2]):
        both = sc.gains(_merge(fixed, sim.w, fused_weights(sim, pos[nf[1]][pos[nf[1]] >= 0], pos[nf[2]][pos[nf[2]] >= 0])))
        out[f"{WANT}/norm_fusion"] = round(max(float((both - base).mean()), 0.0) / NS_PER_MS, 3)
    return out


def _candidates(t: RankTrace, wins, speedup: float, want: set[str], pos: np.ndarray):
    """(key, device events as positions in Graph.ev, factor on their durations) per candidate edit."""
    def at(ev: np.ndarray) -> np.ndarray:
        p = pos[ev]
        return p[p >= 0]

    if "fp32" in want and speedup > 1:
        f32 = at(fp32_gemm_kernels(t))
        if len(f32):
            yield f"fp32_gemm/{speedup:g}", f32, 1.0 / speedup
    ew = _elementwise(t, wins)
    if ew is not None:
        yield "elementwise", at(ew[0]), ew[1]
    got = family_kernels(t, wins)
    if got is None:
        return
    _, kern, code, _, _ = got
    for c, name in enumerate(FAMILIES):
        k = kern[code == c]
        if len(k) and float(t.dur[k].sum()) / NS_PER_MS / len(wins) >= MIN_KERNEL_MS:
            yield f"data_movement:{name}", at(k), 0.0


def _elementwise(t: RankTrace, wins) -> tuple[np.ndarray, float] | None:
    """(the steps' elementwise kernels, the factor on their time) for the `unfused_elementwise` edit: every such
    kernel shortened alike so that their total loses the rule's fusable time (metrics/rank/elementwise.py: per
    op pattern its time × (1 − 1/k)); None below MIN_KERNEL_MS per step of either."""
    h = SimpleNamespace()
    elementwise_facts(t, wins, cast(Hints, h))
    fus = getattr(h, "elementwise_fusable_ms", None) or 0.0
    if fus < MIN_KERNEL_MS:
        return None
    comp = in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins)
    ids = t.name_ids(is_elementwise, comp)
    idx = np.flatnonzero(comp & np.isin(t.name, ids)) if len(ids) else np.zeros(0, np.int64)
    total = float(t.dur[idx].sum()) / NS_PER_MS / len(wins)
    return (idx, 1.0 - fus / total) if total > 0 else None
