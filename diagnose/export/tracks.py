"""llmdiag's own tracks in the merged timeline: one process per rank ("rank R: llmdiag"), one named thread
per track (exposed comm, idle, pipeline bubble, straggler wait, critical path: its segments named by the cause
that bounds them, the job's critical path where it runs on the rank), one "llmdiag: job critical path" process
whose one thread holds the job's path as it moves across ranks, and the findings as global instants.

The intervals come from the analysis (metrics/rank/track_intervals.py, on each rank's own clock); here they are
only shifted by the rank's `clock_shift_ns` and written. Where the user capped the timeline's size, a track
keeps its longest intervals (at least 1,000) and the count of what it dropped goes in the trace.
"""

from __future__ import annotations

from llmdiag.diagnose.metrics.rank.track_intervals import RankTracks

TRACKS = {"exposed": ("llmdiag: exposed comm", 1), "idle": ("llmdiag: idle", 2),
          "bubble": ("llmdiag: pipeline bubble", 3), "waits": ("llmdiag: straggler wait", 4),
          "critical": ("llmdiag: critical path", 5), "job_path": ("llmdiag: job critical path", 6)}
FINDINGS_PID = -1
JOB_PATH_PID = -2
# The job path's categories (HTA's) in the words of the terminal's table (model/critical_path_view.CP_COLUMNS).
JOB_WORDS = {"cpu_bound": "cpu", "gpu_compute_bound": "compute", "gpu_communication_bound": "comm",
             "gpu_kernel_launch_overhead": "launch", "gpu_kernel_kernel_overhead": "kernel-kernel"}
MIN_TRACK_CAP = 1000


def rank_header(pid: int, rank: int, host: str, note: str = "") -> list[dict]:
    name = f"rank {rank}: llmdiag" + (f" ({host})" if host else "")
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    if note:  # what the size cap cut from this rank, said where the rank is drawn
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": note}})
    return out


def job_slice(s: int, e: int, step: int, cat: str, left_for: int, rank: int, sh: int, pid: int, tid: int) -> dict:
    """One stretch of the job's path (metrics/job/critical_path.Segment) as a slice named with its category and
    rank; at a collective where the path leaves the rank, the rank it goes to."""
    word = JOB_WORDS.get(cat, "other")  # our own words: a summary's stray category is never written as it came
    name = f"job critical path: {word} (rank {rank}" + (f", waited for rank {left_for})" if left_for >= 0 else ")")
    args = {"step": step, "rank": rank, "category": word, **({"waited_for_rank": left_for} if left_for >= 0 else {})}
    return {"ph": "X", "name": name, "cat": "llmdiag", "pid": pid, "tid": tid, "ts": round((s + sh) / 1000.0, 3),
            "dur": round((e - s) / 1000.0, 3), "args": args}


def job_path_events(chosen, tracks: dict | None) -> list[dict]:
    """The job's critical path as one track across ranks: the stretches the ranks shown hold (all ranks unless
    the user chose some), in time order; each names its rank, so the track shows where the path jumps. Its
    length is the path's changes (metrics/job/critical_path.py merges adjacent stretches), not the ranks."""
    xs = [(s + r.clock_shift_ns, e - s, step, cat, left, r.rank, r.clock_shift_ns) for r in chosen
          for s, e, step, cat, left in getattr((tracks or {}).get(r.rank), "job_path", None) or ()]
    if not xs:
        return []
    out = [{"ph": "M", "name": "process_name", "pid": JOB_PATH_PID, "tid": 0, "args": {"name": "llmdiag: job critical path"}},
           {"ph": "M", "name": "process_sort_index", "pid": JOB_PATH_PID, "tid": 0, "args": {"sort_index": JOB_PATH_PID}},
           {"ph": "M", "name": "thread_name", "pid": JOB_PATH_PID, "tid": 1, "args": {"name": "job critical path"}}]
    for at, dur, step, cat, left, rank, sh in sorted(xs):
        out.append(job_slice(at - sh, at - sh + dur, step, cat, left, rank, sh, JOB_PATH_PID, 1))
    return out


def track_events(pid: int, tr: RankTracks, sh: int, cap: int | None, rank: int = -1) -> tuple[list[dict], int]:
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
        if key == "job_path":
            out += [job_slice(s, e, step, cat, left, rank, sh, pid, tid) for s, e, step, cat, left in xs]
            continue
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
