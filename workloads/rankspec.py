"""The grammar of the test knobs that name one rank: `rank:<R>:<VALUE>[:<TAIL>]` (`--inject-fault
rank:1:raise:3`, `--inject-slow rank:0:2:backward`). One parser, so both knobs refuse the same bad ranks.
Torch-free.
"""

from __future__ import annotations

import re
from typing import Callable

from llmdiag.workloads.errors import WorkloadError

DIGITS = re.compile(r"[0-9]{1,7}")  # digits only: int() also reads "1_0" (10), " 1", "+1"


def parse(spec: str | None, world: int | None, what: str, grammar: str, value_ok: Callable[[str], bool],
          tail_ok: Callable[[str], bool]) -> tuple[int, str, str | None] | None:
    """(rank, value, tail or None) of `spec`, None when it is empty; a WorkloadError naming `what` (the knob)
    when it is not the grammar or, with `world` given, names a rank outside it (a knob armed on no rank would
    be recorded as armed)."""
    if not spec:
        return None
    parts = spec.split(":")
    if (parts[0] != "rank" or len(parts) not in (3, 4) or not DIGITS.fullmatch(parts[1]) or not value_ok(parts[2])
            or (len(parts) == 4 and not tail_ok(parts[3]))):
        raise WorkloadError(f"bad {what} spec {spec!r}", hint=grammar)
    rank = int(parts[1])
    if world is not None and rank >= world:
        raise WorkloadError(f"{what} spec {spec!r}: rank {rank} is outside the world of {world} ranks",
                            hint=f"a rank from 0 to {world - 1}")
    return rank, parts[2], parts[3] if len(parts) == 4 else None
