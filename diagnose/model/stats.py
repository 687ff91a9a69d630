"""`statistics.fmean` and `statistics.median` as the standard library computes them, without importing it.

`import statistics` also imports fractions, decimal and random (~4 ms of every `llmdiag analyze` process, paid
before a byte is read: docs/benchmarks.md, "Whole command"), while the analysis, the rules and the report call
only these two. The code is the standard library's (Python 3.11, no weights): the same float sum (`math.fsum`),
the same division, the same middle of the sorted data, so every number is the same to the bit. Anything else
(`StatisticsError`, `stdev`, ...) is the standard module's, imported on first use:
`from llmdiag.diagnose.model import stats as statistics` keeps every `statistics.x` call as it was.
"""

from __future__ import annotations

from math import fsum
from typing import Any


def fmean(data, weights=None) -> float:
    if weights is not None:
        import statistics

        return getattr(statistics, "fmean")(data, weights)  # weights: Python 3.11+
    try:
        n = len(data)
    except TypeError:  # an iterator: counted as it is summed
        n = 0

        def count(iterable):
            nonlocal n
            for n, x in enumerate(iterable, start=1):  # n: the count, read after the sum
                yield x

        data = count(data)
    total = fsum(data)
    if not n:
        import statistics

        raise statistics.StatisticsError("fmean requires at least one data point")
    return total / n


def median(data):
    data = sorted(data)
    n = len(data)
    if n == 0:
        import statistics

        raise statistics.StatisticsError("no median for empty data")
    if n % 2 == 1:
        return data[n // 2]
    i = n // 2
    return (data[i - 1] + data[i]) / 2


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # the import system's own look-ups (`from ..stats import median` asks for `__path__`)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import statistics

    return getattr(statistics, name)
