"""model/stats.py's fmean and median give the standard library's answers bit for bit (the standard module is the
independent answer), on lists, tuples, generators, ints, floats, NaN and infinities, even and odd lengths."""

from __future__ import annotations

import math
import random
import statistics as std

import pytest

from llmdiag.diagnose.model import stats


def _samples():
    rng = random.Random(7)
    for n in [1, 2, 3, 4, 5, 10, 11, 100, 101]:
        yield [rng.random() * 1e3 for _ in range(n)]
        yield [rng.randint(-50, 50) for _ in range(n)]
        yield [rng.choice([0.1, 0.2, 0.3, 1e-12, 1e12]) for _ in range(n)]
    yield [math.inf, 1.0]
    yield [1, 2.5, True]


@pytest.mark.parametrize("xs", list(_samples()))
def test_same_bits_as_statistics(xs):
    for f in ("fmean", "median"):
        want, got = getattr(std, f)(list(xs)), getattr(stats, f)(list(xs))
        assert type(got) is type(want) and repr(got) == repr(want)
        assert repr(getattr(stats, f)(tuple(xs))) == repr(want)
        assert repr(getattr(stats, f)(x for x in xs)) == repr(want)


def test_nan_and_empty_and_the_rest_delegated():
    assert math.isnan(stats.fmean([1.0, math.nan]))
    for f in (stats.fmean, stats.median):
        with pytest.raises(std.StatisticsError):
            f([])
        with pytest.raises(std.StatisticsError):
            f(iter([]))
    assert stats.fmean([1, 2, 3], [1, 1, 2]) == std.fmean([1, 2, 3], [1, 1, 2])
    assert stats.stdev([1.0, 2.0, 4.0]) == std.stdev([1.0, 2.0, 4.0]) and stats.StatisticsError is std.StatisticsError
