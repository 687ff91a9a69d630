"""`analyze --timeline FILE`: one Chrome-trace JSON of all ranks (or a chosen subset), the user's own
traces whole, with llmdiag's tracks beside them.

Every source event passes through (export/passthrough.py: args, flows, instants, metadata kept; pids per
rank, flow ids unique per rank, clocks aligned), and each rank gets a "rank R: llmdiag" process whose named
threads hold the intervals the analysis measured: exposed communication, idle (split by cause on GPU
ranks), the pipeline bubble of its stage, straggler waits, its critical path, and the job's critical path where
it runs on the rank; one more process holds the job's path across the ranks shown (export/tracks.py). The
intervals, the pipeline, the straggler matching and each rank's clock shift all come from the analysis' own pass (`tracks` from
`analyze_path(..., tracks={})`, `RankMetrics.clock_shift_ns`): nothing is measured a second time here;
only the source files are re-read, to copy their events. Times are µs from the earliest rank's origin.

The output is streamed (one piece of one rank in memory at a time) through the atomic writer, gzip when the
name ends in `.gz`. Size is the user's choice: with `max_events`, each rank keeps its share of complete
events (the longest) and each track at least 1,000 intervals (the longest); what was cut is counted per rank
in the trace (`llmdiag.ranks`, and a label on the rank's llmdiag process). Trace strings are written as
JSON strings; nothing is evaluated.
"""

from __future__ import annotations

import gzip
import io
import os

import orjson

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.export import tracks as tk
from llmdiag.diagnose.export.passthrough import PID_STRIDE, RankSource, dumps
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.files import write_atomic_with

CLOCK = "µs from the earliest rank's trace origin; each rank's clock_shift_ns (origin and host skew) applied"


def check_ranks(held: list[int], ranks: list[int] | None, where: str) -> None:
    """LlmdiagError naming the requested ranks the analysis does not hold."""
    unknown = sorted(set(ranks or []) - set(held))
    if unknown:
        raise LlmdiagError(f"--ranks names ranks the analysis does not hold: {unknown[:10]} "
                           f"(it holds {len(held)} rank(s))", where)


def _select(a: Analysis, ranks: list[int] | None) -> list:
    check_ranks([r.rank for r in a.ranks], ranks, a.source)
    want = set(ranks or [r.rank for r in a.ranks])
    return [r for r in a.ranks if r.rank in want]


def _write(out, a: Analysis, tracks: dict | None, ranks: list[int] | None, max_events: int | None) -> None:
    chosen = _select(a, ranks)
    id_base = max([a.world_size or 0] + [r.rank + 1 for r in a.ranks])
    share = max(1, max_events // max(1, len(chosen))) if max_events else None
    track_cap = max(tk.MIN_TRACK_CAP, share // 4) if share else None
    meta: dict = {"version": a.llmdiag_version, "source": a.source, "clock": CLOCK, "pid_stride": PID_STRIDE,
            "max_events": max_events, "track_cap_per_rank": track_cap, "ranks": {}}
    dropped = track_dropped = 0
    first = True

    def emit(chunk: bytes) -> None:
        nonlocal first
        if chunk:
            out.write(chunk if first else b"," + chunk)
            first = False

    out.write(b'{"traceEvents":[')
    for r in chosen:  # one rank's source at a time, a piece at a time
        src = RankSource(r.rank, r.file, r.origin_us, r.clock_shift_ns, id_base)
        for chunk in src.chunks(share):
            emit(chunk)
        emit(dumps(src.closing())[1:-1])
        xs, n = tk.track_events(src.llmdiag_pid, (tracks or {}).get(r.rank) or tk.RankTracks(), r.clock_shift_ns,
                                track_cap, r.rank)
        note = ", ".join(x for x in (f"{src.cut} complete events cut (the shortest)" if src.cut else "",
                                     f"{n} track intervals cut (the shortest)" if n else "") if x)
        emit(dumps(tk.rank_header(src.llmdiag_pid, r.rank, r.host, note) + xs)[1:-1])
        dropped += src.cut
        track_dropped += n
        meta["ranks"][str(r.rank)] = {**src.summary(), "track_intervals_cut": n}
    emit(dumps(tk.job_path_events(chosen, tracks))[1:-1])
    emit(dumps(tk.finding_events(a.findings, chosen))[1:-1])
    meta.update(events_dropped=dropped, track_intervals_dropped=track_dropped)
    out.write(b'],"displayTimeUnit":"ms","llmdiag":' + dumps([meta])[1:-1] + b"}")


def build_timeline(a: Analysis, tracks: dict | None = None, ranks: list[int] | None = None,
                   max_events: int | None = None) -> dict:
    """The annotated trace as a dict (`traceEvents`, `displayTimeUnit`, `llmdiag` metadata)."""
    buf = io.BytesIO()
    _write(buf, a, tracks, ranks, max_events)
    return orjson.loads(buf.getvalue())


def write_timeline(a: Analysis, path: str, tracks: dict | None = None, ranks: list[int] | None = None,
                   max_events: int | None = None) -> str:
    """Stream the annotated trace to `path` (atomically; gzip when it ends in .gz); its absolute path."""
    _select(a, ranks)  # a bad rank list: one line before any file is opened

    def write(f) -> None:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0) as g:
                _write(g, a, tracks, ranks, max_events)
        else:
            _write(f, a, tracks, ranks, max_events)  # f is buffered already

    write_atomic_with(path, write)
    return os.path.abspath(path)

