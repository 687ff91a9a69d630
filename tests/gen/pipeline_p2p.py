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

from tests.gen.builder import TraceBuilder
from tests.gen.pipeline import AUTOGRAD, ELTWISE, GEMM, MAIN, SENDRECV, order

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

    def cost(self, a: tuple) -> int:
        """F f_us; a full backward b_us; its input and weight halves b_us / 2 each; the last stage adds the head."""
        s, kind, _ = a
        base = {"F": self.f_us, "B": self.b_us, "I": self.b_us // 2, "W": self.b_us - self.b_us // 2}[kind]
        last = self.p * (1 if self.schedule in ("1f1b", "gpipe") else 2) - 1
        return base + (self.last_extra_us if s == last else 0)

    @property
    def label(self) -> str:
        return (f"{self.schedule} p={self.p} m={self.m} {'batched' if self.batched else 'single'} "
                f"{'peers' if self.peer_ranks else 'no-peers'} {self.threads}thr")


@dataclass
class P2PAnswer:
    window_us: int
    bubble: dict[int, float]  # rank -> 1 − busy / window
    formula: float
    actions: dict[int, list[tuple[tuple, int, int]]]  # rank -> ((stage, kind, mb), start, end)
    batches: dict[int, list[dict]] = field(default_factory=dict)  # rank -> [{post, end, ops: [(kind, peer, key)]}]


SCHEDULES = {  # our name -> (torch.distributed.pipelining class, stages per rank, V-shaped placement)
    "interleaved1f1b": ("ScheduleInterleaved1F1B", 2, False),
    "zb": ("ScheduleInterleavedZeroBubble", 2, False),
    "zbv": ("ScheduleZBVZeroBubble", 2, True),
    "dualpipev": ("ScheduleDualPipeV", 2, True),
}
Act = tuple[int, str, int]  # (stage, kind F/I/W/B, microbatch)


def orders(c: P2PCase) -> tuple[dict[int, list[Act]], int]:
    """Each rank's action order and the number of stages. 1F1B from tests/gen_pipeline.order; the others are
    torch.distributed.pipelining's own `pipeline_order` for the schedule (OVERLAP_F_B pairs run as their F then
    their B, as the runtime does without an overlap hook)."""
    if c.schedule in ("1f1b", "gpipe"):
        return {s: [(s, k, i) for k, i in order(c.schedule, s, c.p, c.m)] for s in range(c.p)}, c.p
    import torch
    from torch.distributed.pipelining import schedules

    cls_name, v, vee = SCHEDULES[c.schedule]
    n = c.p * v

    class _Stage:  # what the schedules read of a stage to plan their order
        def __init__(self, idx: int, r: int):
            self.stage_index, self.num_stages, self.group_size, self.group_rank = idx, n, c.p, r
            self.is_first, self.is_last = idx == 0, idx == n - 1
            self.submod, self.has_backward, self.device = torch.nn.Linear(1, 1), True, torch.device("cpu")

    stages = [_Stage(0, 0), _Stage(n - 1, 0)] if vee else [_Stage(ch * c.p, 0) for ch in range(v)]
    plan = getattr(schedules, cls_name)(stages, c.m, loss_fn=lambda a, b: a).pipeline_order
    out: dict[int, list[Act]] = {}
    for r in range(c.p):
        seq: list[Act] = []
        for a in plan[r]:
            if a is None:
                continue
            for x in (a.sub_actions or ()) if str(a.computation_type).endswith("OVERLAP_F_B") else (a,):
                kind = {"FORWARD": "F", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W",
                        "FULL_BACKWARD": "B"}[str(x.computation_type).rsplit(".", 1)[-1]]
                seq.append((x.stage_index, kind, x.microbatch_index))
        out[r] = seq
    return out, n


def _deps(a: Act, last: int, has: set) -> list[Act]:
    """What an action consumes: F the previous stage's F; I/B its own F and the next stage's I or B; W its I."""
    s, k, i = a
    if k == "F":
        return [(s - 1, "F", i)] if s > 0 else []
    if k in ("I", "B"):
        nxt = [(s + 1, x, i) for x in ("I", "B") if (s + 1, x, i) in has] if s < last else []
        return [(s, "F", i)] + nxt
    return [(s, "I", i)]


def simulate(c: P2PCase) -> P2PAnswer:
    """Megatron (1F1B, batched): between two actions a rank posts one batch holding the sends of what the action
    before produced and the receives the next action needs, and waits for all of them. torch-style (the others,
    batched): the sends as one batch, never waited for; the receives as another, waited for. Single ops: a send
    is posted when its producer ends and blocks nothing; a receive when the consumer is reached, and the
    consumer waits for it. A receive goes out early where its sender sends something before what is needed
    (NCCL pairs a pair's ops in posting order). Each op completes `lat_us` after both sides are posted. An input
    made on the same rank (the V's turn) moves nothing."""
    order_of, n = orders(c)
    rank_of = {a[0]: r for r, seq in order_of.items() for a in seq}
    has = {a for seq in order_of.values() for a in seq}
    ins = {a: [d for d in _deps(a, n - 1, has) if rank_of[d[0]] != rank_of[a[0]]] for a in has}
    outs: dict[Act, list[Act]] = {}
    for a, ds in ins.items():
        for d in ds:
            outs.setdefault(d, []).append(a)
    local = {a: [d for d in _deps(a, n - 1, has) if rank_of[d[0]] == rank_of[a[0]]] for a in has}
    acts: dict[int, list] = {r: [] for r in order_of}
    batches: dict[int, list] = {r: [] for r in order_of}
    done: dict[Act, int] = {}
    # NCCL matches a pair's sends and receives in posting order: a receive is posted (early if need be) after every
    # receive its sender sends before it, so each pair's two sides post the same keys in the same order.
    pair_order: dict[tuple, list] = {}
    for r, seq in order_of.items():
        for a in seq:
            for b in outs.get(a, []):
                pair_order.setdefault((r, rank_of[b[0]]), []).append((a, b))
    items = {}
    for r, seq in order_of.items():
        out, prev, taken = [], None, {}
        for a in seq + [None]:
            sends = [("send", rank_of[b[0]], (prev, b)) for b in outs.get(prev, [])] if prev else []
            need = [(rank_of[d[0]], (d, a)) for d in ins[a]] if a else []
            recvs = []
            for src, key in need:
                keys = pair_order[(src, r)]
                upto = keys.index(key) + 1
                recvs += [("recv", src, k) for k in keys[taken.get(src, 0):upto]]
                taken[src] = max(taken.get(src, 0), upto)
            wait = [key for _, key in need]
            if c.batched and c.schedule in ("1f1b", "gpipe") and sends + recvs:  # Megatron: one batch, waited on
                out.append(("batch", sends + recvs))
            elif c.batched:  # torch.distributed.pipelining: the sends as one batch, the receives as another
                out += ([("sends", sends)] if sends else []) + ([("batch", recvs)] if recvs else [])
                out += [("wait", wait)] if wait else []
            else:
                out += [("sends", [o]) for o in sends] + [("sends", [o]) for o in recvs]
                out += [("wait", wait)] if wait else []
            if a:
                out.append(("act", a))
            prev = a
        items[r] = out
    post: dict[tuple, dict[str, int]] = {}
    pos, free = {r: 0 for r in items}, {r: 0 for r in items}
    posted: dict[int, int | None] = {r: None for r in items}
    left = sum(len(v) for v in items.values())
    while left:
        moved = False
        for r in items:
            while pos[r] < len(items[r]):
                what, v = items[r][pos[r]]
                if what == "act":
                    if any(d not in done for d in local[v]):
                        break
                    st = max([free[r]] + [done[d] for d in local[v]])
                    en = st + c.cost(v)
                    acts[r].append((v, st, en))
                    done[v] = free[r] = en
                elif what == "sends":  # posted now (a send, or a receive posted ahead), waited for later if at all
                    for kind, _, key in v:
                        post.setdefault(key, {})[kind] = free[r]
                    batches[r].append({"post": free[r], "ops": v})
                elif what == "wait":  # the inputs of the next action, posted before
                    if not all(len(post.get(key, {})) == 2 for key in v):
                        break
                    free[r] = max([free[r]] + [max(post[key].values()) + c.lat_us for key in v])
                else:  # a batch (receives, with Megatron's sends): posted now, waited for as a whole
                    if posted[r] is None:
                        posted[r] = free[r]
                        for kind, _, key in v:
                            post.setdefault(key, {})[kind] = free[r]
                        moved = True
                    if not all(len(post.get(key, {})) == 2 for _, _, key in v):
                        break
                    end = max(max(post[key].values()) + c.lat_us for _, _, key in v)
                    batches[r].append({"post": posted[r], "end": end, "ops": v})
                    free[r], posted[r] = end, None
                pos[r] += 1
                left -= 1
                moved = True
        assert moved, f"{c.label}: deadlocked"
    for r, bs in batches.items():  # a send batch ends when its last transfer does
        for b in bs:
            if "end" not in b:
                b["end"] = max(max(post[key].values()) + c.lat_us for _, _, key in b["ops"])
    lo = min(x[1] for v in acts.values() for x in v)
    hi = max(x[2] for v in acts.values() for x in v)
    busy = {r: sum(x[2] - x[1] for x in v) for r, v in acts.items()}
    return P2PAnswer(hi - lo, {r: 1 - b / (hi - lo) for r, b in busy.items()}, _formula(c), acts,
                     {r: sorted(v, key=lambda b: b["post"]) for r, v in batches.items()})


def _formula(c: P2PCase) -> float:
    """The schedule's own bubble: (p−1)/(m+p−1) for 1F1B, (p−1)/(v·m+p−1) interleaved, 0 for zero-bubble ones."""
    if c.schedule in ("1f1b", "gpipe"):
        return (c.p - 1) / (c.m + c.p - 1)
    if c.schedule == "interleaved1f1b":
        return (c.p - 1) / (2 * c.m + c.p - 1)
    return 0.0


def _pg(c: P2PCase, name: str, extra: dict | None = None) -> dict:
    return {"Collective name": name, "dtype": "BFloat16", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
            "Group size": c.p, "Process Group Name": "2", "Process Group Description": c.pg_desc,
            "Process Group Ranks": list(range(c.p)), **(extra or {})}


def build(c: P2PCase) -> tuple[list[TraceBuilder], P2PAnswer]:
    """One TraceBuilder per rank; every step repeats the simulated one."""
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
            work = [(a[1], 1, "act", a) for a in ans.actions[s]]
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
    (_, kind, _), st, en = a
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
    stream = 40 + min(s, peer) * c.p + max(s, peer)  # one communicator (and stream) per peer pair, both directions
    b.kernel(SENDRECV, dev + bt["post"], bt["end"] - bt["post"], stream=stream, launch_at=h + 2, args=args)


def write(c: P2PCase, folder) -> P2PAnswer:
    builders, ans = build(c)
    for b in builders:
        b.write(f"{folder}/rank{b.rank}.pt.trace.json.gz")
    return ans
