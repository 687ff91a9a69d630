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


def _launch_trace(rng, n_ops: int, n_calls: int, n_dev: int):
    """Host ops (kind 0), runtime calls (RUNTIME) and device events (stream >= 0), correlation ids repeated on
    purpose (two calls, or several kernels, sharing one) and some device events matching no call."""
    from llmdiag.diagnose.io.trace import RUNTIME

    n = n_ops + n_calls + n_dev
    ts = np.concatenate([rng.integers(0, 1000, n_ops), rng.integers(0, 1000, n_calls), rng.integers(0, 2000, n_dev)])
    dur = np.concatenate([rng.choice([0, 5, 40, 300], n_ops), np.ones(n_calls + n_dev, np.int64)])
    corr = np.concatenate([np.full(n_ops, -1), rng.integers(0, n_calls, n_calls), rng.integers(-1, n_calls + 5, n_dev)])
    kind = np.concatenate([np.zeros(n_ops, np.int64), np.full(n_calls, RUNTIME), np.zeros(n_dev, np.int64)])
    stream = np.concatenate([np.full(n_ops + n_calls, -1), rng.integers(0, 3, n_dev)])
    t = SimpleNamespace(ts=ts.astype(np.int64), dur=dur.astype(np.int64), corr=corr.astype(np.int64), stream=stream,
                        thread=rng.integers(0, 2, n).astype(np.int64), comm_args={})
    return t, np.arange(n_ops), kind


def _launching_ops_loop(t, ops, kind, score=None):
    """The per-device-event loop launching_ops had: the independent answer."""
    from llmdiag.diagnose.io.trace import RUNTIME

    dev = np.flatnonzero((t.stream >= 0) & (t.corr >= 0))
    rt = np.flatnonzero((kind == RUNTIME) & (t.corr >= 0))
    rt = rt[np.isin(t.corr[rt], t.corr[dev]) & np.isin(t.thread[rt], t.thread[ops])]
    if not len(rt) or not len(dev):
        return {}
    best = host_ops._explaining_op(t, ops, rt, score) if score else host_ops._innermost_op(t, ops, rt)
    corr_op = {int(t.corr[r]): o for r, o in best.items()}
    return {d: corr_op[c] for d, c in zip(dev.tolist(), t.corr[dev].tolist()) if c in corr_op}


@pytest.mark.parametrize("seed", range(25))
def test_launching_ops_as_the_loop(seed):
    rng = np.random.default_rng(100 + seed)
    t, ops, kind = _launch_trace(rng, int(rng.integers(1, 80)), int(rng.integers(1, 120)), int(rng.integers(1, 200)))
    for score in (None, lambda o: o % 3):
        got = host_ops.launching_ops(t, ops, kind, score)
        assert list(got.items()) == list(_launching_ops_loop(t, ops, kind, score).items())
        assert all(type(k) is int and type(v) is int for k, v in got.items())


@pytest.mark.parametrize("seed", range(20))
def test_innermost_op_is_the_sweeps_answer(seed):
    """Both phases together (the latest op still running, else _innermost_left) answer what the sweep does for
    every call (the order differs: the first phase's calls come first)."""
    rng = np.random.default_rng(500 + seed)
    t, ops, rt = _trace(rng, int(rng.integers(1, 300)), int(rng.integers(1, 200)))
    assert host_ops._innermost_op(t, ops, rt) == host_ops._explaining_op(t, ops, rt, lambda o: 0)
