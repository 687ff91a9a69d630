"""Frequent kernel sequences (diagnose.metrics.kernel_sequences) against answers the tests compute themselves: a
generated trace where one top-level op launches pow, mean, rsqrt, mul N times per step among other kernels, its
silent twin with kernels drawn at random (no sequence repeats up to the floor), and the cap on distinct n-grams."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import numpy as np
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank import kernel_sequences as ks
from tests.gen.builder import TraceBuilder

STEPS, CALLS, STEP_US = 3, 5, 10_000
NORM = ["pow_kernel", "mean_kernel", "rsqrt_kernel", "mul_kernel"]


def _trace(pick) -> tuple[TraceBuilder, list[tuple[str, list[str], list[int]]]]:
    """Per step CALLS × (MyRMSNorm launching pick(call) through child aten ops, then aten::linear launching gemm
    and pick's bias kernel); returns the builder and every (top-level op, kernel names, durations µs) launched."""
    b = TraceBuilder(rank=0, world_size=1)
    launched = []
    for s in range(STEPS):
        k0 = s * STEP_US
        b.step(s + 1, k0, k0 + STEP_US)
        h, d = k0 + 10, k0 + 5000  # host clock, device clock
        for c in range(CALLS):
            names = pick(s, c)
            durs = [3 + (s + c + j) % 4 for j in range(len(names))]
            b.cpu_op("MyRMSNorm", h, 10 * len(names) + 5)
            for j, (n, du) in enumerate(zip(names, durs)):
                b.cpu_op("aten::" + n.split("_")[0], h + 1 + 10 * j, 8)
                b.kernel(n, d, du, launch_at=h + 2 + 10 * j)
                d += du + 1
            launched.append(("MyRMSNorm", names, durs))
            h += 10 * len(names) + 20
            b.cpu_op("aten::linear", h, 30)
            b.kernel("gemm_kernel", d, 40, launch_at=h + 2)
            bias = pick(s, c + 100)[0]
            b.kernel(bias, d + 41, 2, launch_at=h + 5)
            launched.append(("aten::linear", ["gemm_kernel", bias], [40, 2]))
            h, d = h + 40, d + 50
    return b, launched


def _analyze(tmp_path, b):
    d = tmp_path / "run"
    b.write(d / "rank0.json")
    return analyze_path(str(d), rules=False, jobs=1)


def test_repeated_sequence_found(tmp_path):
    b, launched = _trace(lambda s, c: NORM if c < 100 else ["bias_kernel"])
    kv = _analyze(tmp_path, b).kernel_views
    norm = [x for x in launched if x[0] == "MyRMSNorm"]
    lin = [x for x in launched if x[0] == "aten::linear"]
    total_us = sum(sum(du) for _, _, du in launched)
    want_norm_ms = sum(sum(du) for _, _, du in norm) / 1e3
    want = [("aten::linear", ["gemm_kernel", "bias_kernel"], 42 * len(lin) / 1e3), ("MyRMSNorm", NORM, want_norm_ms)]
    want.sort(key=lambda w: -w[2])  # the most kernel time first
    rows = kv.sequences
    assert [(r.op, r.kernels) for r in rows] == [w[:2] for w in want]
    r = next(r for r in rows if r.op == "MyRMSNorm")  # its 2- and 3-kernel pieces occur only inside it: not listed
    assert (r.count, r.ranks) == (STEPS * CALLS, 1)
    assert r.count_per_step == pytest.approx(CALLS)
    assert r.total_ms == pytest.approx(want_norm_ms) and r.ms_per_step == pytest.approx(want_norm_ms / STEPS)
    assert r.mean_us == pytest.approx(want_norm_ms * 1e3 / (STEPS * CALLS))
    assert r.share == pytest.approx(want_norm_ms * 1e3 / total_us)
    r = next(r for r in rows if r.op == "aten::linear")
    assert r.count == len(lin) and r.total_ms == pytest.approx(42 * len(lin) / 1e3)


def test_random_kernels_silent(tmp_path):
    rng = random.Random(7)
    pool = [f"k{i}_kernel" for i in range(400)]
    drawn: dict = {}

    def pick(s, c):
        return drawn.setdefault((s, c), rng.sample(pool, 4))

    b, launched = _trace(pick)
    # the premise, counted here: no n-gram of one op reaches the floor (max(MIN_COUNT, steps))
    grams: Counter = Counter()
    for op, names, _ in launched:
        for n in range(ks.MIN_LEN, ks.MAX_LEN + 1):
            grams.update((op, tuple(names[i:i + n])) for i in range(len(names) - n + 1))
    assert max(grams.values()) < max(ks.MIN_COUNT, STEPS)
    kv = _analyze(tmp_path, b).kernel_views
    assert kv.sequences == []


def test_distinct_ngrams_capped(monkeypatch):
    monkeypatch.setattr(ks, "MAX_NGRAMS", 50)
    cap = 50 // (ks.MAX_LEN - 1)
    rng = np.random.default_rng(3)
    n = 3000
    name = rng.integers(0, 1_000_000, n)
    dur = rng.integers(1, 1000, n).astype(np.float64)
    seg = np.arange(n) // 30  # runs of 30 kernels
    op = np.full(n, 5)
    got = ks.ngram_candidates(op, name, seg, dur, floor=1)
    by_len = defaultdict(list)
    for pos, k, count, total in got:
        by_len[k].append((tuple(name[pos:pos + k].tolist()), count, total))
    assert len(got) <= 50 and set(by_len) == set(range(ks.MIN_LEN, ks.MAX_LEN + 1))
    for k, rows in by_len.items():  # per length: the cap's worth of n-grams with the most time, counted here
        want: dict = defaultdict(lambda: [0, 0.0])
        for i in range(n - k + 1):
            if seg[i] == seg[i + k - 1]:
                w = want[tuple(name[i:i + k].tolist())]
                w[0] += 1
                w[1] += float(dur[i:i + k].sum())
        assert len(want) > cap and len(rows) == cap
        best = sorted(want.values(), key=lambda v: -v[1])[:cap]
        assert sorted(t for _, _, t in rows) == pytest.approx(sorted(v[1] for v in best))
        for g, count, total in rows:
            assert [count, total] == pytest.approx(want[g])


def test_long_run_listed_once(tmp_path):
    """An op launching 9 kernels every call: the 6-kernel windows over it share its occurrences, one row stands
    for them (not four shifted copies and their pieces)."""
    run = [f"r{i}_kernel" for i in range(9)]
    b, launched = _trace(lambda s, c: run if c < 100 else ["bias_kernel"])
    rows = [r for r in _analyze(tmp_path, b).kernel_views.sequences if r.op == "MyRMSNorm"]
    assert len(rows) == 1
    (r,) = rows
    assert len(r.kernels) == ks.MAX_LEN and "_".join(r.kernels) in "_".join(run)
    assert r.count == STEPS * CALLS
