"""Captures that start at different collectives, generated as columns with a planted straggler and a planted
late start; the answers are computed here from the plant, not by the code under test.

Per step: 3 all-reduces and 2 all_to_alls of one group. Every rank works WORK + u (u up to JITTER) after the
previous collective ends, then arrives at the next; the straggler works LATE more before every all_to_all. A
collective ends on every rank TRANSFER after its last arrival, so the straggler delays everything after it. One rank's capture starts `lead` collectives late; another's ends one early. Hosts
(8 ranks each) may have clocks offset by up to a second."""

from __future__ import annotations

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank.collectives import Collectives

from llmdiag.diagnose.metrics.job.skew import skew

STEPS = 20
KINDS = ["allreduce", "allreduce", "allreduce", "alltoall", "alltoall"]
WORK = 5_000_000  # ns of a rank's own work before each collective
PERIOD = len(KINDS) * (WORK + 1_000_000)  # ns per step, without the straggler
LATE = 10_000_000  # the straggler's lateness at each all_to_all
JITTER = 200_000
TRANSFER = 1_000_000
KEYS = [("dp[0, 1]", "allreduce"), ("dp[0, 1]", "alltoall")]


def plant(n_ranks: int, straggler: int, late_rank: int, lead: int, seed: int, host_offsets: bool = False,
          steps: int = STEPS, first_a2a_only: bool = False, late: int = LATE, punctual_elsewhere: bool = False):
    rng = np.random.default_rng(seed)
    n = steps * len(KINDS)
    kind = np.tile([0 if k == "allreduce" else 1 for k in KINDS], steps)
    work = WORK + rng.integers(0, JITTER, (n_ranks, n))
    slow = (kind == 1) & ~(first_a2a_only & (np.arange(n) % len(KINDS) == len(KINDS) - 1))
    if punctual_elsewhere:  # never last where it is not late: only the planted collectives count
        work[straggler, ~slow] = WORK
    work[straggler, slow] += late
    arrive = np.zeros((n_ranks, n), np.int64)
    end = np.zeros(n, np.int64)
    prev = 0
    for j in range(n):
        arrive[:, j] = prev + work[:, j]
        end[j] = prev = arrive[:, j].max() + TRANSFER
    hosts = {r: f"h{r // 8}" for r in range(n_ranks)}
    off = {h: (int(rng.integers(-10**9, 10**9)) if host_offsets and h != "h0" else 0) for h in set(hosts.values())}
    records = {}
    for r in range(n_ranks):
        keep = np.ones(n, bool)
        if r == late_rank:
            keep[:lead] = False
        if r == (late_rank + 1) % n_ranks:
            keep[-1] = False  # its capture ends one collective early
        k = kind[keep]
        ordinal = np.zeros(len(k), np.int32)
        for v in (0, 1):
            ordinal[k == v] = np.arange((k == v).sum())
        o = off[hosts[r]]
        records[r] = Collectives(list(KEYS), k.astype(np.int32), ordinal, arrive[r, keep] + o, end[keep] + o)
    # truth: over the collectives every rank recorded, where the straggler alone is last, its arrival − the next
    every = np.ones(n, bool)
    every[:lead] = False
    every[-1] = False
    srt = np.sort(arrive[:, every], axis=0)
    alone = (arrive[straggler, every] == srt[-1]) & (srt[-1] > srt[-2])
    imposed = float((srt[-1] - srt[-2])[alone].sum()) / steps / 1e6
    return records, hosts, imposed


@pytest.mark.parametrize("n_ranks,lead,host_offsets", [(4, 1, False), (4, 5, False), (16, 3, True),
                                                       (64, 2, True), (4096, 4, False)])
def test_late_capture_keeps_the_straggler_and_its_cost(n_ranks, lead, host_offsets):
    straggler, late_rank = n_ranks - 2, 1 % n_ranks
    records, hosts, truth = plant(n_ranks, straggler, late_rank, lead, seed=n_ranks + lead, host_offsets=host_offsets)
    step_ms = PERIOD / 1e6
    sk = skew(records, hosts, {}, nsteps=STEPS, step_ms=step_ms)
    (x,) = [s for s in sk.stragglers if s.kind]
    assert x.rank == straggler and x.kind == "alltoall"
    assert x.imposed_ms == pytest.approx(truth, rel=1e-9)
    assert x.imposed_ms == pytest.approx(2 * LATE / 1e6, rel=0.10)  # the plant: LATE at both all_to_alls a step
    assert x.gain_kind == "simulated" and x.gain_ms == pytest.approx(2 * LATE / 1e6, rel=0.10)
    assert all(b.max_skew_ms < step_ms for b in sk.by_collective)
    assert all(b.max_skew_ms == pytest.approx(LATE / 1e6, abs=JITTER / 1e6) for b in sk.by_collective
               if b.kind == "alltoall")
    windows = {w.rank: w for w in sk.capture_windows}
    assert windows[late_rank].lead_n == lead and windows[late_rank].trail_n == 0
    assert windows[(late_rank + 1) % n_ranks].trail_n == 1
    assert sk.matched == STEPS * len(KINDS) - lead - 1  # the collectives a capture lacks are left out
    if host_offsets:
        assert sk.host_shift_ms  # every host brought to the first one's clock
    assert sk.by_order == 0


def test_silent_twin_no_straggler_when_every_rank_jitters():
    """The same job without the plant: the late capture is still named, nobody is a straggler."""
    records, hosts, _ = plant(16, 14, 1, 3, seed=7)
    for r, c in records.items():  # undo the plant: the straggler arrives like the others
        if r == 14:
            c.start = np.where(c.key == 1, c.start - LATE + 100_000, c.start)
    sk = skew(records, hosts, {}, nsteps=STEPS, step_ms=PERIOD / 1e6)
    assert not [s for s in sk.stragglers if s.kind]
    assert {w.rank: w.lead_n for w in sk.capture_windows if w.lead_n} == {1: 3}


def test_a_stall_before_one_collective_of_five_is_found_by_its_material_waits():
    """5 steps, the straggler late only at the first all_to_all of each (its capture's first collective is
    rank 0's lacking one): last at 4-5 of 9 all_to_alls (chance level for 4 ranks is not beaten: p ≥ 0.05),
    but at every one whose skew is material."""
    records, hosts, truth = plant(4, 2, 0, 1, seed=3, steps=5, first_a2a_only=True, punctual_elsewhere=True)
    sk = skew(records, hosts, {}, nsteps=5, step_ms=PERIOD / 1e6)
    (x,) = [s for s in sk.stragglers if s.kind]
    assert x.rank == 2 and x.last_n == x.matched_n >= 4 and "material" in x.reason
    assert x.imposed_ms == pytest.approx(truth, rel=1e-9)
    assert x.imposed_ms == pytest.approx(LATE / 1e6, rel=0.10)
    quiet, hosts, _ = plant(4, 2, 0, 1, seed=3, steps=5, first_a2a_only=True, late=0)  # the silent twin: no stall
    assert not [s for s in skew(quiet, hosts, {}, nsteps=5, step_ms=PERIOD / 1e6).stragglers if s.kind]
