"""What resolution says about collective matching once it is done: captures that start or end at different
collectives, and matching failures (skew or a straggler cost longer than a step), each as an issue line
(resolve.py calls this; the compute-excess stragglers are a section of the Analysis: sections.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.model.analysis import Issue

if TYPE_CHECKING:
    from llmdiag.diagnose.model.skew import SkewResult
from llmdiag.diagnose.model.format import fmt, plural


MAX_WINDOW_LINES = 8  # ranks named one line each; the rest counted (all are in skew.capture_windows)


def alignment_issues(sk: SkewResult, step_ms: float | None, longest: float | None, source: str,
                      issues: list[Issue], sampled: set[int] | frozenset[int] = frozenset()) -> None:
    """Captures that start or end at different collectives, one line per rank; and skew or a straggler cost
    longer than the step, which no real job has: a matching failure, said as such (the finding is withheld).
    On an event-sampled rank (`sampled`) a collective without its partners is one the sampling dropped, not a
    late start or an early end (hta/sampled_pair: half of each rank's collectives unpaired, through both steps)."""
    for w in sk.capture_windows[:MAX_WINDOW_LINES]:
        if w.rank in sampled and (w.lead_n or w.trail_n):
            issues.append(Issue(source, f"rank {w.rank}'s capture is event-sampled: "
                                        f"{plural(w.lead_n + w.trail_n, 'collective')} at its start or end with no "
                                        "partner in its group left out of skew (the sampling dropped the partner, "
                                        "not a late start or an early end)", w.rank, "warning"))
            continue
        late = w.first_event_ms if w.first_event_ms is not None and w.first_event_ms > 0 else w.lead_ms
        parts = ([f"starts {plural(w.lead_n, 'collective')} / {fmt(late, 'ms')} after the others'"]
                 if w.lead_n else []) + ([f"ends {plural(w.trail_n, 'collective')} / {fmt(w.trail_ms, 'ms')} before the "
                                          "others'"] if w.trail_n else [])
        issues.append(Issue(source, f"rank {w.rank}'s capture {' and '.join(parts)}: collectives not every rank of "
                                    "their group recorded are left out of skew (not paired with the next one)",
                            w.rank, "warning"))
    if len(sk.capture_windows) > MAX_WINDOW_LINES:
        issues.append(Issue(source, f"{len(sk.capture_windows) - MAX_WINDOW_LINES} more ranks' captures start or end "
                                    "at different collectives (skew.capture_windows)", None, "warning"))
    if sk.by_order:
        issues.append(Issue(source, f"{plural(sk.by_order, 'rank-group')} of collectives whose completion times fit no "
                                    "alignment with the other ranks' were matched by order: their skew may pair "
                                    "different collectives", None, "warning"))
    if not step_ms:
        return
    too_long = [b for b in sk.by_collective if b.max_skew_ms > (longest or step_ms)]
    bad = [x for x in sk.stragglers if x.imposed_ms > step_ms]
    if too_long or bad:
        what = (f"arrival skew up to {fmt(max(b.max_skew_ms for b in too_long), 'ms')}" if too_long else
                f"a straggler cost of {fmt(max(x.imposed_ms for x in bad), 'ms')} per step")
        issues.append(Issue(source, f"{what}, longer than a step ({fmt(step_ms, 'ms')}): a matching failure (the ranks' "
                                    "collectives are paired wrongly), not a measurement; no straggler finding is "
                                    "drawn from it", None, "warning"))
        sk.stragglers = [x for x in sk.stragglers if not x.kind]
        sk.matching_failed = True
