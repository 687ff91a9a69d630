"""`analyze --timeline FILE`: one Chrome-trace JSON of all ranks (or a chosen subset), annotated.

Each rank is a process (`pid` = rank) holding its own trace events, re-read from its file, and tracks added
by llmdiag: exposed communication, idle, the pipeline bubble of its stage, straggler waits; the findings are
instant events on an `llmdiag findings` process. On a GPU rank the idle track is split by cause as the idle
attribution splits it (`idle: host_bound`, `idle: runtime hipFree`, ...; `cause` and `op` in the args).
Clocks are aligned as `analyze` aligns them: each rank's trace origin against the earliest rank's, then the
per-host shift the skew analysis applied. Times are µs from the earliest rank's origin, so Perfetto and
chrome://tracing open it.

Size is bounded: at most `max_events` of the traces' own events in all (default 300,000, about 40 MB);
past the cap each rank keeps its longest events and the file says how many were dropped. Each added track
of a rank keeps at most a quarter of the rank's share of the cap (at least 1,000 intervals), its longest,
and the file counts what was dropped: below the cap the tracks are exactly the metrics' intervals. Trace strings are written as JSON strings (orjson escapes them); nothing is evaluated.
"""

from __future__ import annotations

import os

import numpy as np
import orjson

from diagnose.errors import LlmdiagError
from diagnose.export import tracks as tk
from diagnose.io.loader import load_trace
from diagnose.metrics.classify import classify
from diagnose.metrics.cross_rank import stage_hint
from diagnose.metrics.layout import pipeline_groups, slim_pg_config
from diagnose.metrics.per_rank import collective_records
from diagnose.metrics.pipeline.actions import extract_actions
from diagnose.metrics.steps import windows
from diagnose.model.analysis import Analysis
from diagnose.model.format import NS_PER_MS

MAX_EVENTS = 300_000
TRACK_TIDS = {"exposed": ("llmdiag: exposed comm", 1_000_001), "idle": ("llmdiag: idle", 1_000_002),
              "bubble": ("llmdiag: pipeline bubble", 1_000_003), "waits": ("llmdiag: straggler wait", 1_000_004)}
FINDINGS_PID = -1


def aligned_shift_ns(a: Analysis) -> dict[int, int]:
    """ns to add to each rank's own clock: its origin against the earliest rank's, plus its host's skew
    shift (as metrics.cross_rank aligns the pipeline actions)."""
    origins = [r.origin_us for r in a.ranks if np.isfinite(r.origin_us) and abs(r.origin_us) < 2.0**52]
    origin = min(origins) if origins else 0.0
    host_shift = a.skew.host_shift_ms if a.skew else {}
    out = {}
    for r in a.ranks:
        d = (r.origin_us - origin) * 1000 if r.origin_us in origins else 0.0
        out[r.rank] = int(round(d)) + int(round(host_shift.get(r.host, 0.0) * NS_PER_MS))
    return out


def _select(a: Analysis, ranks: list[int] | None) -> list:
    if not ranks:
        return list(a.ranks)
    have = {r.rank for r in a.ranks}
    unknown = sorted(set(ranks) - have)
    if unknown:
        raise LlmdiagError(f"--ranks names ranks the analysis does not hold: {unknown[:10]}", a.source)
    want = set(ranks)
    return [r for r in a.ranks if r.rank in want]


def _keep(t, budget: int) -> np.ndarray:
    """Indices of the events written: all, or the `budget` longest, in time order."""
    n = len(t)
    if n <= budget:
        return np.arange(n)
    return np.sort(np.argsort(-t.dur, kind="stable")[:budget])


