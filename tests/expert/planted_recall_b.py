"""Planted scenarios for issue #34's recall (part b): per-step chores and capture caveats that expert reviewers
named in real traces (kineto samples: zero_grad, pageable copies; nccl_data: DDP buffer broadcast, slow host ops;
sampled_pair: embedding lookups uneven across ranks, an event-sampled capture), each with its silent twin.

Each chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the
exact answers below are arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
LOOKUP = "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>"
BCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"

ZG_N, ZG_OP_US, ZG_KERNEL_US = 200, 30.0, 2.0
# zero_grad: 200 zero_ ops of 30 us, each launching a 2 us fill: the op spans 200 x 30 + 10 us, the device busy
# 200 x 2 us inside it: 5.61 ms of idle per step
ZG_IDLE_MS = (ZG_N * ZG_OP_US + 10.0 - ZG_N * ZG_KERNEL_US) / 1000
# pageable copy, the job host-bound (4 ms of host per op): the call returns 10 us after its 5 ms copy, the host
# resumes 5 us later and its next op launches its kernel 4000 - 20 us into the op: the device idles 15 + 3980 us
# after the copy, within the call's 5110 us
COPY_US, HOST_US = 5000.0, 4000.0
COPY_IDLE_MS = (10.0 + 5.0 + HOST_US - 20.0) / 1000
# DDP buffer broadcast: flatten 1000 us, broadcast op 100 us (its kernel 20 us inside), unflatten 3000 us
BUF_IDLE_MS = (1000.0 + 100.0 + 3000.0 - 20.0) / 1000
# embedding lookups: rank 1 12 ms, ranks 0, 2, 3 4 ms: the mean 6 ms, rank 1's excess over it 6 ms
LOOKUP_MS = {0: 4.0, 1: 12.0, 2: 4.0, 3: 4.0}
LOOKUP_GAIN = LOOKUP_MS[1] - sum(LOOKUP_MS.values()) / 4


def _zero_grad(rk, k, facts, step, launches: bool = True):
    if step is None:
        return
    h = rk.h
    rk.cpu("Optimizer.zero_grad#SGD.zero_grad", h, ZG_N * ZG_OP_US + 10.0)
    for i in range(ZG_N):
        t = h + 5.0 + i * ZG_OP_US
        rk.cpu("aten::zero_", t, ZG_OP_US - 2.0)
        if launches:
            rk.kernel(FILL, t + 10.0, ZG_KERNEL_US, at=t + 3.0)
    rk.h = h + ZG_N * ZG_OP_US + 15.0
    rk.d = max(rk.d, rk.h - 20.0)


def _copy(rk, k, facts, step, pageable: bool = True):
    if step is None:
        return
    rk.corr += 1
    h = rk.h
    if pageable:
        rk.cpu("aten::copy_", h, COPY_US + 112.0)
        rk.runtime("cudaMemcpyAsync", h + 1.0, COPY_US + 110.0, rk.corr)
        name, start = "Memcpy HtoD (Pageable -> Device)", h + 101.0
        rk.h = h + 1.0 + COPY_US + 110.0 + 5.0  # the call returns 10 us after the copy ends
    else:
        rk.cpu("aten::copy_", h, 12.0)
        rk.runtime("cudaMemcpyAsync", h + 1.0, 10.0, rk.corr)
        name, start = "Memcpy HtoD (Pinned -> Device)", h + 101.0
        rk.h = h + 16.0
    rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": COPY_US,
                  "args": {"device": 0, "stream": 7, "correlation": rk.corr}})
    rk.d = start + COPY_US


def _buffers(rk, k, facts, step, broadcast: bool = True):
    if step is None:
        return
    rk.cpu("DistributedDataParallel.forward", rk.h + 1.0, 4131.0, cat="user_annotation")
    h = rk.h + 2.0
    if broadcast:
        rk.cpu("aten::flatten_dense_tensors", h, 1000.0)
        rk.cpu("c10d::broadcast_", h + 1010.0, 100.0)
        rk.cpu("record_param_comms", h + 1015.0, 90.0,
               args={"Collective name": "broadcast", "In msg nelems": 1000, "Out msg nelems": 1000,
                     "dtype": "Float", "Group size": k.ranks})
        rk.corr += 1
        rk.runtime("cudaLaunchKernel", h + 1050.0, 8.0, rk.corr)
        rk.ev.append({"ph": "X", "cat": "kernel", "name": BCAST, "pid": 0, "tid": 20, "ts": h + 1060.0, "dur": 20.0,
                      "args": {"device": 0, "stream": 20, "correlation": rk.corr, "Collective name": "broadcast",
                               "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
                               "Group size": k.ranks}})
        rk.cpu("aten::unflatten_dense_tensors", h + 1120.0, 3000.0)
        rk.d = max(rk.d, h + 1080.0)
    else:  # broadcast_buffers=False: the forward's own host work of the same length, nothing broadcast
        rk.cpu("aten::copy_", h, 4120.0)
    rk.h = h + 4131.0


def _lookups(rk, k, facts, step, per_rank: dict | None = None):
    if step is None:
        return
    ms = (per_rank or LOOKUP_MS)[rk.r]
    rk.cpu("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function", rk.h, 40.0)
    rk.kernel(LOOKUP, rk.h + 30.0, ms * 1000, at=rk.h + 20.0)
    rk.d = rk.h + 30.0 + ms * 1000
    rk.h += 45.0


def _views(rk, k, facts, step, us: float = 25.0):
    if step is None:
        return
    for i in range(150):
        rk.cpu("aten::view", rk.h + i * (us + 1.0), us)
    rk.h += 150 * (us + 1.0)


def _ids(rk, k, facts, step, stride: int = 6):
    """After the last step: External ids on every host op, `stride` apart (6: a sampled capture's holes; 1: all)."""
    if step is not None:
        return
    ops = sorted((e for e in rk.ev if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    for i, e in enumerate(ops):
        e["args"] = dict(e["args"], **{"External id": 10 + stride * i})


def _right(rule: str, why: str, gain: tuple[float, float] | None = None) -> dict:
    c: dict = {"verdict": "right", "rules": [rule], "why": why}
    if gain:
        c["gain_ms"] = list(gain)
    return c


def _wrong_gain(rule: str, gain: tuple[float, float], why: str) -> dict:
    return {"verdict": "wrong", "rules": [rule], "gain_ms": list(gain), "gain_outside": True, "why": why}


def _pair(out: dict, name: str, rule: str, knobs: Knobs, twin: Knobs, what: str, twin_why: str,
          gain: tuple[float, float] | None, text: str | None = None, also: list | None = None) -> None:
    """The scenario and its twin; `also`: claims on other rules true of both by construction."""
    hit: dict = {"where": "finding", "rules": [rule]}
    if gain:
        hit["gain_ms"] = list(gain)
    if text:
        hit["text"] = text
    claims = ([_wrong_gain(rule, gain, f"{what}: the gain is {gain[0]:g}-{gain[1]:g} ms by construction")]
              if gain else []) + [_right(rule, what)] + list(also or [])
    out[name] = (knobs, {"problems": [{"id": rule, "what": what, "any": [hit]}], "silent": [], "claims": claims})
    out[f"{name}_twin"] = (twin, {"problems": [], "claims": list(also or []),
                                  "silent": [{"id": f"no_{rule}", "why": twin_why,
                                              "match": {"where": "finding", "rules": [rule]}}]})


def recall_b_scenarios() -> dict[str, tuple[Knobs, dict]]:
    out: dict = {}
    g = ZG_IDLE_MS
    _pair(out, "zero_grad_fill", "zero_grad", Knobs(chore=_zero_grad),
          Knobs(chore=partial(_zero_grad, launches=False)),
          f"zero_grad launches 200 fills per step, the device idle {g:.2f} ms inside it",
          "zero_grad of the same length launches nothing (set_to_none=True)", (g - 0.01, g + 0.01),
          text=r"set_to_none=True")
    g = COPY_IDLE_MS
    _pair(out, "pageable_copy", "pageable_copy", Knobs(chore=_copy, host_us=HOST_US),
          Knobs(chore=partial(_copy, pageable=False), host_us=HOST_US),
          f"a 5 ms pageable HtoD copy holds the host 5.11 ms per step, {g:.3f} ms of device idle after it",
          "the same copy from pinned memory, the call returning at once", (g - 0.01, g + 0.01),
          text=r"pin_memory=True", also=[_right("host_bound", "4 ms of host work per op: host-bound by construction")])
    g = BUF_IDLE_MS
    _pair(out, "ddp_broadcast_buffers", "broadcast_buffers", Knobs(chore=_buffers),
          Knobs(chore=partial(_buffers, broadcast=False)),
          f"DDP forward broadcasts 1000 Float buffer elements per step, {g:.2f} ms of device idle in its host ops",
          "the same forward length with no broadcast (broadcast_buffers=False)", (g - 0.01, g + 0.01),
          text=r"broadcast_buffers=False.*")
    g = LOOKUP_GAIN
    _pair(out, "embedding_imbalance_r1", "embedding_imbalance", Knobs(chore=_lookups),
          Knobs(chore=partial(_lookups, per_rank={r: 6.0 for r in range(4)})),
          "rank 1's lookups 12 ms per step against 4 ms on the others", "every rank's lookups 6 ms: balanced",
          (g - 0.01, g + 0.01), text=r"rank 1 runs 12\.00 ms",
          also=[{"verdict": "right", "rules": ["stragglers"], "rank": 1, "why": "rank 1 computes 8 ms more per step"}])
    _pair(out, "slow_host_ops", "slow_host_ops", Knobs(chore=_views), Knobs(chore=partial(_views, us=1.5)),
          "750 aten::view calls of 25 us: the host's floor per op is slow", "the same calls at 1.5 us", None,
          text=r"never under 25\.0 µs")
    _pair(out, "sampled_capture", "sampled_capture", Knobs(chore=_ids), Knobs(chore=partial(_ids, stride=1)),
          "host ops' External ids 6 apart: an event-sampled capture", "External ids consecutive: a complete capture",
          None, text=r"lower bound")
    return out
