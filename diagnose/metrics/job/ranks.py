"""Which trace is which rank of which job: resolved from evidence, never guessed, never at a good rank's cost.

Rank numbers come from distributedInfo, then the manifest's per-rank records, then the file name. A folder
may hold more than one job (a V100 job of 2023 beside a B200 job of 2025, both with a rank 0): traces are
grouped into jobs by what the traces themselves say (device name, clock origin hours apart, world size),
the job with the most traces is analysed and every trace of another job is reported with the reason and
the command that analyses it alone, so a rank 0 is never dropped because another job has a rank 0 too.
Within the job, several files for one rank are resolved only when that is safe: files that give identical
numbers (a copy) keep one, recorded in `duplicates` so the gate fails unless allowed; files that disagree
cannot be told apart and are all left out. World sizes and rank numbers are bounded by the traces present.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
from collections import Counter
from typing import TYPE_CHECKING

from llmdiag.diagnose.io.discover import rank_from_name
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.model.analysis import Issue

if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest

JOB_GAP_US = 6 * 3600 * 1e6  # ranks of one job start profiling within hours of each other; jobs days apart
PLAUSIBLE_US = (1e15, 4e15)  # epoch µs between 2001 and 2096: a wall clock, not a monotonic counter
MAX_RANK = 1 << 20  # beyond the largest jobs (~10^5 GPUs), and a missing-rank list stays ~8 MB; a larger distributedInfo rank or world size is not a real one


def resolve_ranks(good: list[RankOutput], man: Manifest | None, issues: list[Issue],
                  duplicates: list[int] | None = None) -> list[RankOutput]:
    """The outputs of one job with a unique rank each; the rest become issues (errors: left out)."""
    for o in good:
        if o.world_size is not None and not 0 < o.world_size <= MAX_RANK:
            issues.append(Issue(o.path, f"invalid value: world_size {o.world_size} (beyond {MAX_RANK}); ignored",
                                None, "warning"))
            o.world_size = None
        if o.rank is not None and not 0 <= o.rank < MAX_RANK:
            issues.append(Issue(o.path, f"invalid value: rank {o.rank}; ignored", None, "warning"))
            o.rank = None
    _number(good, man, issues)
    good = _one_job(good, issues)
    sizes = Counter(o.world_size for o in good if o.world_size)
    if len(sizes) > 1:
        main = sizes.most_common(1)[0][0]
        for o in good:
            if o.world_size and o.world_size != main:
                issues.append(Issue(o.path, f"trace of a different job (world size {o.world_size}, the others "
                                            f"{main}); left out", o.rank, "error"))
        good = [o for o in good if not o.world_size or o.world_size == main]
    world = sizes.most_common(1)[0][0] if sizes else (man.world_size if man else None)
    if isinstance(world, int) and world > 0:
        for o in good:
            if o.rank >= world:
                issues.append(Issue(o.path, f"rank {o.rank} is outside the world of {world} ranks (contradictory "
                                            "distributedInfo or file name); left out", o.rank, "error"))
        good = [o for o in good if o.rank < world]
    good = _dedupe(good, man, issues, duplicates if duplicates is not None else [])
    for o in good:
        o.metrics.rank = o.rank
    return good


def _number(good: list[RankOutput], man: Manifest | None, issues: list[Issue]) -> None:
    for o in good:
        if o.rank is None:
            r = manifest_rank_of(man, o.path)
            src = "manifest"
            if r is None:
                r, src = rank_from_name(o.path), "file name"
            if r is not None and r >= MAX_RANK:
                r = None
            if r is None:
                issues.append(Issue(o.path, "no rank in distributedInfo, manifest or file name", None, "warning"))
            else:
                issues.append(Issue(o.path, f"no rank in distributedInfo: rank {r} taken from the {src}", r, "warning"))
            o.rank = r
    unnamed = [o for o in good if o.rank is None]
    if unnamed:
        taken = {o.rank for o in good if o.rank is not None}
        free = (r for r in range(len(good) + len(taken) + 1) if r not in taken)  # bounded by the files present
        for o in unnamed:
            o.rank = next(free)
            issues.append(Issue(o.path, f"numbered rank {o.rank} by file order", o.rank, "warning"))


def _when(us: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "an unknown time"


def wall_clock(o: RankOutput) -> float | None:
    """The wall-clock time (epoch µs) of the rank's trace origin: ts itself where it is an epoch clock (older
    Kineto), else ts plus baseTimeNanoseconds (newer Kineto writes a monotonic ts and that offset); None
    where the trace does not say."""
    us = o.metrics.origin_us
    if not (isinstance(us, float | int) and math.isfinite(us)):
        return None
    base = getattr(o, "base_time_ns", None)
    if not (PLAUSIBLE_US[0] < us < PLAUSIBLE_US[1]) and type(base) is int:
        us = us + base / 1000.0
    return us if PLAUSIBLE_US[0] < us < PLAUSIBLE_US[1] else None


def _one_job(good: list[RankOutput], issues: list[Issue]) -> list[RankOutput]:
    """Traces grouped into jobs by wall-clock origin (hours apart) and, where two device names both claim
    the same rank numbers, by device; the largest job (the latest on a tie) is kept, the others named with
    the reason. Traces that do not say (no device, no wall clock) join it. One job with mixed device names
    and no rank claimed twice stays one job."""
    clocks = sorted(c for o in good if (c := wall_clock(o)) is not None)
    edges = [b for a, b in zip(clocks, clocks[1:]) if b - a > JOB_GAP_US]
    by_device: dict[str, set] = {}
    for o in good:
        if o.device_name:
            by_device.setdefault(o.device_name, set()).add(o.rank)
    names = list(by_device)
    clash = any(by_device[x] & by_device[y] for i, x in enumerate(names) for y in names[i + 1:])

    def key(o):
        c = wall_clock(o)
        era = None if c is None else sum(c >= e for e in edges)
        return ((o.device_name or None) if clash else None, era)

    keys = {id(o): key(o) for o in good}
    devices = {k[0] for k in keys.values() if k[0] is not None}
    eras = {k[1] for k in keys.values() if k[1] is not None}
    if len(devices) <= 1 and len(eras) <= 1:
        return good
    count = Counter(k for k in keys.values() if k != (None, None))
    if not count:
        return good

    def latest(k):
        return max((wall_clock(o) or 0.0) for o in good if keys[id(o)] == k)

    main = max(count, key=lambda k: (count[k], latest(k)))

    def fits(k):
        return (k[0] is None or k[0] == main[0]) and (k[1] is None or k[1] == main[1])

    kept = [o for o in good if fits(keys[id(o)])]
    ref = next(o for o in kept if keys[id(o)] == main)
    here = f"{ref.device_name or 'unknown device'}, started {_when(c) if (c := wall_clock(ref)) else 'at an unknown time'}"
    for o in good:
        if not fits(keys[id(o)]):
            c = wall_clock(o)
            issues.append(Issue(o.path, f"trace of another job (rank {o.rank}, {o.device_name or 'unknown device'}, "
                                        f"started {_when(c) if c else 'at an unknown time'}; this folder's job: {here}); "
                                        f"left out (analyse it alone: llmdiag analyze {o.path})", o.rank, "error"))
    return kept


def _same_numbers(a: RankOutput, b: RankOutput) -> bool:
    return dataclasses.replace(a.metrics, file="", warnings=[]) == dataclasses.replace(b.metrics, file="", warnings=[])


def _dedupe(good: list[RankOutput], man: Manifest | None, issues: list[Issue], duplicates: list[int]) -> list[RankOutput]:
    by_rank: dict[int, list[RankOutput]] = {}
    for o in good:
        by_rank.setdefault(o.rank, []).append(o)
    out = []
    for r, outs in by_rank.items():
        if len(outs) == 1:
            out.append(outs[0])
            continue
        named = [o for o in outs if manifest_rank_of(man, o.path) == r]
        if all(_same_numbers(outs[0], o) for o in outs[1:]) or len(named) == 1:
            keep = named[0] if len(named) == 1 else outs[0]
            why = "the manifest names it" if len(named) == 1 else "they give identical numbers"
            for o in outs:
                if o is not keep:
                    issues.append(Issue(o.path, f"rank {r} appears in {len(outs)} files; {keep.path} kept ({why}), "
                                                "this one not analysed", r, "warning"))
            duplicates.append(r)
            out.append(keep)
            continue
        for o in outs:
            issues.append(Issue(o.path, f"rank {r} appears in {len(outs)} files; all of them left out "
                                        "(which one is right cannot be told)", r, "error"))
    return out


def manifest_rank_of(man: Manifest | None, path: str) -> int | None:
    """The rank whose status record names this trace file."""
    for r, st in (man.rank_status if man else {}).items():
        if isinstance(st, dict) and st.get("trace") and os.path.basename(str(st["trace"])) == os.path.basename(path):
            return _int(r)
    return None


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