def build_timeline(a: Analysis, ranks: list[int] | None = None, max_events: int = MAX_EVENTS) -> dict:
    """The annotated trace as a dict (`traceEvents`, `displayTimeUnit`, `llmdiag` metadata)."""
    chosen = _select(a, ranks)
    shift = aligned_shift_ns(a)
    man = a.manifest
    ev: list[dict] = []
    wins_of, acts, colls, dists = {}, {}, {}, {}
    budget = max(0, max_events // max(1, len(chosen)))
    dropped = 0
    added: dict[int, tk.RankTracks] = {}
    for r in chosen:  # one trace held at a time: 16k ranks' traces at once would not fit
        try:
            t = load_trace(r.file)
        except Exception as e:  # one clear line, not a traceback
            raise LlmdiagError(f"cannot re-read the trace for the timeline ({type(e).__name__}: {e})", r.file)
        classify(t, a.options.comm_regex)
        wins, _ = windows(t, a.options.exclude_last_step)
        wins_of[r.rank] = wins
        acts[r.rank] = extract_actions(t, wins, stage_hint(man, r.file))
        colls[r.rank] = collective_records(t, wins)
        dists[r.rank] = {"pg_config": slim_pg_config(t.distributed)}  # no O(world) rank lists per rank
        sh = shift[r.rank]
        keep = _keep(t, budget)
        dropped += len(t) - len(keep)
        ev.append({"ph": "M", "name": "process_name", "pid": r.rank, "tid": 0,
                   "args": {"name": f"rank {r.rank}" + (f" ({r.host})" if r.host else "")}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": r.rank, "tid": 0, "args": {"sort_index": r.rank}})
        for th, (pid, tid) in enumerate(t.threads):
            label = t.thread_name(th) or f"pid {pid} tid {tid}"
            ev.append({"ph": "M", "name": "thread_name", "pid": r.rank, "tid": th, "args": {"name": label}})
        ts = (t.ts[keep] + sh) / 1000.0
        dur = t.dur[keep] / 1000.0
        names, cats = t.names, t.cats
        for i, s, d in zip(keep.tolist(), ts.tolist(), dur.tolist()):
            ev.append({"ph": "X", "name": names[t.name[i]], "cat": cats[t.cat[i]], "pid": r.rank,
                       "tid": int(t.thread[i]), "ts": s, "dur": d})
        added[r.rank] = tk.step_tracks(t, wins_of[r.rank])
    with_acts = [r for r in acts if acts[r]]
    for g in pipeline_groups(man, dists, with_acts) if with_acts else []:
        for r, xs in tk.bubble_tracks([x for x in g if x in acts], acts, shift).items():
            added[r].bubble = xs
    for r, xs in tk.wait_tracks(colls, shift).items():
        added[r].waits = xs
    track_cap = max(1000, budget // 4)
    track_dropped = 0
    for r in chosen:
        xs, n = _track_events(r.rank, added[r.rank], shift[r.rank], track_cap)
        ev += xs
        track_dropped += n
    ev += _finding_events(a, chosen, wins_of, shift)
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "llmdiag": {"version": a.llmdiag_version, "source": a.source, "ranks": [r.rank for r in chosen],
                        "max_events": max_events, "events_dropped": dropped,
                        "track_cap_per_rank": track_cap, "track_intervals_dropped": track_dropped,
                        "clock": "µs from the earliest rank's trace origin; per-host skew shift applied"}}


def _track_events(rank: int, tr: tk.RankTracks, sh: int, cap: int) -> tuple[list[dict], int]:
    out, dropped = [], 0
    for key, (label, tid) in TRACK_TIDS.items():
        xs = getattr(tr, key)
        if not xs:
            continue
        if len(xs) > cap:  # keep the longest intervals, in time order
            dropped += len(xs) - cap
            xs = sorted(sorted(xs, key=lambda x: x[0] - x[1])[:cap])
        out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": -10 + tid % 10}})
        for s, e, tag, *why in xs:
            name = label.removeprefix("llmdiag: ")
            args = {"step": tag} if key != "waits" else {"collective": tag}
            if why:  # an idle interval's cause, and the op of a blocking runtime call: "idle: runtime hipFree"
                cause, op = why
                name = f"{name}: {cause} {op}" if op else f"{name}: {cause}"
                args = {**args, "cause": cause, **({"op": op} if op else {})}
            out.append({"ph": "X", "name": name, "cat": "llmdiag", "pid": rank, "tid": tid,
                        "ts": (s + sh) / 1000.0, "dur": (e - s) / 1000.0, "args": args})
    return out, dropped


def _finding_events(a: Analysis, chosen, wins_of, shift) -> list[dict]:
    """Each finding as a global instant at the start of the first analysed step of its first rank."""
    if not a.findings:
        return []
    out = [{"ph": "M", "name": "process_name", "pid": FINDINGS_PID, "tid": 0, "args": {"name": "llmdiag findings"}},
           {"ph": "M", "name": "process_sort_index", "pid": FINDINGS_PID, "tid": 0, "args": {"sort_index": -1}}]
    first = min(chosen, key=lambda r: r.rank)
    for i, f in enumerate(a.findings):
        named = set(f.evidence.ranks or [])
        r = next((x for x in chosen if x.rank in named), first)
        wins = wins_of[r.rank]
        at = ((wins[0].start if wins else 0) + shift[r.rank]) / 1000.0
        out.append({"ph": "i", "s": "g", "name": f"[{f.severity}] {f.title}", "cat": "llmdiag.finding",
                    "pid": FINDINGS_PID, "tid": 0, "ts": at,
                    "args": {"rule": f.id, "evidence": f.evidence.text, "action": f.action,
                             "expected_gain": f.expected_gain, "ranks": f.evidence.ranks, "index": i}})
    return out


def write_timeline(a: Analysis, path: str, ranks: list[int] | None = None, max_events: int = MAX_EVENTS) -> str:
    """Write the annotated trace to `path` (atomically) and return the absolute path."""
    tl = build_timeline(a, ranks, max_events)
    try:
        data = orjson.dumps(tl)
    except TypeError:  # a lone surrogate in a trace string (orjson refuses it): the stdlib writes it as \udXXX
        import json

        data = json.dumps(tl).encode("ascii")
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise LlmdiagError(f"cannot write the timeline ({e.strerror})", path) from None
    return path
