"""`--ranks 0-3,8` as ranges, never as a list: `0-200000000` was materialised (3 GB, then a MemoryError
traceback) before any check, and a 5,000-digit rank was a ValueError traceback (Python's int() refuses more
than 4,300 digits). Each number is read by its digit count first, bounded by the largest world llmdiag reads
(model/dims.py MAX_WORLD); the ranges are merged, so the size, the largest rank and membership are arithmetic.
Iterating it is the caller's choice, after `len()` was checked against the input (cli/analyze.py
`_ranks_fit`: never more ranks than trace files)."""

from __future__ import annotations

import bisect

from llmdiag.diagnose.errors import LlmdiagError, printable
from llmdiag.diagnose.model.dims import MAX_WORLD

MAX_TEXT = 100_000  # characters of one --ranks value: ~10,000 ranges, parsed in milliseconds
_DIGITS = len(str(MAX_WORLD))


def small_int(text: str, what: str, top: int = MAX_WORLD) -> int:
    """`text` as an integer 0..top, read only when it is ASCII digits of a plausible length (`²`, `١`, 5,000
    digits: one line, exit 2)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t.lstrip("0")) > len(str(top)) or int(t) > top:
        shown = printable(t if len(t) <= 40 else t[:40] + f"… ({len(t)} characters)")
        raise LlmdiagError(f"{what} {shown!r} is not a whole number from 0 to {top}")
    return int(t)


class RankSet:
    """Sorted, disjoint, inclusive (lo, hi) ranges of rank numbers."""

    def __init__(self, spans: list[tuple[int, int]]):
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self.spans = merged
        self._los = [lo for lo, _ in merged]

    @classmethod
    def parse(cls, text: str) -> RankSet:
        """'0-3,8' -> {0..3, 8}; a bad list is LlmdiagError in one line (exit 2)."""
        if len(text) > MAX_TEXT:
            raise LlmdiagError(f"--ranks is {len(text)} characters long (at most {MAX_TEXT}); give ranges like 0-3")
        spans = []
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            a = small_int(lo, "--ranks: rank")
            b = small_int(hi, "--ranks: rank") if dash else a
            if b < a:
                raise LlmdiagError(f"--ranks: {printable(part.strip())!r} is not a rank or a range like 0-3")
            spans.append((a, b))
        return cls(spans)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.spans)

    def __bool__(self) -> bool:
        return bool(self.spans)

    def __contains__(self, r: object) -> bool:
        if type(r) is not int:
            return False
        k = bisect.bisect_right(self._los, r) - 1
        return k >= 0 and r <= self.spans[k][1]

    def __iter__(self):
        for lo, hi in self.spans:
            yield from range(lo, hi + 1)

    def max(self) -> int:
        return self.spans[-1][1]

    def __str__(self) -> str:
        return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in self.spans)

    def __repr__(self) -> str:
        return f"RankSet({self})"
