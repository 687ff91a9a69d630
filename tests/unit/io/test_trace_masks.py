"""RankTrace's masks (kind_mask by comparisons, name_mask/cat_mask by comparisons or np.take) give np.isin's
answer, the independent one, for few and many ids, on random columns."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmdiag.diagnose.io.trace import KIND_NAMES, RankTrace


def _trace(rng, n: int):
    names = [f"op{i}" for i in range(40)]
    cats = [f"cat{i}" for i in range(12)]
    t = SimpleNamespace(names=names, cats=cats, name=rng.integers(0, len(names), n).astype(np.int32),
                        cat=rng.integers(0, len(cats), n).astype(np.int16),
                        kind=rng.integers(0, len(KIND_NAMES), n).astype(np.int8))
    t.name_ids = lambda predicate, among=None: RankTrace.name_ids(t, predicate, among)
    return t


@pytest.mark.parametrize("seed", range(6))
def test_masks_are_isin(seed):
    rng = np.random.default_rng(seed)
    t = _trace(rng, int(rng.integers(1, 5000)))
    for k in range(0, 8):
        kinds = tuple(int(x) for x in rng.choice(len(KIND_NAMES), k, replace=False))
        assert np.array_equal(RankTrace.kind_mask(t, *kinds), np.isin(t.kind, kinds))
        wanted = {f"op{int(i)}" for i in rng.choice(40, k + 1, replace=False)}
        among = rng.random(len(t.name)) < 0.5
        ids = [i for i, n in enumerate(t.names) if n in wanted]
        got = RankTrace.name_mask(t, wanted.__contains__, among)
        assert np.array_equal(got, np.isin(t.name, ids) & among)
        assert np.array_equal(RankTrace.name_mask(t, wanted.__contains__), np.isin(t.name, ids))
        cats = {f"cat{int(i)}" for i in rng.choice(12, min(k + 1, 12), replace=False)}
        cids = [i for i, c in enumerate(t.cats) if c in cats]
        assert np.array_equal(RankTrace.cat_mask(t, *cats), np.isin(t.cat, cids))
    assert np.array_equal(RankTrace.kind_mask(t, -1), t.kind == len(KIND_NAMES) - 1)  # as the table's index
    with pytest.raises(IndexError):
        RankTrace.kind_mask(t, len(KIND_NAMES))
