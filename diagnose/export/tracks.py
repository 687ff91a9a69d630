"""llmdiag's own tracks in the merged timeline: one process per rank ("rank R: llmdiag"), one named thread
per track (exposed comm, idle, pipeline bubble, straggler wait, critical path: its segments named by the cause
that bounds them), and the findings as global instants.

The intervals come from the analysis (metrics/rank/track_intervals.py, on each rank's own clock); here they are
only shifted by the rank's `clock_shift_ns` and written. Where the user capped the timeline's size, a track
keeps its longest intervals (at least 1,000) and the count of what it dropped goes in the trace.
"""

from __future__ import annotations

from llmdiag.diagnose.metrics.rank.track_intervals import RankTracks

TRACKS = {"exposed": ("llmdiag: exposed comm", 1), "idle": ("llmdiag: idle", 2),
          "bubble": ("llmdiag: pipeline bubble", 3), "waits": ("llmdiag: straggler wait", 4),
          "critical": ("llmdiag: critical path", 5)}
FINDINGS_PID = -1
MIN_TRACK_CAP = 1000


def rank_header(pid: int, rank: int, host: str, note: str = "") -> list[dict]:
    name = f"rank {rank}: llmdiag" + (f" ({host})" if host else "")
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    if note:  # what the size cap cut from this rank, said where the rank is drawn
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": note}})
    return out


def track_events(pid: int, tr: RankTracks, sh: int, cap: int | None) -> tuple[list[dict], int]:
    """The rank's tracks as events on the aligned clock (µs), and how many intervals the cap dropped."""
    out, dropped = [], 0
    for key, (label, tid) in TRACKS.items():
        xs = getattr(tr, key)
        if not xs:
            continue
        if cap is not None and len(xs) > cap:  # keep the longest intervals, in time order
            dropped += len(xs) - cap
            xs = sorted(sorted(xs, key=lambda x: x[0] - x[1])[:cap])
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        name0 = label.removeprefix("llmdiag: ")
        for s, e, tag, *why in xs:
            name = name0
            args = {"step": tag} if key != "waits" else {"collective": tag}
            if why:  # an idle interval's cause, and the op of a blocking runtime call: "idle: runtime hipFree"
                cause, op = why
                name = f"{name}: {cause} {op}" if op else f"{name}: {cause}"
                args = {**args, "cause": cause, **({"op": op} if op else {})}
            out.append({"ph": "X", "name": name, "cat": "llmdiag", "pid": pid, "tid": tid,
                        "ts": round((s + sh) / 1000.0, 3), "dur": round((e - s) / 1000.0, 3), "args": args})
    return out, dropped


def finding_events(findings, chosen) -> list[dict]:
    """Each finding as a global instant at the start of the first analysed step of the first rank it names
    (else the lowest rank shown)."""
    if not findings or not chosen:
        return []
    out = [{"ph": "M", "name": "process_name", "pid": FINDINGS_PID, "tid": 0, "args": {"name": "llmdiag findings"}},
           {"ph": "M", "name": "process_sort_index", "pid": FINDINGS_PID, "tid": 0, "args": {"sort_index": -1}}]
    first = min(chosen, key=lambda r: r.rank)
    for i, f in enumerate(findings):
        named = set(f.evidence.ranks or [])
        r = next((x for x in chosen if x.rank in named), first)
        at = (r.steps[0].start_ms * 1000.0 if r.steps else 0.0) + r.clock_shift_ns / 1000.0
        out.append({"ph": "i", "s": "g", "name": f"[{f.severity}] {f.title}", "cat": "llmdiag.finding",
                    "pid": FINDINGS_PID, "tid": 0, "ts": round(at, 3),
                    "args": {"rule": f.id, "evidence": f.evidence.text, "action": f.action,
                             "expected_gain": f.expected_gain, "ranks": f.evidence.ranks, "index": i}})
    return out
