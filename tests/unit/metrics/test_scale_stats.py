"""The straggler rule's binomial tail at every size: exact against rational arithmetic for moderate n, against
mpmath's regularised incomplete beta at n up to 10^6, and never an OverflowError (math.comb(n, i) * p**i
overflowed a float past n ≈ 1,000: 256 ranks × 5 steps of collectives ended `analyze` in a traceback)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from llmdiag.diagnose.metrics.job.stragglers import binom_tail


def _exact(k: int, n: int, p: Fraction) -> Fraction:
    return sum((comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)), Fraction(0))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 40, 300, 1200])
@pytest.mark.parametrize("p", [Fraction(1, 2), Fraction(1, 3), Fraction(1, 256), Fraction(9, 10)])
def test_binom_tail_matches_exact_rational_sum(n, p):
    mean = int(n * p)
    for k in sorted({0, 1, 2, mean, mean + 1, mean + 3, n // 2, n - 1, n, n + 1} - {-1}):
        want = float(_exact(k, n, p)) if k <= n else 0.0
        got = binom_tail(k, n, float(p))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (k, n, p)


def test_binom_tail_known_values():
    assert binom_tail(0, 10, 0.3) == 1.0
    assert binom_tail(11, 10, 0.3) == 0.0
    assert binom_tail(10, 10, 0.5) == pytest.approx(2.0**-10, rel=1e-12)
    assert binom_tail(1, 10, 0.5) == pytest.approx(1 - 2.0**-10, rel=1e-12)
    assert binom_tail(3, 3, 1 / 3) == pytest.approx(1 / 27, rel=1e-12)


@pytest.mark.parametrize("n,ranks", [(5_000, 256), (80_000, 2048), (10**6, 16384), (10**6, 1024)])
def test_binom_tail_large_n_against_incomplete_beta(n, ranks):
    """P(X ≥ k) = I_p(k, n − k + 1), computed by mpmath at 50 digits: an independent route."""
    import mpmath
    mpmath.mp.dps = 50
    p = 1 / ranks
    mean = n * p
    for k in {1, int(mean), int(mean) + 1, int(mean + 3 * mean**0.5) + 1, int(mean * 2) + 5, n // 2, n}:
        want = float(mpmath.betainc(k, n - k + 1, 0, mpmath.mpf(1) / ranks, regularized=True))
        got = binom_tail(k, n, p)
        assert 0.0 <= got <= 1.0
        assert got == pytest.approx(want, rel=1e-8, abs=1e-300), (k, n, ranks)


def test_binom_tail_never_overflows_and_is_monotone():
    for n in (1_000, 50_000, 10**6):
        p = 1 / 16384
        prev = 1.0
        for k in range(0, n + 1, max(1, n // 97)):
            t = binom_tail(k, n, p)
            assert 0.0 <= t <= prev + 1e-15
            prev = t
