"""One rank's own trace events, streamed whole into the merged timeline (`analyze --timeline`).

Every event of the source passes through as it is (args, categories, flows, instants, counters, metadata),
with four changes a merge needs: `pid` becomes the rank's own (`rank * PID_STRIDE + 1 + j` for the rank's
j-th source process, the 1,000th on in blocks above every rank: passthrough.merged_pid; so ranks never share a
process and `pid // PID_STRIDE % id_base` is the rank); `ts` moves onto
the analysis' aligned clock (µs from the earliest rank's origin, the rank's `clock_shift_ns` applied);
flow and async ids (`id`, `bind_id`, `id2.global`) are made unique per rank (`id * id_base + rank`, or
`"r<rank>:<id>"` where that would not stay an exact JSON number), the same way at both ends of a flow; a
`process_name` gets "rank R: " in front and `process_sort_index` groups the rank's processes together.

Events are read piece by piece (io/stream.py) and written piece by piece: one rank's events are never all
held at once. Where the user caps the size, a first read finds the rank's `keep` longest complete events and
the second writes those (and every non-X event); what was cut is counted.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import orjson

from llmdiag.diagnose.errors import LlmdiagError, TraceError
from llmdiag.diagnose.io.stream import Malformed, Stream, Whole, read_bytes
from llmdiag.diagnose.model.depth import clip

PID_STRIDE = 1000  # pids of rank R: R*1000 (llmdiag's tracks), R*1000+1 ... (its own processes)
MAX_EXACT = 2**53  # JSON readers hold numbers as doubles


def dumps(events: list) -> bytes:
    """Events as a JSON array's bytes; a value orjson refuses (a lone surrogate, a 65-bit int, nesting past its
    254 levels) goes through the stdlib instead, escaped, never raised: nesting below model/depth.MAX_DEPTH
    levels (a 1,000-level `args` the parser accepted was a RecursionError traceback) is cut first."""
    try:
        return orjson.dumps(events)
    except TypeError:
        clipped = clip(events)
        return json.dumps(clipped, ensure_ascii=True, allow_nan=False, default=str).encode("ascii")


def merged_pid(rank: int, j: int, id_base: int) -> int:
    """The merged pid of rank `rank`'s j-th source process: `rank * PID_STRIDE + 1 + j` for the first 999;
    past them, block b = j // 999 moves to `(b * id_base + rank) * PID_STRIDE + 1 + j % 999` (id_base exceeds
    every rank), so no two processes of any ranks share a pid (they all shared the 999th before) and
    `pid // PID_STRIDE % id_base` is still the rank."""
    b, k = divmod(j, PID_STRIDE - 1)
    return (b * id_base + rank) * PID_STRIDE + 1 + k


def _pieces(path: str, what: Stream | None = None):
    """The file's events, a list at a time; the header is left on `what`."""
    s = what or Stream(path)
    try:
        try:
            yield from s.pieces()
            return
        except Whole:
            pass
        doc = orjson.loads(read_bytes(path))
        events = doc.get("traceEvents") if isinstance(doc, dict) else doc
        s.header = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
        yield events if isinstance(events, list) else []
    except (TraceError, Malformed, orjson.JSONDecodeError) as e:
        raise LlmdiagError(f"cannot re-read the trace for the timeline: not the Kineto JSON it was ({e})", path) from None


class _Longest:
    """Which complete events to keep: the `keep` longest, ties by order of appearance."""

    def __init__(self, durs: np.ndarray, keep: int):
        self.thr = float(np.partition(durs, len(durs) - keep)[len(durs) - keep]) if keep else math.inf
        self.ties = keep - int((durs > self.thr).sum())

    def __call__(self, d) -> bool:
        d = _dur(d)
        if d > self.thr:
            return True
        if d == self.thr and self.ties > 0:
            self.ties -= 1
            return True
        return False


def _dur(d) -> float:
    return float(d) if type(d) in (int, float) and math.isfinite(d) else 0.0


