"""Test knob: a planted straggler. `llmdiag run --inject-slow rank:<R>:<FACTOR>[:forward|backward]` makes rank
R's compute (or only its forward or backward) take FACTOR times as long: after each piece of compute it
measured, it runs (FACTOR − 1) times that long of real matrix products inside `llmdiag/inject_slow`, so the
trace shows compute, not an idle gap. The option is recorded in the manifest (`options.inject_slow`), the
known answer of a straggler corpus.
"""

from __future__ import annotations

import contextlib
import re
import time

from llmdiag.workloads.errors import WorkloadError

KINDS = ("forward", "backward")
MAX_FACTOR = 100.0
_active: tuple[str | None, float] | None = None  # (kind or None for all compute, factor) on this rank


_RANK = re.compile(r"[0-9]{1,7}")  # digits only: int() also reads "1_0" (10), " 1", "+1"
_FACTOR = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")  # float() also reads "1_0", "nan", "1e1"


def parse(spec: str | None, world: int | None = None) -> tuple[int, float, str | None] | None:
    """(rank, factor, kind or None) from `rank:<R>:<FACTOR>[:forward|backward]`, R written as digits and inside
    the world when it is given (a straggler planted on no rank would be recorded as planted)."""
    if not spec:
        return None
    parts = spec.split(":")
    hint = f"rank:<R>:<FACTOR 1..{MAX_FACTOR:g}>[:forward|backward]"
    if (parts[0] != "rank" or len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in KINDS)
            or not _RANK.fullmatch(parts[1]) or not _FACTOR.fullmatch(parts[2])
            or not 1.0 <= float(parts[2]) <= MAX_FACTOR):
        raise WorkloadError(f"bad --inject-slow spec {spec!r}", hint=hint)
    rank = int(parts[1])
    if world is not None and rank >= world:
        raise WorkloadError(f"--inject-slow {spec!r}: rank {rank} is outside the world of {world} ranks",
                            hint=f"a rank from 0 to {world - 1}")
    return rank, float(parts[2]), parts[3] if len(parts) == 4 else None


def install(rank: int, spec: str | None) -> None:
    """Arm the knob on this rank if the spec names it (called once per rank at start-up)."""
    global _active
    p = parse(spec)
    _active = (p[2], p[1]) if p and p[0] == rank and p[1] > 1.0 else None


@contextlib.contextmanager
def compute(kind: str, device=None):
    """Around one piece of `kind` compute ("forward"/"backward"): slowed by the factor on the armed rank."""
    if _active is None or (_active[0] is not None and _active[0] != kind):
        yield
        return
    import torch

    sync = device is not None and getattr(device, "type", "cpu") == "cuda"
    if sync:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    yield
    if sync:
        torch.cuda.synchronize(device)
    extra = (_active[1] - 1.0) * (time.perf_counter() - t0)
    _burn(extra, device)


def _burn(seconds: float, device) -> None:
    import torch
    from torch.profiler import record_function

    with record_function("llmdiag/inject_slow"), torch.no_grad():
        a = torch.ones(64, 64, device=device)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            a = torch.mm(a, a).clamp_(-1.0, 1.0)
            if device is not None and getattr(device, "type", "cpu") == "cuda":
                torch.cuda.synchronize(device)
