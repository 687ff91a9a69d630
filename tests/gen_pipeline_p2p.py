"""GPU pipeline traces as torch and Megatron-core write them, with batched or single-op p2p, and exact answers.

Variants (`P2PCase`), each written with the names and args real jobs produce (issue 23 item 1):

- `batched=True`: Megatron-core's `p2p_communication._batched_p2p_ops` / `torch.distributed.batch_isend_irecv`.
  Between two actions a rank posts one batch holding the sends of the action it just ran and the receive of the
  action it runs next, then waits for all of them. On the host each op is a dispatcher op (`c10d::send`,
  `c10d::recv_`) enclosing a `record_param_comms` with `Collective name` send/recv (and, from torch 2.4 on,
  `Dst Rank`/`Src Rank`), launching nothing; `ProcessGroupNCCL::endCoalescing` then opens `nccl:coalesced`, whose
  `record_param_comms` (`Collective name` "coalesced") launches ONE `ncclDevKernel_SendRecv` for the whole batch on
  the group's communicator stream. The kernel runs from the batch's post to the last of its transfers.
- `batched=False`: torch.distributed.pipelining's single ops: `isend` as soon as the producing action ends,
  `irecv` when the consumer reaches its action (which waits for it); each `nccl:send`/`nccl:recv` op launches its
  own kernel on the stream of the communicator of that peer pair (ProcessGroupNCCL keys p2p communicators by the
  pair `low:high`, so a send to and a receive from one peer share a stream). With `peer_ranks` its title names the
  group ranks (`nccl:send 0->1`, `nccl:recv 1<-0`), as torch ≥ 2.1 writes it.
- `peer_ranks=False`: a torch build before `Src Rank`/`Dst Rank` existed: no peer in any arg or name.
- `threads=2`: backward launched from the autograd engine's device thread (torch's default); `threads=1`: from the
  training thread too (CPU-side autograd, compiled autograd, some wrappers). Backward kernels are launched under
  `autograd::engine::evaluate_function: …Backward0` ops in both.

The answer is this module's own simulation of the schedule (orders from tests/gen_pipeline.order): per-stage
bubble = 1 − busy / window over one step, window = first action start to last action end over all stages. It is
written from the semantics above, not from the analyzer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.builder import TraceBuilder
from tests.gen_pipeline import AUTOGRAD, ELTWISE, GEMM, MAIN, SENDRECV, order

AR_STREAM, COMPUTE_STREAM, STEP_GAP_US = 20, 7, 2000
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass
class P2PCase:
    p: int
    m: int
    batched: bool = True
    peer_ranks: bool = True
    threads: int = 2
    schedule: str = "1f1b"
    f_us: int = 400
    b_us: int = 800
    last_extra_us: int = 0  # the last stage's LM head + loss, on its F and B
    lat_us: int = 20
    steps: int = 2
    pg_desc: str = "mesh_pp"

    def cost(self, s: int, kind: str) -> int:
        return (self.f_us if kind == "F" else self.b_us) + (self.last_extra_us if s == self.p - 1 else 0)

    @property
    def label(self) -> str:
        return (f"{self.schedule} p={self.p} m={self.m} {'batched' if self.batched else 'single'} "
                f"{'peers' if self.peer_ranks else 'no-peers'} {self.threads}thr")


@dataclass
class P2PAnswer:
    window_us: int
    bubble: dict[int, float]  # stage -> 1 − busy / window
    formula: float
    actions: dict[int, list[tuple[str, int, int, int]]]  # stage -> (kind, mb, start, end)
    batches: dict[int, list[dict]] = field(default_factory=dict)  # stage -> [{post, end, ops: [(kind, peer, key)]}]


def _inputs(kind: str, s: int, p: int) -> int | None:
    """The neighbour whose output the action consumes, if any."""
    src = s - 1 if kind == "F" else s + 1
    return src if 0 <= src < p else None


def _outputs(kind: str, s: int, p: int) -> int | None:
    dst = s + 1 if kind == "F" else s - 1
    return dst if 0 <= dst < p else None


def simulate(c: P2PCase) -> P2PAnswer:
    """Batched: rank s runs [batch_0, a_0, batch_1, a_1, …, batch_n]; batch_k holds the send of a_{k−1}'s output
    and the receive of a_k's input, is posted when a_{k−1} ends and completes when every op in it has completed;
    an op completes `lat_us` after both of its sides are posted. Single ops: a send is posted when its action ends
    and blocks nothing; a receive is posted when the consumer is reached and blocks it."""
    orders = {s: order(c.schedule, s, c.p, c.m) for s in range(c.p)}
    acts: dict[int, list] = {s: [] for s in range(c.p)}
    batches: dict[int, list] = {s: [] for s in range(c.p)}
    if c.batched:
        items = {}
        for s in range(c.p):
            seq, prev = [], None
            for kind, i in orders[s] + [(None, None)]:
                ops = []
                if prev is not None and (d := _outputs(prev[0], s, c.p)) is not None:
                    ops.append(("send", d, (prev[0], prev[1], s, d)))
                if kind is not None and (src := _inputs(kind, s, c.p)) is not None:
                    ops.append(("recv", src, (kind, i, src, s)))
                if ops:
                    seq.append(("batch", ops))
                if kind is not None:
                    seq.append(("act", (kind, i)))
                prev = (kind, i)
            items[s] = seq
        post: dict[tuple, dict[str, int]] = {}  # transfer key -> {"send": t, "recv": t}
        pos, free = {s: 0 for s in range(c.p)}, {s: 0 for s in range(c.p)}
        posted = {s: None for s in range(c.p)}
        left = sum(len(v) for v in items.values())
        while left:
            moved = False
            for s in range(c.p):
                while pos[s] < len(items[s]):
                    what, v = items[s][pos[s]]
                    if what == "act":
                        kind, i = v
                        st, en = free[s], free[s] + c.cost(s, kind)
                        acts[s].append((kind, i, st, en))
                        free[s] = en
                    else:
                        if posted[s] is None:
                            posted[s] = free[s]
                            for kind_, _, key in v:
                                post.setdefault(key, {})[kind_] = free[s]
                                moved = True
                        if not all(len(post.get(key, {})) == 2 for _, _, key in v):
                            break
                        end = max(max(post[key].values()) + c.lat_us for _, _, key in v)
                        batches[s].append({"post": posted[s], "end": end, "ops": v})
                        free[s], posted[s] = end, None
                    pos[s] += 1
                    left -= 1
                    moved = True
            assert moved, "batched schedule deadlocked"
    else:
        done: dict[tuple, int] = {}
        pos, free = {s: 0 for s in range(c.p)}, {s: 0 for s in range(c.p)}
        left = sum(len(o) for o in orders.values())
        while left:
            moved = False
            for s in range(c.p):
                while pos[s] < len(orders[s]):
                    kind, i = orders[s][pos[s]]
                    src = _inputs(kind, s, c.p)
                    start = free[s]
                    if src is not None:
                        if (src, kind, i) not in done:
                            break
                        send_post, recv_post = done[(src, kind, i)], free[s]
                        end = max(send_post, recv_post) + c.lat_us
                        batches[s].append({"post": recv_post, "end": end, "ops": [("recv", src, (kind, i, src, s))]})
                        batches[src].append({"post": send_post, "end": end, "ops": [("send", s, (kind, i, src, s))]})
                        start = end
                    en = start + c.cost(s, kind)
                    acts[s].append((kind, i, start, en))
                    done[(s, kind, i)] = en
                    free[s] = en
                    pos[s] += 1
                    left -= 1
                    moved = True
            assert moved, "schedule deadlocked"
    lo = min(a[2] for v in acts.values() for a in v)
    hi = max(a[3] for v in acts.values() for a in v)
    busy = {s: sum(a[3] - a[2] for a in v) for s, v in acts.items()}
    return P2PAnswer(hi - lo, {s: 1 - b / (hi - lo) for s, b in busy.items()}, (c.p - 1) / (c.m + c.p - 1), acts,
                     {s: sorted(v, key=lambda b: b["post"]) for s, v in batches.items()})


def _pg(c: P2PCase, name: str, extra: dict | None = None) -> dict:
    return {"Collective name": name, "dtype": "BFloat16", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
            "Group size": c.p, "Process Group Name": "2", "Process Group Description": c.pg_desc,
            "Process Group Ranks": list(range(c.p)), **(extra or {})}


def build(c: P2PCase) -> tuple[list[TraceBuilder], P2PAnswer]:
    """One TraceBuilder per stage (rank = stage); every step repeats the simulated one."""
    ans = simulate(c)
    period = ans.window_us + STEP_GAP_US
    out = []
    for s in range(c.p):
        b = TraceBuilder(rank=s, world_size=c.p, host_name="node0",
                         pg_config=[{"pg_name": "0", "pg_desc": "default_pg", "pg_size": c.p, "ranks": list(range(c.p))},
                                    {"pg_name": "2", "pg_desc": c.pg_desc, "pg_size": c.p, "ranks": list(range(c.p))}])
        b.thread_name(AUTOGRAD, "pt_autograd_0")
        for k in range(c.steps):
            k0 = k * period
            dev = k0 + 100
            b.step(k + 1, k0, k0 + ans.window_us + 1000)
            work = [(st, 1, "act", a) for a in ans.actions[s] for st in [a[2]]]
            work += [(bt["post"], 0, "batch", bt) for bt in ans.batches[s]]
            work.sort(key=lambda w: (w[0], w[1]))
            for j, (_, _, what, v) in enumerate(work):
                h = k0 + 10 + 40 * j  # each launch in a host slot of its own, ahead of the device
                if what == "act":
                    _action(b, c, v, h, dev)
                elif c.batched:
                    _batch(b, c, s, v, h, dev)
                else:
                    _single(b, c, s, v, h, dev)
            h = k0 + 10 + 40 * len(work)
            b.cpu_op("record_param_comms", h, 10, tid=MAIN, args=_pg(c, "allreduce", {"Seq": k + 1}))
            b.kernel(ALLREDUCE, dev + ans.window_us + 50, 100, stream=AR_STREAM, launch_at=h + 2)
        out.append(b)
    return out, ans


def _action(b: TraceBuilder, c: P2PCase, a: tuple, h: int, dev: int) -> None:
    kind, _, st, en = a
    tid = MAIN if kind == "F" or c.threads == 1 else AUTOGRAD
    op = "aten::mm" if kind == "F" else "autograd::engine::evaluate_function: MmBackward0"
    b.cpu_op(op, h, 20, tid=tid)
    half = (en - st) // 2
    b.kernel(GEMM, dev + st, half, stream=COMPUTE_STREAM, launch_at=h + 2, tid=tid)
    b.kernel(ELTWISE, dev + st + half, en - st - half, stream=COMPUTE_STREAM, launch_at=h + 4, tid=tid)


def _batch(b: TraceBuilder, c: P2PCase, s: int, bt: dict, h: int, dev: int) -> None:
    """`batch_isend_irecv`: c10d::send / c10d::recv_ per op (record_param_comms inside, no launch), then
    `nccl:coalesced` launching one SendRecv kernel on the group's stream."""
    at = h
    for kind, peer, _ in bt["ops"]:
        op = "c10d::send" if kind == "send" else "c10d::recv_"
        b.cpu_op(op, at, 6, tid=MAIN)
        extra = {("Dst Rank" if kind == "send" else "Src Rank"): peer} if c.peer_ranks else {}
        b.cpu_op("record_param_comms", at + 1, 4, tid=MAIN, args=_pg(c, kind, extra))
        at += 7
    b.cpu_op("nccl:coalesced", at, 8, tid=MAIN)
    args = _pg(c, "coalesced")
    b.cpu_op("record_param_comms", at + 1, 6, tid=MAIN, args=args)
    b.kernel(SENDRECV, dev + bt["post"], bt["end"] - bt["post"], stream=30, launch_at=at + 2, args=args)


def _single(b: TraceBuilder, c: P2PCase, s: int, bt: dict, h: int, dev: int) -> None:
    ((kind, peer, _),) = bt["ops"]
    title = (f"nccl:send {s}->{peer}" if kind == "send" else f"nccl:recv {s}<-{peer}") if c.peer_ranks \
        else f"nccl:{kind}"
    extra = {("Dst Rank" if kind == "send" else "Src Rank"): peer} if c.peer_ranks else {}
    args = _pg(c, kind, extra)
    b.cpu_op(title, h, 10, tid=MAIN)
    b.cpu_op("record_param_comms", h + 1, 8, tid=MAIN, args=args)
    stream = 40 + min(s, peer)  # one communicator (and stream) per peer pair, for both directions
    b.kernel(SENDRECV, dev + bt["post"], bt["end"] - bt["post"], stream=stream, launch_at=h + 2, args=args)


def write(c: P2PCase, folder) -> P2PAnswer:
    builders, ans = build(c)
    for b in builders:
        b.write(f"{folder}/rank{b.rank}.pt.trace.json.gz")
    return ans
