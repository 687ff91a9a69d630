"""Generator of GPU expert-parallel (MoE) traces with a known answer, shaped like llmdiag's own ep runs.

`moe_ep_ranks(send)` writes one trace per rank of one EP group, given the rows each rank sends each peer per MoE
layer (`send[src][dst]`, as the split sizes of a dispatch). Per step and layer, on every rank: a dispatch, the
expert GEMMs (one kernel whose duration is `us_per_row` x the rows received: the expert work follows the tokens),
then a combine that sends the same rows back. Two flavours:
- `nccl`: torch's all_to_all_single over NCCL: `record_param_comms` host ops with `Collective name`
  all_to_allv and `In split size` / `Out split size`, an `ncclDevKernel_SendRecv` kernel under each, inside
  `llmdiag/moe/dispatch|combine` labels (what `llmdiag run --workload ep2` records on GPUs);
- `deepep`: DeepEP's kernels (deepseek-ai/DeepEP csrc/kernels/intranode.cu names, as tests/gen/traces.py uses),
  launched from Python with no communication host op and no split sizes: only times are known.

The expected figures are computed here from `send` and the fixed durations, independently of llmdiag.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.gen.builder import TraceBuilder

GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
        "__5x_cublas")
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
DEEPEP_NOTIFY = "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int)"
DEEPEP_DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*)"
DEEPEP_COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*)"


@dataclass
class MoeExpected:
    received: list[int]  # rows per rank per step (all layers)
    sent: list[int]
    imbalance: float  # max / mean of received
    expert_ms: list[float]  # per rank per step
    dispatch_ms: float  # per rank per step (same on every rank)
    combine_ms: float
    a2a_ms: float  # all-to-all kernel time per step
    step_ms: float


def moe_ep_ranks(send: list[list[int]], *, layers: int = 4, steps: int = 2, mode: str = "nccl",
                 us_per_row: float = 0.5, dispatch_us: int = 120, combine_us: int = 100, gap_us: int = 50,
                 step_us: int = 10_000, pg_name: str = "1", labels: bool = True,
                 backward: bool = False) -> tuple[list[TraceBuilder], MoeExpected]:
    """`labels=False`: no llmdiag/moe/* spans (a foreign trace); `backward`: after the forward layers, the
    autograd all-to-alls in reverse layer order (combine's gradient with the dispatch splits, then dispatch's
    gradient with the combine splits), with no expert GEMM time between them counted."""
    n = len(send)
    group = list(range(n))
    recv_rows = [sum(send[s][d] for s in range(n)) for d in range(n)]
    gemm_us = [int(round(r * us_per_row)) for r in recv_rows]
    pg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": n, "ranks": group},
          {"pg_name": pg_name, "pg_desc": "mesh_ep", "backend_config": "cuda:nccl", "pg_size": n, "ranks": group}]
    out = []
    notify_us = 20 if mode == "deepep" else 0
    for r in range(n):
        b = TraceBuilder(rank=r, world_size=n, pg_config=pg,
                         device_properties=[{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0,
                                             "totalGlobalMem": 85_000_000_000}])
        for k in range(steps):
            k0 = k * step_us
            b.step(k + 1, k0, k0 + step_us)
            t = k0 + 100
            slowest = max(gemm_us)
            for _ in range(layers):
                _a2a(b, mode, "dispatch", t, dispatch_us, notify_us, send[r], [send[s][r] for s in range(n)], pg_name, n,
                     labels)
                g0 = t + notify_us + dispatch_us
                b.kernel(GEMM, g0, gemm_us[r], stream=7, launch_at=g0 - 30)
                if mode == "nccl" and labels:
                    b.annotation("llmdiag/moe/experts", g0 - 35, 10)
                    b.kernel("llmdiag/moe/experts", g0, gemm_us[r], stream=7, cat="gpu_user_annotation", launch=False)
                # combine starts when the slowest rank's experts are done: everyone waits for the hot rank
                c0 = g0 + slowest
                _a2a(b, mode, "combine", c0, combine_us, 0, [send[s][r] for s in range(n)], send[r], pg_name, n,
                     labels)
                t = c0 + combine_us + gap_us
            for _ in range(layers if backward else 0):
                _a2a(b, mode, "backward", t, combine_us, 0, send[r], [send[s][r] for s in range(n)], pg_name, n, False)
                t += combine_us + gap_us
                _a2a(b, mode, "backward", t, dispatch_us, 0, [send[s][r] for s in range(n)], send[r], pg_name, n,
                     False)
                t += dispatch_us + gap_us
        out.append(b)
    per_layer = notify_us + dispatch_us + max(gemm_us) + combine_us + gap_us
    window = layers * per_layer - gap_us  # device window of a step: first kernel start to last kernel end
    mean = sum(recv_rows) / n
    exp = MoeExpected(received=[x * layers for x in recv_rows], sent=[sum(row) * layers for row in send],
                      imbalance=max(recv_rows) / mean, expert_ms=[layers * g / 1000 for g in gemm_us],
                      dispatch_ms=layers * (notify_us + dispatch_us) / 1000, combine_ms=layers * combine_us / 1000,
                      a2a_ms=layers * (notify_us + dispatch_us + combine_us) / 1000, step_ms=window / 1000)
    return out, exp


def _a2a(b: TraceBuilder, mode: str, role: str, t: int, dur: int, notify_us: int, sent, recv, pg_name: str, n: int,
         labels: bool = True):
    if mode == "deepep":
        if role == "dispatch":
            b.kernel(DEEPEP_NOTIFY, t, notify_us, stream=30, launch_at=t - 40)
            b.kernel(DEEPEP_DISPATCH, t + notify_us, dur, stream=30, launch_at=t - 39)
        else:
            b.kernel(DEEPEP_COMBINE, t, dur, stream=30, launch_at=t - 40)
        return
    if labels:
        b.annotation(f"llmdiag/moe/{role}", t - 45, 30)
    args = {"Collective name": "all_to_allv", "dtype": "BFloat16", "In msg nelems": sum(sent) * 4096,
            "Out msg nelems": sum(recv) * 4096, "Group size": n, "Process Group Name": pg_name,
            "Process Group Description": "mesh_ep", "In split size": str(list(sent)),
            "Out split size": str(list(recv))}
    b.cpu_op("record_param_comms", t - 40, 10, args=args)
    b.kernel(SENDRECV, t, dur, stream=20, launch_at=t - 35, args=dict(args))
    if labels:
        b.kernel(f"llmdiag/moe/{role}", t, dur, stream=20, cat="gpu_user_annotation", launch=False)
