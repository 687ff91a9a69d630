"""V-shaped placement (DualPipeV, ZBV) against the generator's own schedule (torch's ScheduleDualPipeV order, simulated
in tests/gen/pipeline_p2p.py): every span the analyzer places covers generator actions of one rank exactly, and
its label (stage, forward/backward, microbatch) is that of the run's last action (the transfer leaving it) or, with
no transfer leaving, its first; W spans hold only W actions; per-rank busy time is the generator's."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.job.pipeline.vshape import chain_order
from tests.gen.pipeline_p2p import P2PCase, write


@pytest.mark.parametrize("schedule,p,m,batched,threads", [
    ("dualpipev", 2, 4, True, 2), ("dualpipev", 2, 8, False, 1), ("dualpipev", 4, 8, True, 1),
    ("dualpipev", 4, 8, False, 2), ("zbv", 4, 8, False, 2)])
def test_v_spans_and_labels(tmp_path, schedule, p, m, batched, threads):
    """DualPipeV and torch's ScheduleZBVZeroBubble: the same V placement, read alike."""
    c = P2PCase(p=p, m=m, schedule=schedule, batched=batched, threads=threads)
    ans = write(c, tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.pipeline is not None and a.pipeline.schedule == "v-shaped"
    assert (a.pipeline.stages, a.pipeline.stages_per_rank, a.pipeline.microbatches) == (p, 2, m)
    assert a.pipeline.theory == 0.0
    lo = min(x[1] for v in ans.actions.values() for x in v)
    merged = 0
    for rk in a.ranks:
        gen = sorted(ans.actions[rk.rank], key=lambda x: x[1])
        spans = [x for x in rk.pipeline_actions if x.start_ms * 1000 < ans.window_us + 1]  # step 1
        busy = 0.0
        for x in spans:
            s, e = round(x.start_ms * 1000) + lo, round(x.end_ms * 1000) + lo
            inside = [g for g in gen if s <= g[1] and g[2] <= e]
            assert inside and inside[0][1] == s and inside[-1][2] == e, (rk.rank, x)  # whole actions, no cut
            busy += e - s
            merged += len(inside) > 1
            if x.kind == "W":
                assert all(g[0][1] == "W" for g in inside) and x.microbatch == -1
                continue
            told = {(st, "B" if k in "IB" else k, mb) for (st, k, mb), _, _ in (inside[0], inside[-1])}
            assert (x.stage, x.kind, x.microbatch) in told, (rk.rank, x, [g[0] for g in inside])
        assert busy == sum(g[2] - g[1] for g in gen)  # every action covered once: the bubble's numerator
        assert {x.stage for x in spans} == {rk.rank, 2 * p - 1 - rk.rank}
    assert merged  # the V's turn runs two stages back to back: the case the spans must survive


def test_chain_order_refuses_a_ring():
    """Looped placement (the last rank sends to the first) is no V: the order says why."""
    p2p = {r: [("pp", "send", (r + 1) % 4, 10 * r, 10 * r + 5), ("pp", "recv", (r - 1) % 4, 10 * r + 1, 10 * r + 2)]
           for r in range(4)}
    order, why = chain_order(p2p, list(range(4)))
    assert order == [] and "no chain with two ends" in why
    line = {r: [("pp", "send" if r == 0 else "recv", 1 - r, 10 * r, 10 * r + 5)] for r in range(2)}
    assert chain_order(line, [0, 1]) == ([0, 1], "")


@pytest.mark.parametrize("schedule", ["dualpipev", "zb"])
def test_zero_bubble_formula_is_said_to_be_an_ideal(tmp_path, schedule):
    """The zero-bubble family's formula is 0 at any m; the measured bubble (fill and drain) sits above it. The
    explanation says the 0 is an ideal, and never blames the difference on stage imbalance."""
    write(P2PCase(p=4, m=8, schedule=schedule, batched=False, peer_ranks=True, threads=2, steps=2), tmp_path)
    p = analyze_path(str(tmp_path), jobs=1).pipeline
    assert p.theory == 0.0 and p.measured > 0.02
    assert "zero-bubble ideal" in p.explanation and "stage imbalance (stage" not in p.explanation
