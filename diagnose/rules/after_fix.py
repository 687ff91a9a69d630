"""The gain a device-side rule's edit has now and once the cause that sets the step today is fixed: one mechanism
for the rules whose gain the host caps now (fp32_gemm, data_movement, unfused_elementwise).

Where the host sets the step (rules/base.py host_sets_step), a faster kernel takes at most the host's waits off
the step now. The same edit pays more once that bound is removed, but only a bound with a fix of its own (the
DataLoader, the allocator calls: metrics/rank/critical_path/after_fix.py) may be assumed removed. The numbers are the dependency
graph's (RankMetrics.simulated_gain_ms "after_fix/<candidate>": the fix and the edit together, less the fix
alone). Nothing is said where the rank has no such simulation (no removable bound sets its step: host work
between launches has no one fix, and an uncapped bound would promise what no named edit delivers), nor where the
candidate gains next to nothing after the fix (it is off the path even then).
"""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import host_sets_step
from llmdiag.diagnose.metrics.rank.critical_path.after_fix import BOUNDS, STEP, WANT

NAMES = {"dataloader": "the DataLoader (`__next__` on the training thread)",
         "allocator": "the allocator calls (`cudaMalloc`/`cudaFree`, `hipMalloc`/`hipFree`)"}
PLURAL = {"allocator"}  # "the allocator calls ... set", "the DataLoader ... sets"
MORE_MS = 0.5  # the gain after the fix must reach this much (and MORE_SHARE of the step) to be said
MORE_SHARE = 0.01


def now(r: RankMetrics, g: float) -> float:
    """What an edit worth `g` ms of device time per step takes off the step now: at most the host's waits for the
    device where the host sets the step (host_sets_step: a host that never waits sets the step, and faster device
    work only lengthens the idle)."""
    return min(g, r.hints.host_wait_ms or 0.0) if host_sets_step(r) else g


def bounds_of(r: RankMetrics) -> list[str]:
    """The removable bounds the rank's simulation assumed fixed, largest fix first."""
    g = r.simulated_gain_ms
    return sorted((b for b in BOUNDS if f"{WANT}:{b}" in g), key=lambda b: -g[f"{WANT}:{b}"])


def after_fix_ms(r: RankMetrics, candidate: str) -> float | None:
    """ms per step `candidate`'s edit takes off the step once the rank's removable bounds are fixed (simulated);
    None where not simulated."""
    return r.simulated_gain_ms.get(f"{WANT}/{candidate}")


def clause(ranks: list[RankMetrics], candidate: str, what: str, short: bool = False) -> str:
    """The sentence (starting "; ") for the evidence (`short`: for the gain) over the finding's ranks: the
    simulated gain of `candidate` (`what` it edits) once their removable bounds are fixed, mean over the ranks
    that have it; '' where no rank has it or it is below MORE_MS / MORE_SHARE of the step (off the path even
    then)."""
    step = statistics.fmean(r.step_time_ms for r in ranks) if ranks else 0.0
    sim = [(r, x) for r in ranks if (x := after_fix_ms(r, candidate)) is not None]
    if not sim:
        return ""
    after = statistics.fmean(x for _, x in sim)
    if after < max(MORE_MS, MORE_SHARE * step):
        return ""
    w = max(sim, key=lambda p: p[1])[0]
    bounds = bounds_of(w)
    names = [NAMES[b] for b in bounds]
    verb = "sets" if len(bounds) == 1 and bounds[0] not in PLURAL else "set"
    many = f", mean over {plural(len(sim), 'rank')}" if len(sim) > 1 else ""
    then = w.simulated_gain_ms.get(STEP) or w.step_time_ms - w.simulated_gain_ms.get(WANT, 0.0)
    if short:
        return (f"; {fmt(after, 'ms')} per step once {' and '.join(b.split(' (')[0] for b in names)} no longer "
                f"{verb} the step ({fmt(after / then, 'pct')} of the {fmt(then, 'ms')} "
                f"step then; simulated, assuming it is fixed first{many})")
    return (f"; {fmt(after, 'ms')} per step once {' and '.join(names)} no longer {verb} "
            f"the step (simulated, assuming it is fixed first: on rank {w.rank}'s dependency graph with that host "
            f"time removed and {what} together, less the {fmt(w.simulated_gain_ms.get(WANT, 0.0), 'ms')} the fix "
            f"alone takes off{many})")
