"""The fresh review's classes on generated traces (tests/expert/planted_recall_i.py), answers worked by hand from
the placed durations: a first call whose stall the other steps repeat is no one-time setup (rules/one_time.py),
and unused memory gets no larger-batch advice while the device waits for the DataLoader (rules/memory.py)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.expert.planted_recall_i import BCE, MUL, _loader_job, _stall_job


def _findings(tmp_path, job, **kw):
    job(str(tmp_path), "p", **kw)
    return {f.id: f for f in analyze_path(str(tmp_path), jobs=1).findings}


@pytest.mark.parametrize("stalls,one_time,gain", [
    # only #10 stalls, MulBackward0's first call (later calls 0.04 ms): one-time, low, no gain
    ({0: MUL}, True, None),
    # the same op stalls again in #11: not one-time; 2 x 5.00 / 5 = 2.00 ms per step, under 5 % of the ~45 ms
    # step (2.28 ms): silent, where before the first call alone was told "one-time setup"
    ({0: MUL, 1: MUL}, False, None),
    # a stall as long under another op in 2 of the 4 other steps (#11, #12, BCE's later calls): the step pays it
    # anyway; 3 x 5.00 / 5 = 3.00 ms per step (≥ 2.28): host_op_stall, medium
    ({0: MUL, 1: BCE, 2: BCE}, False, 3.0),
    # both (planted first_call_recurs): 3.00 ms per step
    ({0: MUL, 1: MUL, 2: BCE}, False, 3.0),
    # one other step of 4 under another op: not "most steps", the first call stays one-time; BCE's 1.00 ms per
    # step is under the floor
    ({0: MUL, 1: BCE}, True, None),
])
def test_first_call_one_time_only_where_no_step_repeats_it(tmp_path, stalls, one_time, gain):
    f = _findings(tmp_path, _stall_job, stalls=stalls).get("host_op_stall")
    if one_time:
        assert f is not None and "one-time" in f.title and f.gain_ms is None and f.severity == "low"
        assert f.evidence.steps == [10] and "later calls 0.04 ms" in f.evidence.text
    elif gain is None:
        assert f is None
    else:
        assert f is not None and "one-time" not in f.title + f.action and f.severity == "medium"
        assert f.gain_ms == pytest.approx(gain, abs=1e-3)


@pytest.mark.parametrize("loader_us,starved", [(6000, True), (200, False)])
def test_memory_unused_no_batch_advice_while_the_loader_sets_the_step(tmp_path, loader_us, starved):
    """4 GiB allocated at the peak, 2 GiB at the lowest, of 80 GiB: k = ⌊(68 − 2) / 2⌋ = 33. The device idles
    inside the DataLoader 6.00 ms per step (30 %: no advice) or 0.20 ms (1 %: the 33x advice)."""
    fs = _findings(tmp_path, _loader_job, loader_us=loader_us)
    f = fs["memory_unused"]
    assert f.severity == "low" and f.gain_ms is None and "33×" in f.expected_gain
    if starved:
        assert "raise the microbatch" not in f.action and "MFU" not in f.expected_gain
        assert "idles 6.00 ms" in f.evidence.text and "waiting for the DataLoader" in f.evidence.text
        assert "dataloader" in fs
    else:
        assert f.action.startswith("raise the microbatch 33×") and "DataLoader" not in f.evidence.text
