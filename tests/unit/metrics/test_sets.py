"""diagnose/metrics/rank/sets.py gives np.unique's and np.isin's answers exactly (it replaces them only to skip the
numpy.ma import they cost), on integers of every width and on the non-integer input it hands back to numpy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.metrics.rank.sets import distinct, member

ints = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300)
small = st.lists(st.integers(-5, 40), max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.one_of(ints, small), st.one_of(ints, small), st.sampled_from([np.int64, np.int32, np.int16]))
def test_same_answer_as_numpy(a, b, dtype):
    info = np.iinfo(dtype)
    a = np.array([x for x in a if info.min <= x <= info.max], dtype)
    b = np.array([x for x in b if info.min <= x <= info.max], np.int64)
    assert np.array_equal(distinct(a), np.unique(a)) and distinct(a).dtype == np.unique(a).dtype
    assert np.array_equal(member(a, b), np.isin(a, b))
    assert np.array_equal(member(b, a), np.isin(b, a))


def test_non_integers_go_to_numpy():
    x = np.array([2.5, np.nan, 1.0, np.nan, 2.5])
    assert np.array_equal(distinct(x), np.unique(x), equal_nan=True)
    assert np.array_equal(member(x, [2.5]), np.isin(x, [2.5]))


def test_an_analysis_never_imports_numpy_ma(tmp_path):
    """The point of the module: a whole analysis (rules included) of a GPU trace leaves numpy.ma unloaded."""
    from tests.gen.builder import gpu_rank

    for r in range(2):
        gpu_rank(r, world_size=2, steps=3).write(tmp_path / f"rank{r}.json")
    code = ("import sys; from llmdiag.diagnose.analyze import analyze_path; "
            f"a = analyze_path({str(tmp_path)!r}, jobs=1); assert len(a.ranks) == 2; "
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
