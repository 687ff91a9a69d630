"""Pipeline actions (one span per stage × microbatch × F/B/I/W) from a rank's trace.

Reads torch's runtime labels `PP:{stage}{F|I|B|W}{mb}` (which llmdiag's own gpipe/1f1b runs also write)
and the older `Forward {mb}` / `Backward {mb}` spans of ScheduleGPipe/Schedule1F1B, whose stage must come
from the manifest. On GPU traces a matching `gpu_user_annotation` gives the device-side span.

torch's runtime schedules put the wait for an action's input inside its `PP:` span. llmdiag's own runs nest
a second, equal label around the compute alone (workloads/parallel/pp.py); where equal labels nest, the
innermost is the action. dualpipev's `PP:(…)OVERLAP_F_B` pairs are read only through such inner labels.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.io.trace import RankTrace

PP_RE = re.compile(r"^PP:(\d+)(F|I|B|W)(\d+)$")
OLD_RE = re.compile(r"^(Forward|Backward) (\d+)$")


@dataclass
class Action:
    """One pipeline action on a rank: a microbatch's forward or backward part (F, B, I, W), its stage, its span."""

    step: int
    stage: int
    kind: str  # F, B, I, W
    microbatch: int
    start: int  # ns, rank-relative
    end: int


def extract_actions(t: RankTrace, wins: list[Window], stage_hint: int | None) -> list[Action]:
    parsed: dict[int, tuple[int | None, str, int]] = {}
    for i, n in enumerate(t.names):
        if m := PP_RE.match(n):
            parsed[i] = (int(m.group(1)), m.group(2), int(m.group(3)))
        elif m := OLD_RE.match(n):
            parsed[i] = (None, "F" if m.group(1) == "Forward" else "B", int(m.group(2)))
    if not parsed:
        return []
    if any(p[0] is not None for p in parsed.values()):
        # torch's GPipe also writes `Forward i` around recv + compute: prefer the PP: labels.
        parsed = {i: p for i, p in parsed.items() if p[0] is not None}
    idx = np.flatnonzero(np.isin(t.name, list(parsed)))
    # Prefer device-side spans (gpu_user_annotation) where the trace has them.
    gpu_ann = t.cat_mask("gpu_user_annotation")
    if gpu_ann[idx].any():
        idx = idx[gpu_ann[idx]]
    use_device = bool(gpu_ann[idx].any())
    out = []
    for i in idx.tolist():
        stage, kind, mb = parsed[int(t.name[i])]
        if stage is None:  # unknown until the rank's place in its pipeline is known (analyze.py)
            stage = stage_hint if stage_hint is not None else -1
        s, e = int(t.ts[i]), int(t.ts[i] + t.dur[i])
        step = _step_of(s, wins, use_device)
        if step is None:
            continue
        out.append(Action(step, stage, kind, mb, s, e))
    return _innermost(out)


def _innermost(actions: list[Action]) -> list[Action]:
    """Of equal actions whose spans nest (torch's span around the wait and the compute, ours around the
    compute), the innermost."""
    by: dict[tuple, list[Action]] = {}
    for a in actions:
        by.setdefault((a.step, a.stage, a.kind, a.microbatch), []).append(a)
    if all(len(v) == 1 for v in by.values()):
        return actions
    drop = set()
    for v in by.values():
        seen = set()
        for a in v:
            inner = any(b is not a and a.start <= b.start and b.end <= a.end and (b.start, b.end) != (a.start, a.end)
                        for b in v)
            if inner or (a.start, a.end) in seen:  # an outer span, or the same span twice
                drop.add(id(a))
            seen.add((a.start, a.end))
    return [a for a in actions if id(a) not in drop]


def _step_of(ts: int, wins: list[Window], device: bool) -> int | None:
    for w in wins:
        lo, hi = (w.start, w.end) if device else (w.host_start, w.host_end)
        if lo <= ts <= hi:
            return w.step
    return None


def theory_bubble(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Closed-form bubble fraction: GPipe/1F1B (p−1)/(m+p−1), interleaved (p−1)/(v·m+p−1), zero-bubble ≈ 0."""
    if p <= 1 or m <= 0:
        return 0.0
    s = schedule.lower()
    if s in ("zbv", "dualpipev", "v-shaped", "zb", "zbh1", "zerobubble", "looped_bfs_zb"):
        return 0.0
    if s.startswith("interleaved") or v > 1:
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (m + p - 1)
