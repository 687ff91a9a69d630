"""Idle that one host call holds (issue 27 items 3 and 5): a blocking copy or sync is blocking runtime time, named
with its op stack and the copy/sync fix, never launch-bound with fusion advice; one long host op is named as host
work in that op; allocator-off advice only where calls per step show the allocator off. Answers are placed by
hand in tests/gen/blocking.py; each class has a silent twin."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.blocking import allocator, async_copy_twin, blocking_copy, host_op, many_launches

FUSION = ("torch.compile(model)", "reduce-overhead", "torch.cuda.CUDAGraph")


def _a(tmp_path, b):
    return analyze_path(b.write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)


def _ids(a) -> list[str]:
    return [f.id for f in a.findings]


def _f(a, rid):
    return next(f for f in a.findings if f.id == rid)


@pytest.mark.parametrize("kind,d_us", [("hip", 493_000), ("hip", 5_000), ("cuda", 5_000), ("pageable_async", 5_000),
                                       ("sync", 5_000), ("item", 5_000)])
def test_blocking_call_holds_the_idle(tmp_path, kind, d_us):
    b, want = blocking_copy(kind, d_us)
    a = _a(tmp_path, b)
    i = a.ranks[0].idle
    assert i.runtime_ops[want["op"]] == pytest.approx(want["held_ms"], abs=1e-6)
    assert i.runtime_ms == pytest.approx(want["held_ms"], abs=1e-6)
    assert i.queued_ms == 0  # the copy the call issued is not queued work: the host was held in the call
    assert i.host_bound_ms < 0.05  # a few µs around the launch, nothing of the held stretch
    s = i.stretches[0]
    assert (s.op, s.cause, s.step) == (want["call"], "runtime", 1) and s.stack[:len(want["stack"])] == want["stack"]
    f = _f(a, "host_sync")
    assert f.gain_kind == "bound" and f.gain_ms == pytest.approx(want["held_ms"], abs=1e-3)
    assert f"`{want['call']}`" in f.evidence.text and all(f"`{x}`" in f.evidence.text for x in want["stack"])
    assert f.evidence.steps == [1]
    if kind in ("hip", "cuda", "pageable_async"):
        assert "non_blocking=True" in f.action and "pin_memory()" in f.action
    else:
        assert "`.item()`" in f.action
    assert "host_bound" not in _ids(a) and "host_op_stall" not in _ids(a)
    assert not any(x in g.action for g in a.findings for x in FUSION)


def test_async_copy_overlapping_kernels_is_silent(tmp_path):
    """The twin: the same aten::to copy, asynchronous from pinned memory, under a running kernel."""
    a = _a(tmp_path, async_copy_twin())
    assert a.ranks[0].idle.runtime_ms == 0 and not a.ranks[0].idle.stretches
    assert not {"host_sync", "host_op_stall", "host_bound", "allocator_churn"} & set(_ids(a))


def test_one_long_host_op_is_named_without_fusion_advice(tmp_path):
    """21 ms of `aten::split_with_sizes` per step with no launch inside: that op's host work, in every step."""
    a = _a(tmp_path, host_op(21_000))
    f = _f(a, "host_op_stall")
    assert "`aten::split_with_sizes`" in f.evidence.text and "`KeyedJaggedTensor.split`" in f.evidence.text
    assert f.gain_ms == pytest.approx(21.0, abs=1e-3) and f.evidence.steps == [1, 2, 3]
    assert "host_bound" not in _ids(a)
    assert not any(x in g.action for g in a.findings for x in FUSION)
    st = a.ranks[0].idle.stretches
    assert {(s.op, s.cause) for s in st} == {("aten::split_with_sizes", "host")}


def test_many_short_launches_keep_fusion_advice(tmp_path):
    """The twin: idle of the same size made of 2000 gaps of 10 µs between 2-µs kernels is launch-bound."""
    a = _a(tmp_path, many_launches(2000, 10))
    assert "host_op_stall" not in _ids(a) and not a.ranks[0].idle.stretches
    f = _f(a, "host_bound")
    assert "torch.compile(model)" in f.action


def test_allocator_off_gets_the_caching_advice(tmp_path):
    """300 hipMalloc + 300 hipFree per step against 50 kernels: every tensor allocates, the allocator is off."""
    a = _a(tmp_path, allocator([300] * 3, [300] * 3, [50] * 3, prefix="hip"))
    f = _f(a, "allocator_churn")
    assert "PYTORCH_NO_HIP_MEMORY_CACHING" in f.action and "is off" in f.evidence.text
    assert f.gain_ms == pytest.approx(600 * 50 / 1000, abs=1e-3)


def test_allocator_on_with_one_heavy_step_names_the_step(tmp_path):
    """3 cudaMalloc in steps 1 and 3 (2 ms each); step 2 frees its cache and retries: 9 mallocs + 25 frees of
    5 ms. 200 kernels per step: the allocator is on. Step 2 is named; it follows a normal step and frees the
    cache, so it is a flush in mid-capture, not warm-up (issue #34): it is paid again whenever memory runs short,
    and the gain is the mean step's 60.67 ms, the flush included (it was the median's 6 ms: "not paid again")."""
    a = _a(tmp_path, allocator([3, 9, 3], [0, 25, 0], [2000, 5000, 2000], kernels=200))
    f = _f(a, "allocator_churn")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in f.action and "expandable_segments" in f.action
    assert "is on" in f.evidence.text and "step 2 alone holds 170.00 ms" in f.evidence.text
    assert f.evidence.steps == [2] and f.gain_ms == pytest.approx(182.0 / 3, abs=1e-3)
    assert "mid-capture" in f.evidence.text and "not paid again" not in f.expected_gain
    al = {s.step: (s.calls, s.mallocs) for s in a.ranks[0].idle.alloc_steps}
    assert al == {1: (3, 3), 2: (34, 9), 3: (3, 3)}


def test_allocator_on_every_step_averages(tmp_path):
    """The twin without an outlier: 3 mallocs + 3 frees of 2 ms in every step: the mean, no step named, and still
    no advice to turn on an allocator that is on."""
    a = _a(tmp_path, allocator([3] * 3, [3] * 3, [2000] * 3, kernels=200))
    f = _f(a, "allocator_churn")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in f.action
    assert f.evidence.steps == [] and f.gain_ms == pytest.approx(12.0, abs=1e-3)


def test_few_launches_get_no_fusion_advice(tmp_path):
    """20 kernels per step behind 500-µs host gaps: host-bound, but launch overhead is not what the host does;
    no torch.compile / CUDA graphs (their precondition is many short launches)."""
    a = _a(tmp_path, many_launches(20, 500))
    f = _f(a, "host_bound")
    assert not any(x in f.action for x in FUSION) and "would not help" in f.action
    assert "host_op_stall" not in _ids(a)