class RankSource:
    """Rewrites one rank's events for the merge; counts what it wrote and cut."""

    def __init__(self, rank: int, path: str, origin_us: float, shift_ns: int, id_base: int):
        self.rank, self.path, self.origin, self.id_base = rank, path, origin_us, id_base
        self.shift_us = shift_ns / 1000.0
        self.pids: dict = {}  # source pid -> merged pid
        self.named: set[int] = set()  # merged pids with a process_name of their own
        self.sorted: set[int] = set()
        self.written: Counter = Counter()  # ph -> events written
        self.cut = 0  # complete events left out under the cap
        self.not_events = 0  # array items that are not objects (no reader shows them)
        self.header: dict = {}

    @property
    def llmdiag_pid(self) -> int:
        return self.rank * PID_STRIDE

    def _pid(self, p) -> int:
        try:
            hash(p)
        except TypeError:
            p = repr(p)
        new = self.pids.get(p)
        if new is None:
            new = self.pids[p] = merged_pid(self.rank, len(self.pids), self.id_base)
        return new

    def _id(self, v):
        if type(v) is int and 0 <= v and v * self.id_base + self.rank < MAX_EXACT:
            return v * self.id_base + self.rank
        return f"r{self.rank}:{v}"

    def _rewrite(self, e: dict) -> None:
        e["pid"] = pid = self._pid(e.get("pid"))
        ts = e.get("ts")
        if isinstance(ts, (int, float)) and type(ts) is not bool and math.isfinite(ts):
            e["ts"] = round(ts - self.origin + self.shift_us, 3)
        if "id" in e:
            e["id"] = self._id(e["id"])
        if "bind_id" in e:
            e["bind_id"] = self._id(e["bind_id"])
        id2 = e.get("id2")
        if type(id2) is dict and "global" in id2:
            e["id2"] = {**id2, "global": self._id(id2["global"])}
        if e.get("ph") == "M":
            name, args = e.get("name"), e.get("args")
            if name == "process_name" and type(args) is dict:
                e["args"] = {**args, "name": f"rank {self.rank}: {args.get('name', '')}"}
                self.named.add(pid)
            elif name == "process_sort_index":
                e["args"] = {**(args if type(args) is dict else {}), "sort_index": pid}
                self.sorted.add(pid)

    def durations(self) -> np.ndarray:
        """The complete events' durations, in file order (the capped write's first read)."""
        out = []
        for piece in _pieces(self.path):
            out += [_dur(e.get("dur")) for e in piece if type(e) is dict and e.get("ph") == "X"]
        return np.array(out, np.float64)

    def chunks(self, keep: int | None = None):
        """The rank's events as JSON bytes, comma-separated within a chunk (no brackets), chunk by chunk;
        `keep`: at most that many complete events, the longest."""
        pick = None
        if keep is not None:
            durs = self.durations()
            if len(durs) > keep:
                pick = _Longest(durs, keep)
            del durs
        s = Stream(self.path)
        for piece in _pieces(self.path, s):
            out = []
            for e in piece:
                if type(e) is not dict:
                    self.not_events += 1
                    continue
                ph = e.get("ph")
                if pick is not None and ph == "X" and not pick(e.get("dur")):
                    self.cut += 1
                    continue
                self._rewrite(e)
                self.written[ph if type(ph) is str else "?"] += 1
                out.append(e)
            if out:
                yield dumps(out)[1:-1]
        self.header = s.header

    def closing(self) -> list[dict]:
        """A name and a sort place for each of the rank's processes the source left unnamed or unsorted."""
        out = []
        for p, new in self.pids.items():
            if new not in self.named:
                out.append({"ph": "M", "name": "process_name", "pid": new, "tid": 0,
                            "args": {"name": f"rank {self.rank}: {p}" if p not in ("", None) else f"rank {self.rank}"}})
            if new not in self.sorted:
                out.append({"ph": "M", "name": "process_sort_index", "pid": new, "tid": 0, "args": {"sort_index": new}})
        return out

    def summary(self) -> dict:
        """What the trace's `llmdiag.ranks` says about this rank: its file, processes and counts."""
        return {"file": self.path, "pids": {str(v): str(k) for k, v in self.pids.items()},
                "llmdiag_pid": self.llmdiag_pid, "events": dict(sorted(self.written.items())),
                "complete_events_cut": self.cut, "not_events": self.not_events,
                "distributedInfo": _slim(self.header.get("distributedInfo"))}


def _slim(dist) -> dict | None:
    """The rank's distributedInfo without every group's rank list (O(world) per rank)."""
    if type(dist) is not dict:
        return None
    from llmdiag.diagnose.metrics.rank.layout import slim_pg_config

    return {**{k: v for k, v in dist.items() if k != "pg_config"}, **({"pg_config": slim_pg_config(dist)}
                                                                        if "pg_config" in dist else {})}
