"""`--hta-compat`'s critical path against HTA's own numbers on HTA's critical-path test traces.

HTA 0.5.0's `critical_path_analysis(rank, annotation, instance)` then `.summary()` on each trace, made with
pandas 2.3 (HTA's analysis fails on the pandas 3 this venv has): ../shared/fixtures/real/README.md, table
"hta/critical_path/". HTA is not run here; its numbers are copied from that table.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.critical_path.hta import HtaRank
from llmdiag.diagnose.model.critical_path import CATEGORIES

pytestmark = pytest.mark.real

CP = "../shared/fixtures/real/hta/critical_path"
ALEX = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
# file, annotation ("" the whole trace), instance, HTA's path nodes, HTA's shares in CATEGORIES order
HTA = [
    ("simple_add/benchmark_result_493459_1694039959_trace.json.gz", ALEX, 1, 315, (99.78, 0.21, 0.0, 0.01, 0.00)),
    ("alexnet/benchmark_result_2869224_1695835535_trace.json.gz", ALEX, 1, 149, (89.42, 10.36, 0.0, 0.08, 0.14)),
    ("cuda_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0, 40, (97.25, 1.58, 0.0, 1.17, 0.0)),
    ("cuda_event_sync_multi_stream/event_sync_trace.json.gz", "", 0, 59, (87.01, 10.53, 0.0, 1.19, 1.27)),
]


def _window(t, annotation: str, instance: int) -> tuple[int, int]:
    """HTA's window: the instance-th event (in time order) whose name contains `annotation`; "" the whole trace."""
    if not annotation:
        return int(t.ts.min()), int((t.ts + t.dur).max())
    ids = [i for i, n in enumerate(t.names) if annotation in n]
    idx = np.flatnonzero(np.isin(t.name, ids))
    k = idx[np.argsort(t.ts[idx], kind="stable")][instance]
    return int(t.ts[k]), int(t.ts[k] + t.dur[k])


@pytest.mark.parametrize("path,annotation,instance,nodes,shares", HTA, ids=[h[0].split("/")[0] for h in HTA])
def test_hta_split_within_two_points(path, annotation, instance, nodes, shares):
    t = load_trace(f"{CP}/{path}")
    classify(t)
    ns, count = HtaRank(t).window(*_window(t, annotation, instance))
    ours = 100 * ns / ns.sum()
    for cat, mine, theirs in zip(CATEGORIES, ours.tolist(), shares):
        assert mine == pytest.approx(theirs, abs=2.0), cat
    assert count == nodes  # the same path, not only the same split


def test_cli_path_uses_hta_graph_on_the_profiler_step():
    """`--hta-compat` on the one-step event-sync trace: the step's critical path is HTA's (ProfilerStep#100 is its
    only, and last, step: kept, as `--exclude-last-step` keeps a lone step)."""
    a = analyze_path(f"{CP}/cuda_event_sync/event_sync_trace.json.gz", exclude_last_step=True, hta_compat=True,
                     rules=False)
    cp = a.ranks[0].steps[0].critical_path
    assert cp is not None and a.options.hta_compat
    for cat, theirs in zip(CATEGORIES, HTA[2][4]):
        assert getattr(cp, cat) == pytest.approx(theirs, abs=2.0), cat
    step = analyze_path(f"{CP}/cuda_event_sync/event_sync_trace.json.gz", rules=False).ranks[0].steps[0]
    assert step.critical_path.length_ms == pytest.approx(step.time_ms, abs=1e-3)  # ours tiles the device window
    assert 0 < cp.length_ms <= 3.154  # HTA's weighs at most its window, the 3.154 ms host step
