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

from llmdiag.workloads import rankspec

KINDS = ("forward", "backward")
MAX_FACTOR = 100.0
_active: tuple[str | None, float] | None = None  # (kind or None for all compute, factor) on this rank


_FACTOR = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")  # float() also reads "1_0", "nan", "1e1"


def parse(spec: str | None, world: int | None = None) -> tuple[int, float, str | None] | None:
    """(rank, factor, kind or None) from `rank:<R>:<FACTOR>[:forward|backward]` (workloads/rankspec.py)."""
    p = rankspec.parse(spec, world, "--inject-slow", f"rank:<R>:<FACTOR 1..{MAX_FACTOR:g}>[:forward|backward]",
                       lambda f: bool(_FACTOR.fullmatch(f)) and 1.0 <= float(f) <= MAX_FACTOR, KINDS.__contains__)
    return None if p is None else (p[0], float(p[1]), p[2])


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
