"""Which traces of one input belong to which run, when a folder holds several complete runs.

A folder where a script ran twice (minutes apart, same hosts, same GPUs) holds two files per rank. Without
grouping, every rank is "claimed twice" and left out. Runs are split only on evidence that cannot be a
single run's duplicates:
- some rank number is claimed by more than one file (else there is nothing to split: one run, as before);
- every trace has a wall-clock span (epoch ts, or ts + baseTimeNanoseconds) or, failing that, every file
  has Kineto's `host_PID.TIME.pt.trace.json` name with its write time;
- the spans fall into groups separated by idle time (a run's ranks profile the same steps: their spans
  overlap; two runs of one GPU cannot), at least MIN_GAP_US apart (MIN_NAME_GAP_US for file-name times);
- within each group no rank is claimed twice, and all groups ran on the same device model (a different
  device is another job: diagnose.metrics.ranks names it as before).
Anything else (true duplicates in one run, runs overlapping in time, files that do not say when they ran)
is one group, and diagnose.metrics.ranks resolves its duplicates as it always has.

A trace with no rank at all (no distributedInfo, manifest record or rank in its name) is claimed by the process
its file name names: torch.profiler's `tensorboard_trace_handler` writes `<worker>.<time>.pt.trace.json(.gz)`,
the worker `host_pid` by default or the name the user gave. Two such files of one worker taken minutes apart
are two captures of one process (kineto's resnet50 samples: `worker0.1623143089861` and `worker0.1623143566756`),
not ranks 0 and 1: the same time-gap evidence splits them into runs. Files of one worker that overlap in time
stay one group (ranks of a job whose workers share a name), as do rank-less files with distinct workers.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections import Counter
from typing import TYPE_CHECKING

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.discover import rank_from_name
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.metrics.job.ranks import wall_clock
from llmdiag.diagnose.model.lazy_re import lazy_compile

if TYPE_CHECKING:
    from llmdiag.diagnose.model.runs import RunInfo

KINETO_NAME = lazy_compile(r"^(?P<host>.+)_(?P<pid>\d{1,10})\.(?P<ns>\d{16,20})\.pt\.trace\.json(?:\.gz)?$")
# tensorboard_trace_handler's names: `<worker>.<epoch ms>.pt.trace.json` (older torch) or `<worker>.<epoch ns>`
HANDLER_NAME = lazy_compile(r"^(?P<worker>.+)\.(?P<t>\d{13}|\d{16,20})\.pt\.trace\.json(?:\.gz)?$")
MIN_GAP_US = 1e6  # two runs are at least a process start apart; one run's ranks overlap in time
MIN_NAME_GAP_US = 60e6  # file-name times are when each rank finished writing: a large trace takes a while


def group_runs(outputs: list[RankOutput]) -> list[list[RankOutput]]:
    """The outputs split into runs, oldest first; one group (all of them) unless the evidence above holds.
    Unreadable files go to the run their file-name time falls in, else to the newest run."""
    good = [o for o in outputs if not o.error]
    claims = Counter(r for o in good if (r := _claim(o)) is not None)
    if not claims or max(claims.values()) < 2:
        return [outputs]
    spans = [_span(o) for o in good]
    gap = MIN_GAP_US
    if any(s is None for s in spans):
        times = [_name_time(o.path) for o in good]
        if any(t is None for t in times):
            return [outputs]
        spans, gap = [(t, t) for t in times], MIN_NAME_GAP_US
    order = sorted(range(len(good)), key=lambda i: spans[i])
    groups: list[list[int]] = []
    end = None
    for i in order:
        s, e = spans[i]
        if end is None or s > end + gap:
            groups.append([])
            end = e
        groups[-1].append(i)
        end = max(end, e)
    if len(groups) < 2:
        return [outputs]
    for g in groups:
        c = Counter(r for i in g if (r := _claim(good[i])) is not None)
        if c and max(c.values()) > 1:
            return [outputs]  # a rank twice within one time group: true duplicates, not runs
    if len({o.device_name for o in good if o.device_name}) > 1:
        return [outputs]
    runs = [[good[i] for i in g] for g in groups]
    bounds = []  # each run's file-name times, widened by the gap: where an unreadable file's name puts it
    for run in runs:
        ts = [t for o in run if (t := _name_time(o.path)) is not None]
        bounds.append((min(ts) - MIN_NAME_GAP_US, max(ts) + MIN_NAME_GAP_US) if ts else None)
    for o in outputs:
        if o.error:
            t = _name_time(o.path)
            k = next((k for k, b in enumerate(bounds) if t is not None and b and b[0] <= t <= b[1]), len(runs) - 1)
            runs[k].append(o)
    return runs


def complete(run: list[RankOutput]) -> bool:
    """Every rank of its world has one readable trace (the world from distributedInfo)."""
    good = [o for o in run if not o.error]
    worlds = {o.world_size for o in good if o.world_size}
    if len(worlds) != 1 or len(good) != len(run) or len(good) != (w := worlds.pop()):  # w untrusted: never a range
        return False
    ranks = {_rank(o) for o in good}
    return len(ranks) == w and all(r is not None and 0 <= r < w for r in ranks)


def pick_runs(groups: list[list[RankOutput]], run: str | int, where: str) -> list[int]:
    """0-based indices of the runs to analyse: "newest" (the newest complete run, else the newest: groups are
    oldest first), "all", or a number 1..N; anything else is one line, exit 2."""
    n = len(groups)
    if run == "newest":
        if n == 1:
            return [0]
        done = [k for k in range(n) if complete(groups[k])]
        return [done[-1] if done else n - 1]
    if run == "all":
        return list(range(n))
    k = run if isinstance(run, int) else int(run) if isinstance(run, str) and run.isascii() and run.isdigit() \
        and len(run) <= 9 else None  # by digit count: `²` and 5,000 digits are not a run, nor a traceback
    if k is None:
        raise LlmdiagError(f"--run {str(run)[:40]!r}: expected newest, all or a run number")
    if not 1 <= k <= n:
        raise LlmdiagError(f"--run {k}: the input holds {f'{n} runs (1-{n}, oldest first)' if n > 1 else 'one run'}",
                           where, None if n > 1 else "leave --run out")
    return [k - 1]


def run_infos(runs: list[list[RankOutput]], chosen: int) -> list[RunInfo]:
    """What each run is (files, ranks, start, pids); `chosen` is the 0-based index of the run analysed."""
    return described(runs).infos_for(chosen)


def runs_message(infos: list[RunInfo], runs: list[list[RankOutput]]) -> str:
    """One line: the runs, which one was analysed, how to pick another."""
    return described(runs, infos).message(next(k for k, r in enumerate(infos) if r.analysed))


@dataclass
class Runs:
    """Every run of one input, described once for all the analyses of `--run all`: each analysis described every
    run again before (run infos, completeness, the shared-process test), quadratic in runs (issue 35). What
    differs between the analyses (which run is marked analysed, the warning's few named runs) is O(1) each."""

    infos: list[RunInfo]  # shared by the analyses, none marked analysed: infos_for marks a copy
    last_done: int  # 0-based index of the newest complete run, -1 where none is
    word: str  # "runs", or what the runs are (captures of one process)

    def infos_for(self, chosen: int) -> list[RunInfo]:
        """The runs with `chosen` (0-based) marked analysed: references to the shared entries, one copy. Above
        MAX_RUN_ROWS runs, the two oldest, the analysed one and the newest only, so that R summaries hold O(R)
        entries in all (the newest last: model/runs.run_count reads the count from it)."""
        from llmdiag.diagnose.model.runs import MAX_RUN_ROWS

        n = len(self.infos)
        keep = range(n) if n <= MAX_RUN_ROWS else sorted({0, 1, chosen, *range(n - (MAX_RUN_ROWS - 3), n)})
        return [dataclasses.replace(self.infos[k], analysed=True) if k == chosen else self.infos[k] for k in keep]

    def message(self, chosen: int) -> str:
        """The warning of the analysis of run `chosen` (0-based): the same line runs_message always wrote."""
        from llmdiag.diagnose.model.runs import MAX_RUN_ROWS

        infos = self.infos
        listed = "lists each" if len(infos) <= MAX_RUN_ROWS else f"lists {MAX_RUN_ROWS} of them"
        parts = []
        for r in _shown(infos, chosen):
            if isinstance(r, int):
                parts.append(f"… {r} more run{'s' if r != 1 else ''} (the summary's `runs` {listed})")
                continue
            pid = f", pids {_span_text(r.pids)}" if r.pids else ""
            ranks = f"ranks {_span_text(r.ranks)}" if r.ranks else "no rank numbers"
            parts.append(f"run {r.number}: {r.files} file{'s' if r.files != 1 else ''}, {ranks}"
                         f"{f' of {r.world_size}' if r.world_size else ''}, started {r.start or 'at an unknown time'}{pid}")
        number, n = chosen + 1, len(infos)
        newest = " (the newest)" if number == n else ""
        if not newest and chosen == self.last_done:
            newest = " (the newest complete run)"
        other = 2 if number == 1 else 1
        from llmdiag.diagnose.model.runs import RUNS_PREFIX

        return (f"{RUNS_PREFIX}{n} {self.word}, told apart by their time spans: {'; '.join(parts)}. Analysed run "
                f"{number}{newest}; `--run {other}` analyses another, `--run all` each")


def described(runs: list[list[RankOutput]], infos: list[RunInfo] | None = None) -> Runs:
    """The runs of one input described (see Runs); `infos` where the caller has them already."""
    from llmdiag.diagnose.model.runs import RunInfo  # only an input of several runs gets here

    if infos is None:
        infos = []
        for k, run in enumerate(runs):
            good = [o for o in run if not o.error]
            spans = [s for o in good if (s := _span(o)) is not None]
            starts = [s for s, _ in spans] or [t for o in good if (t := _name_time(o.path)) is not None]
            start = min(starts) if starts else None
            worlds = Counter(o.world_size for o in good if o.world_size)
            pids = sorted({int(m.group("pid")) for o in run if (m := KINETO_NAME.match(os.path.basename(o.path)))})
            infos.append(RunInfo(k + 1, len(run),
                                 sorted({r for o in good if not _rankless(o) and (r := _rank(o)) is not None}),
                                 worlds.most_common(1)[0][0] if worlds else None, _when(start) if start else "", start,
                                 max((e for _, e in spans), default=None), pids, False))
    done = [complete(run) for run in runs]
    hosts_pids = [{(m.group("host"), m.group("pid")) for o in run if (m := KINETO_NAME.match(os.path.basename(o.path)))}
                  for run in runs]
    same = sum(map(len, hosts_pids)) > len(set().union(*hosts_pids))  # a process in two runs (linear in runs)
    workers = [{w for o in run if _rankless(o) and (w := _worker(o.path))} for run in runs]
    one = len(set().union(*workers)) == 1 and all(workers) and all(_rankless(o) for r in runs for o in r if not o.error)
    word = ("captures of the same process at different times (no rank in the traces: one process profiled more "
            f"than once, worker `{_short(next(iter(workers[0])))}`)" if one else
            "captures of the same processes (the same run profiled more than once)" if same else "runs")
    return Runs(infos, max((k for k, d in enumerate(done) if d), default=-1), word)


SHOWN_RUNS = 8  # runs named in the one-line warning: 10,000 runs made a line of 10,000 parts, once per run


def _shown(infos: list[RunInfo], chosen: int) -> list[RunInfo | int]:
    """The runs the warning names: all up to SHOWN_RUNS, else the two oldest, the analysed one (`chosen`,
    0-based) and the newest ones, with the count of those left out between them."""
    if len(infos) <= SHOWN_RUNS:
        return list(infos)
    keep = sorted({0, 1, chosen, *range(len(infos) - (SHOWN_RUNS - 3), len(infos))})
    out: list[RunInfo | int] = []
    for prev, k in zip([-1] + keep, keep):
        if k - prev > 1:
            out.append(k - prev - 1)
        out.append(infos[k])
    return out


def _short(name: str, n: int = 60) -> str:
    """A file-name part (untrusted) cut for the one-line message; outputs escape it."""
    return name if len(name) <= n else name[: n - 1] + "…"


def _span_text(xs: list[int]) -> str:
    from llmdiag.diagnose.model.format import ranges

    return ranges(sorted(xs))


def _rank(o: RankOutput) -> int | None:
    return o.rank if o.rank is not None else rank_from_name(o.path)


def _rankless(o: RankOutput) -> bool:
    """The trace names no rank (no distributedInfo rank, none in its file name): its rank number, if any, was
    given by file order when its run was assembled."""
    return not (isinstance(o.distributed, dict) and o.distributed.get("rank") is not None) \
        and rank_from_name(o.path) is None


def _claim(o: RankOutput) -> tuple | None:
    """What a file is one copy of: its rank, else the worker (process) its handler-written name names."""
    if (r := _rank(o)) is not None:
        return ("rank", r)
    w = _worker(o.path)
    return ("worker", w) if w else None


def _worker(path: str) -> str | None:
    m = HANDLER_NAME.match(os.path.basename(path))
    return m.group("worker") if m else None


def _span(o: RankOutput) -> tuple[float, float] | None:
    """The wall-clock span of the rank's analysed steps, epoch µs; None where the trace has no wall clock."""
    if o.metrics is None or (c := wall_clock(o)) is None:
        return None
    st = o.metrics.steps
    if not st:
        return c, c
    return c + min(s.start_ms for s in st) * 1e3, c + max(s.start_ms + s.time_ms for s in st) * 1e3


def _name_time(path: str) -> float | None:
    """The write time (epoch µs) in a Kineto file name `host_PID.NS.pt.trace.json(.gz)`, if plausible."""
    m = KINETO_NAME.match(os.path.basename(path))
    if m:
        us = int(m.group("ns")) / 1e3
    elif (h := HANDLER_NAME.match(os.path.basename(path))) and len(h.group("t")) == 13:
        us = int(h.group("t")) * 1e3  # epoch ms
    else:
        return None
    return us if 1e15 < us < 4e15 else None


def _when(us: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return ""
