"""host_ops._innermost_left (binary lifting over the ops' end times) against the stack sweep it replaced
(`_explaining_op` with every op scored alike), on random host ops: nested, overlapping without nesting, equal
starts, zero-length, on two threads, with calls before, inside, between and after them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank import host_ops


def _trace(rng, n_ops: int, n_calls: int):
    ts = np.concatenate([rng.integers(0, 1000, n_ops), rng.integers(-50, 1100, n_calls)]).astype(np.int64)
    dur = np.concatenate([rng.choice([0, 1, 5, 40, 300], n_ops), np.ones(n_calls, np.int64)]).astype(np.int64)
    thread = rng.integers(0, 2, n_ops + n_calls).astype(np.int64)
    return SimpleNamespace(ts=ts, dur=dur, thread=thread), np.arange(n_ops), np.arange(n_ops, n_ops + n_calls)


@pytest.mark.parametrize("seed", range(40))
def test_same_answers_and_order_as_the_sweep(seed):
    rng = np.random.default_rng(seed)
    t, ops, rt = _trace(rng, int(rng.integers(1, 300)), int(rng.integers(1, 200)))
    got = host_ops._innermost_left(t, ops, rt)
    want = host_ops._explaining_op(t, ops, rt, lambda o: 0)
    assert list(got.items()) == list(want.items())


def test_hand_case():
    # op 0 [0, 100], op 1 [10, 20] (inside 0), op 2 [50, 50] (zero length); calls at 15, 30, 50, 150
    t = SimpleNamespace(ts=np.array([0, 10, 50, 15, 30, 50, 150]), dur=np.array([100, 10, 0, 1, 1, 1, 1]),
                        thread=np.zeros(7, np.int64))
    got = host_ops._innermost_left(t, np.arange(3), np.arange(3, 7))
    assert got == {3: 1, 4: 0, 5: 2}  # 15 in op 1; 30 back in op 0; 50 on the zero-length op 2; 150 in none
