"""host_ops.launching_ops answers a repeated question from memory (issue 37: op_kernels and data_movement both
asked for every host op's kernels, precision twice and roofline for the same GEMM ops: 4-12 ms a real trace).
The answer must be the one computed, a copy the caller may change, and never another trace's."""

from __future__ import annotations

import os

import numpy as np
import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.io.trace import CPU_OP
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.classify import classify
from tests.conftest import REAL


def _trace():
    t = load_trace(os.path.join(REAL, "hta", "nccl_data.json.gz"))
    classify(t)
    return t


@pytest.mark.real("hta/nccl_data.json.gz")
def test_a_repeated_question_is_answered_once_with_a_copy(monkeypatch):
    t, other = _trace(), _trace()  # the same events in another trace object (classify asks with a score)
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    want = host_ops._launching_ops(t, ops, t.kind)
    assert len(want) > 1000  # nccl_data's kernels have launching ops: the memo has something to keep
    calls = []
    real = host_ops._launching_ops
    monkeypatch.setattr(host_ops, "_launching_ops", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = host_ops.launching_ops(t, ops, t.kind)
    first.clear()  # a caller changing its answer changes nobody else's
    again = host_ops.launching_ops(t, ops.copy(), t.kind)
    assert again == want and len(calls) == 1
    assert host_ops.launching_ops(t, ops[:1], t.kind) == real(t, ops[:1], t.kind) and len(calls) == 2
    assert host_ops.launching_ops(other, ops, other.kind) == want and len(calls) == 3  # another trace: afresh
    other.kind = other.kind.copy()  # kinds replaced (classified again): asked afresh
    host_ops.launching_ops(other, ops, other.kind)
    assert len(calls) == 4
    host_ops.launching_ops(other, ops, other.kind, score=lambda o: 0)  # a score: never from memory
    assert len(calls) == 5


@pytest.mark.real("hta/nccl_data.json.gz")
def test_gemm_codes_asked_twice_about_one_mask_are_computed_once(monkeypatch):
    """metrics/rank/kernels.py asks gemm_time_by_precision, then fp32_on_path_frac, about the same mask."""
    from llmdiag.diagnose.io.trace import COMPUTE
    from llmdiag.diagnose.metrics.rank import precision

    t = _trace()
    compute = (t.kind == COMPUTE) & (t.stream >= 0)
    want = precision._gemm_codes_of(t, compute)
    assert len(want[0]) > 10  # nccl_data has GEMM kernels
    calls = []
    real = precision._gemm_codes_of
    monkeypatch.setattr(precision, "_gemm_codes_of", lambda *a: calls.append(1) or real(*a))
    first = precision._gemm_codes(t, compute)
    first[1][:] = -1  # a caller writing into its arrays changes nobody else's
    again = precision._gemm_codes(t, compute.copy())
    assert len(calls) == 1 and np.array_equal(again[0], want[0]) and np.array_equal(again[1], want[1])
    assert again[2] == want[2]
    half = compute.copy()
    half[len(half) // 2:] = False
    assert np.array_equal(precision._gemm_codes(t, half)[0], real(t, half)[0]) and len(calls) == 2
