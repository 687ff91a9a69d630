"""`--hta-compat`'s critical path against HTA's own numbers: on HTA's critical-path test traces, and on every
step HTA analyses of the single-rank real traces.

HTA 0.5.0's `critical_path_analysis(rank, annotation, instance)` then `.summary()`, made with pandas 2.3.3 (HTA's
analysis fails on the pandas 3 this venv has): the test traces' numbers from ../shared/fixtures/real/README.md,
table "hta/critical_path/"; the real traces' from HTA run the same way on 2026-12-07 (pandas 2.3.3 installed
beside the venv, `annotation="ProfilerStep"`, each instance HTA could analyse; it fails on each capture's last
step, on the kineto resnet50 samples and on two mi300 steps). HTA is not run here; its numbers are copied.
"""

from __future__ import annotations

import functools

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


# Real traces: file, step annotation (its name; GPU-side: the gpu_user_annotation of that name), HTA's shares.
R = "../shared/fixtures/real"
A100, TRD, SLEEP = "hta/a100_16rank_alltoall_rank0.json.gz", "hta/trace_diff", "torchrec/sst_sleep_pl_dense_after_backward_2"
SLEEP += "/ip-172-31-16-248.us-east-2.compute.internal_19488.1698954910154219890.pt.trace.json.gz"
OPT3 = ("torchrec/sst_long_a2a_optimizer_3/ip-172-31-16-248.us-east-2.compute.internal_29220.1698955894936168439"
        ".pt.trace.json.gz")
REAL_HTA = [
    ("hta/nccl_data.json.gz", "ProfilerStep#4", False, (100.0, 0, 0, 0, 0)),
    ("hta/nccl_data.json.gz", "ProfilerStep#5", False, (100.0, 0, 0, 0, 0)),
    ("hta/ns_resolution_rank-0.pt.trace.json.gz", 0, False, (1.55, 96.57, 0, 0.01, 1.87)),
    ("hta/ns_resolution_rank-0.pt.trace.json.gz", 1, False, (0, 97.87, 0, 0, 2.13)),
    ("hta/ns_resolution_rank-0.pt.trace.json.gz", 3, False, (0, 97.92, 0, 0, 2.08)),
    (f"{TRD}/test.json.gz", 0, False, (0, 46.91, 0, 0, 53.09)),
    (f"{TRD}/test.json.gz", 3, False, (0.90, 48.64, 0, 0.01, 50.44)),
    (f"{TRD}/control.json.gz", 0, False, (27.91, 0.81, 0, 0.02, 71.27)),
    (f"{TRD}/control.json.gz", 4, False, (29.04, 0.79, 0, 0.02, 70.15)),
    (A100, 0, False, (0, 12.53, 0, 0, 87.47)),
    (A100, 2, False, (0, 12.64, 0, 0, 87.36)),
    ("hta/amd_mi250_minitoy.json.gz", "ProfilerStep#1", False, (100.0, 0, 0, 0, 0)),
    ("hta/amd_mi250_minitoy.json.gz", "ProfilerStep#1", True, (100.0, 0, 0, 0, 0)),
    ("hta/sampled_pair/sampled_rank-0.json.gz", 0, False, (99.63, 0.35, 0, 0.0, 0.01)),
    ("tracelens/mi300_ddp8_actckpt_rank0.json.gz", 0, False, (0, 32.67, 0, 0, 67.33)),
    ("tracelens/mi300_ddp8_actckpt_rank0.json.gz", 2, False, (0, 33.38, 0, 0, 66.62)),
    (OPT3, 0, False, (0.36, 0, 7.26, 24.64, 67.74)),
    (OPT3, 1, False, (0, 0, 54.74, 0, 45.26)),
    (SLEEP, 0, False, (0.92, 2.84, 0, 0.0, 96.23)),
    (SLEEP, 1, False, (99.95, 0, 0.05, 0, 0)),
    # no ProfilerStep: the whole trace (`annotation=""`)
    ("tracelens/mi300_resnet18_no_caching_allocator.json.gz", None, False, (100.0, 0, 0, 0, 0)),
    ("tracelens/b200_vllm_tp8_rank0.json.gz", None, False, (96.33, 0.06, 0.03, 0.09, 3.49)),
]


@functools.lru_cache(maxsize=2)
def _hta_rank(path: str) -> HtaRank:
    t = load_trace(path)
    classify(t)
    return HtaRank(t)


def _step_window(t, step, gpu: bool) -> tuple[int, int]:
    """A ProfilerStep's span: the k-th host step in time order (an int), or the step of that name (host, or its
    GPU-side annotation)."""
    ids = [i for i, n in enumerate(t.names) if n.startswith("ProfilerStep#") and (step == n or type(step) is int)]
    side = t.cat_mask("gpu_user_annotation") if gpu else (t.stream < 0) & ~t.cat_mask("gpu_user_annotation")
    idx = np.flatnonzero(np.isin(t.name, ids) & side)
    k = idx[np.argsort(t.ts[idx], kind="stable")][step if type(step) is int else 0]
    return int(t.ts[k]), int(t.ts[k] + t.dur[k])


@pytest.mark.parametrize("path,step,gpu,shares", REAL_HTA,
                         ids=[f"{h[0].split('/')[-1][:24]}-{h[1]}{'-gpu' if h[2] else ''}" for h in REAL_HTA])
def test_hta_split_on_real_traces(path, step, gpu, shares):
    h = _hta_rank(f"{R}/{path}")
    whole = int(h.ts.min()), int((h.ts + h.dur).max())  # HTA's "" window, on its rounded times
    ns, _ = h.window(*(_step_window(h.t, step, gpu) if step is not None else whole))
    ours = 100 * ns / ns.sum()
    for cat, mine, theirs in zip(CATEGORIES, ours.tolist(), shares):
        assert mine == pytest.approx(theirs, abs=2.0), cat


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
