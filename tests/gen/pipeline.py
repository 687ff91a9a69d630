"""Megatron-style GPU pipeline traces with no `PP:` labels, and their exact answers.

Each rank is one pipeline stage. Per step it runs the schedule's forward and backward actions as GPU kernels
(bf16 cuBLAS GEMM + elementwise, forward launched from the main thread, backward from the autograd engine's
device thread as torch does) and moves activations and gradients with send/recv to its neighbours: a host
`record_param_comms` + `nccl:send`/`nccl:recv` op and an NCCL >= 2.19 `ncclDevKernel_SendRecv` kernel
carrying Kineto's collective args (`Collective name`, `Src Rank`/`Dst Rank`, `Process Group *`). After the
pipeline every rank joins an all-reduce over the pipeline ranks (the grad-norm all-reduce), which completes
when the last rank arrives: by the schedule, stage 0 under 1F1B.

The answers come from this module's own simulation, written from the schedule's definition and not from the
analyzer: a rank runs its actions in order; F(s, i) needs the activation of F(s−1, i), B(s, i) the
gradient of B(s+1, i) (the last stage's B follows its own F); a transfer starts when both the send (posted
as the producing action ends) and the recv (posted when the consumer reaches that action) are posted, and
takes `lat_us`. Per-stage bubble = 1 − busy / window, window = first action start to last action end over
all stages (one step). With `lat_us=0` and equal stages it equals (p−1)/(m+p−1) exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.gen.builder import TraceBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas"
ELTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OPTIMIZER = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float*, float, float, float, float, float, float, at::native::ADAM_MODE, bool, bool*, bool*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float*, float, float, float, float, float, float, at::native::ADAM_MODE, bool, bool*, bool*)"
MAIN, AUTOGRAD = 100, 101  # host threads: training loop, autograd engine device thread
COMPUTE_STREAM, AR_STREAM = 7, 20
STEP_GAP_US = 2000


@dataclass
class Case:
    p: int
    m: int
    schedule: str = "1f1b"  # or "gpipe"
    f_us: int = 400  # forward of one microbatch on one stage
    b_us: int = 800
    slow_stage: int | None = None
    slow_factor: int = 2  # the slow stage's F and B cost this many times more
    lat_us: int = 0  # one transfer, once both sides posted
    steps: int = 2
    allreduce_us: int = 300
    pg_desc: str = "undefined"  # what older torch writes for a group created without a description
    base_rank: int = 0  # global rank of stage 0 (stages are base_rank + s * rank_stride)
    optimizer_us: int = 0  # an optimizer step after the all-reduce (main thread), outside the schedule
    jitter_us: int = 0  # each action's cost varies by up to ± this (deterministic per stage, kind, microbatch)
    split_kernels: int = 2  # kernels per action; from 3 on they leave 2 µs launch gaps between them
    kernel_args: bool = True  # False: the NCCL kernels carry no args (older Kineto); only record_param_comms does
    rank_stride: int = 1
    peer_ranks: bool = True  # False: no `Src Rank`/`Dst Rank` (torch builds before they existed)

    def rank(self, s: int) -> int:
        return self.base_rank + s * self.rank_stride

    def link_us(self, src: int, dst: int) -> int:
        """One transfer from stage src to stage dst, once both sides posted (tests/gen/planted.py slows one)."""
        return self.lat_us

    def cost(self, s: int, kind: str, mb: int = 0) -> int:
        c = self.f_us if kind == "F" else self.b_us
        j = (s * 7919 + mb * 104729 + (kind == "B") * 13) % (2 * self.jitter_us + 1) - self.jitter_us
        return c * (self.slow_factor if s == self.slow_stage else 1) + j


@dataclass
class Answer:
    window_us: int
    busy_us: dict[int, int]  # stage -> busy
    bubble: dict[int, float]  # stage -> 1 − busy / window
    formula: float  # (p−1)/(m+p−1)
    actions: dict[int, list[tuple[str, int, int, int]]]  # stage -> (kind, mb, start, end), step-relative µs
    transfers: list[dict] = field(default_factory=list)
    allreduce_start: dict[int, int] = field(default_factory=dict)  # stage -> arrival at the all-reduce


def order(schedule: str, s: int, p: int, m: int) -> list[tuple[str, int]]:
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - 1 - s, m)
    out = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        out += [("F", warm + i), ("B", i)]
    return out + [("B", i) for i in range(m - warm, m)]


def simulate(c: Case) -> Answer:
    orders = {s: order(c.schedule, s, c.p, c.m) for s in range(c.p)}
    pos, free = {s: 0 for s in range(c.p)}, {s: 0 for s in range(c.p)}
    done: dict[tuple[int, str, int], int] = {}
    acts: dict[int, list] = {s: [] for s in range(c.p)}
    transfers = []
    left = sum(len(o) for o in orders.values())
    while left:
        moved = False
        for s in range(c.p):
            while pos[s] < len(orders[s]):
                kind, i = orders[s][pos[s]]
                src = s - 1 if kind == "F" else s + 1  # the neighbour whose output this action consumes
                if 0 <= src < c.p:
                    if (src, kind, i) not in done:
                        break
                    send_post, recv_post = done[(src, kind, i)], free[s]
                    end = max(send_post, recv_post) + c.link_us(src, s)
                    transfers.append({"kind": kind, "mb": i, "src": src, "dst": s, "send": send_post,
                                      "recv": recv_post, "end": end})
                    start = max(free[s], end)
                else:
                    start = free[s]
                end = start + c.cost(s, kind, i)
                acts[s].append((kind, i, start, end))
                done[(s, kind, i)] = end
                free[s] = end
                pos[s] += 1
                left -= 1
                moved = True
        assert moved, "schedule deadlocked"
    lo = min(a[2] for v in acts.values() for a in v)
    hi = max(a[3] for v in acts.values() for a in v)
    busy = {s: sum(a[3] - a[2] for a in v) for s, v in acts.items()}
    return Answer(window_us=hi - lo, busy_us=busy, bubble={s: 1 - b / (hi - lo) for s, b in busy.items()},
                  formula=(c.p - 1) / (c.m + c.p - 1), actions=acts, transfers=transfers,
                  allreduce_start={s: free[s] + 5 for s in range(c.p)})


def _pg_args(c: Case, kind: str, nelems: int) -> dict:
    return {"Collective name": kind, "dtype": "BFloat16", "In msg nelems": nelems, "Out msg nelems": nelems,
            "Group size": c.p, "Process Group Name": "2", "Process Group Description": c.pg_desc,
            "Process Group Ranks": [c.rank(s) for s in range(c.p)]}


def build(c: Case, world_size: int | None = None) -> tuple[list[TraceBuilder], Answer]:
    """One TraceBuilder per stage (index = stage) and the exact answer of one step (every step is the same)."""
    ans = simulate(c)
    period = ans.window_us + STEP_GAP_US
    ar_end = max(ans.allreduce_start.values()) + c.allreduce_us
    world = world_size or max(c.rank(s) for s in range(c.p)) + 1
    out = []
    for s in range(c.p):
        b = TraceBuilder(rank=c.rank(s), world_size=world, host_name=f"node{c.rank(s) // 8}",
                         pg_config=[{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))},
                                    {"pg_name": "2", "pg_desc": c.pg_desc, "pg_size": c.p,
                                     "ranks": [c.rank(x) for x in range(c.p)]}])
        b.thread_name(AUTOGRAD, "pt_autograd_0")
        seq = 0
        for k in range(c.steps):
            k0 = k * period
            dev = k0 + 100  # device time 0 of this step's simulation
            b.step(k + 1, k0, k0 + ans.window_us + 1000)
            # Device work at its simulated time; the host runs ahead, each launch in a slot of its own
            # so no launch falls inside another op's host span (a kernel is what its launching op says).
            work = [(st, "act", (kind, i, st, en)) for kind, i, st, en in ans.actions[s]]
            for x in ans.transfers:
                for side in ("send", "recv"):
                    me, peer = (x["src"], x["dst"]) if side == "send" else (x["dst"], x["src"])
                    if me == s:
                        work.append((x[side], side, (peer, x[side], x["end"])))
            work.sort(key=lambda w: (w[0], w[1] != "act"))
            for j, (_, what, v) in enumerate(work):
                h = k0 + 10 + 30 * j
                if what == "act":
                    kind, i, st, en = v
                    tid = MAIN if kind == "F" else AUTOGRAD
                    op = "aten::mm" if kind == "F" else "autograd::engine::evaluate_function: MmBackward0"
                    b.cpu_op(op, h, 10, tid=tid)
                    n = max(2, c.split_kernels)
                    gap = 2 if n > 2 else 0
                    piece = (en - st - gap * (n - 1)) // n
                    at = st
                    for q in range(n):
                        dur = piece if q < n - 1 else en - at  # the last kernel ends exactly at the action's end
                        b.kernel(GEMM if q % 2 == 0 else ELTWISE, dev + at, dur, stream=COMPUTE_STREAM,
                                 launch_at=h + 2 + q % 8, tid=tid)
                        at += piece + gap
                    continue
                peer, post, end = v
                seq += 1
                args = {**_pg_args(c, what, 1 << 20), "Seq": seq}
                if c.peer_ranks:
                    args["Dst Rank" if what == "send" else "Src Rank"] = c.rank(peer)
                b.cpu_op("record_param_comms", h, 10, tid=MAIN, args=args)
                b.cpu_op(f"nccl:{what}", h + 1, 8, tid=MAIN)
                stream = 40 + 2 * peer + (what == "recv")  # torch: one NCCL communicator per peer pair
                b.kernel(SENDRECV, dev + post, end - post, stream=stream, launch_at=h + 2,
                         args=args if c.kernel_args else None)
            h = k0 + 10 + 30 * len(work)
            st = dev + ans.allreduce_start[s]
            args = {**_pg_args(c, "allreduce", 1 << 10), "Seq": k + 1}  # torch numbers collectives apart from p2p
            b.cpu_op("record_param_comms", h, 10, tid=MAIN, args=args)
            b.kernel(ALLREDUCE, st, dev + ar_end - st, stream=AR_STREAM, launch_at=h + 2,
                     args=args if c.kernel_args else None)
            if c.optimizer_us:
                b.cpu_op("Optimizer.step#AdamW.step", h + 12, 10, tid=MAIN)
                b.kernel(OPTIMIZER, dev + ar_end + 10, c.optimizer_us, stream=COMPUTE_STREAM, launch_at=h + 14)
        out.append(b)
    return out, ans


def write(c: Case, folder, world_size: int | None = None) -> Answer:
    builders, ans = build(c, world_size)
    for b in builders:
        b.write(f"{folder}/rank{b.rank}.pt.trace.json.gz")
    return ans
