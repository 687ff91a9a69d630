"""Which first calls of an op's shape are one-time setup, and which only look like it.

`idle.stretches[].later_calls_ms` says a stretch's op is the rank's first call of its name and Input Dims and its
later calls are far shorter (metrics/rank/idle_stretch.py): cuBLASLt setting up a GEMM shape pays once. But the
capture's first call need not be the process's: profiled from step 1009 of a long run, an op's "first call" ran a
thousand times before. The events then show the stall again in other steps. A first-call stretch is one-time only
where they do not: no later call of the same op stalls the device as long in another step (`same op`), and fewer
than half the other steps hold a stall as long under one host op that is no first call (`most steps`: the step
pays such a stall anyway, so one under a first call is not told apart from it). hta/trace_diff/control: step
1009's 2.37 ms under `MulBackward0` (later calls 0.04 ms) comes back as 2.10 ms under the same op in step 1010,
2.27 ms under `BinaryCrossEntropyWithLogitsBackward0` in 1011 and 1.68 ms under `aten::mm` in 1014: not one-time.
Only the stretches the metric keeps (the longest) are looked at: a recurrence among shorter ones is not seen, and
the stretch stays one-time (the claim the events allow).

A stall under an op the capture calls only once has no later call to compare with, but the events can still show
it is first use: a kernel loaded lazily at its first launch or a module load starting in the stall
(`stretches[].first_use`) happens once per process. b200_vllm's lm_head `aten::mm` (1.67 ms idle, one call) holds
a `Lazy Function Loading`: one-time by that event, under the same recurrence test."""

from __future__ import annotations

RECUR = 0.5  # another step's stall at least this share of the first call's idle is "as long"


def _comparable(r, s) -> list:
    """Host stalls of other steps, no first call themselves, at least RECUR of `s`'s idle."""
    return [x for x in r.idle.stretches if x.cause == "host" and not first_call(x) and x.step != s.step
            and x.idle_ms >= RECUR * s.idle_ms]


def recurs(r, s) -> bool:
    """The first-call stretch `s` comes back in other steps (same op, or most steps): not a one-time setup."""
    got = _comparable(r, s)
    n = r.nsteps or 0
    return any(x.op == s.op for x in got) or (n > 1 and 2 * len({x.step for x in got}) >= n - 1)


def first_call(s) -> bool:
    """The stretch's op is a first call: its later calls are far shorter, or first-use loading starts in it."""
    return s.later_calls_ms is not None or s.first_use > 0


def one_time(r, s) -> bool:
    """A host stretch under the first call of an op's shape that the other steps do not repeat."""
    return s.cause == "host" and first_call(s) and not recurs(r, s)
