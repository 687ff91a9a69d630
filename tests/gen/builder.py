"""A small synthetic Kineto trace builder for tests with exact, hand-computed answers.

Times are integer microseconds relative to `base_us` (the absolute clock of t = 0), so every interval a
test places is exact after llmdiag's conversion to integer nanoseconds. The builder writes what
torch.profiler writes, only the parts the analyzer reads:

- GPU kernels (`cat: kernel`, pid = device, tid = stream) with `stream`, `correlation`, `External id`
  args, each with a matching `cuda_runtime` launch on the host thread that carries the same correlation;
- NCCL kernels with Kineto's collective args (`Collective name`, `In/Out msg nelems`, `dtype`,
  `Group size`, `Process Group Name/Description/Ranks`);
- gloo work spans (`gloo:<op>`, `cat: user_annotation`) on a `pt_gloo_runloop` thread named by an `M`
  thread_name event; cpu_ops on a training thread; ProfilerStep#N and PP:{stage}{F|B}{mb} annotations;
- `[memory]` instant events with Total Allocated / Total Reserved / Bytes / Device Type / Device Id;
- distributedInfo (rank, world_size, backend, pg_config), host_name and deviceProperties.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field

import orjson

MAIN_TID = 100  # the training thread
GLOO_TID = 200  # pt_gloo_runloop
DEFAULT_BASE_US = 1_700_000_000_000  # an epoch-like µs clock, as Kineto writes


@dataclass
class TraceBuilder:
    rank: int | None = 0
    world_size: int | None = 1
    host_name: str | None = "host0"
    backend: str = "nccl"
    base_us: int | float = DEFAULT_BASE_US
    pid: int = 4242
    device: int = 0
    pg_config: list | None = None
    distributed: bool = True  # write distributedInfo at all
    device_properties: list | None = None
    events: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # other top-level keys
    _corr: int = 1000
    _ext: int = 1

    # ---------------------------------------------------------------- host side
    def _abs(self, t):
        return self.base_us + t

    def raw(self, event: dict) -> "TraceBuilder":
        self.events.append(event)
        return self

    def thread_name(self, tid: int, name: str, pid: int | None = None) -> "TraceBuilder":
        return self.raw({"name": "thread_name", "ph": "M", "ts": self._abs(0), "pid": pid or self.pid, "tid": tid,
                         "args": {"name": name}})

    def cpu_op(self, name: str, start, dur, tid: int = MAIN_TID, cat: str = "cpu_op", args: dict | None = None):
        self._ext += 1
        a = {"External id": self._ext, **(args or {})}
        return self.raw({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": self._abs(start),
                         "dur": dur, "args": a})

    def annotation(self, name: str, start, dur, tid: int = MAIN_TID) -> "TraceBuilder":
        return self.cpu_op(name, start, dur, tid=tid, cat="user_annotation")

    def step(self, n: int, start, end, tid: int = MAIN_TID) -> "TraceBuilder":
        return self.annotation(f"ProfilerStep#{n}", start, end - start, tid)

    def pp(self, stage: int, kind: str, mb: int, start, end, tid: int = MAIN_TID, gpu_stream: int | None = None):
        """A pipeline action label PP:{stage}{kind}{mb}; on the device too when gpu_stream is given."""
        name = f"PP:{stage}{kind}{mb}"
        self.annotation(name, start, end - start, tid)
        if gpu_stream is not None:
            self.raw({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": self.device, "tid": gpu_stream,
                      "ts": self._abs(start), "dur": end - start, "args": {"External id": self._ext}})
        return self

    def gloo(self, op: str, start, dur, tid: int = GLOO_TID, dims: list | None = None) -> "TraceBuilder":
        """A gloo work span `gloo:<op>` on the gloo run-loop thread (named by an M event once)."""
        if not any(e.get("ph") == "M" and e.get("tid") == tid for e in self.events):
            self.thread_name(tid, "pt_gloo_runloop")
        args = {"Input Dims": [dims]} if dims is not None else {}
        return self.cpu_op(f"gloo:{op}", start, dur, tid=tid, cat="user_annotation", args=args)

    def memory(self, ts, allocated: int | None, reserved: int | None = None, nbytes: int = 0, device_type: int = 1,
               device_id: int = 0, tid: int = MAIN_TID) -> "TraceBuilder":
        """A `[memory]` instant; allocated=None writes the 2021 schema (signed Bytes only, no totals)."""
        args = {"Device Type": device_type, "Device Id": device_id, "Addr": 1, "Bytes": nbytes}
        if allocated is not None:
            args["Total Allocated"] = allocated
        if reserved is not None:
            args["Total Reserved"] = reserved
        return self.raw({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": self.pid,
                         "tid": tid, "ts": self._abs(ts), "args": args})

    def instant(self, name: str, ts, **extra) -> "TraceBuilder":
        return self.raw({"ph": "i", "s": "g", "name": name, "pid": "", "tid": "", "ts": self._abs(ts), **extra})

    # ---------------------------------------------------------------- device side
    def kernel(self, name: str, start, dur, stream: int = 7, launch_at=None, tid: int = MAIN_TID,
               args: dict | None = None, cat: str = "kernel", launch: bool = True) -> "TraceBuilder":
        """A device event and (unless launch=False) its cudaLaunchKernel at `launch_at` (default: start)."""
        self._corr += 1
        self._ext += 1
        c = self._corr
        if launch:
            at = start if launch_at is None else launch_at
            self.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": self.pid, "tid": tid,
                      "ts": self._abs(at), "dur": 1, "args": {"External id": self._ext, "correlation": c}})
        a = {"External id": self._ext, "device": self.device, "stream": stream, "correlation": c, **(args or {})}
        if cat == "gpu_user_annotation":  # as Kineto writes it: the stream is only the tid
            a = {"External id": self._ext, **(args or {})}
        return self.raw({"ph": "X", "cat": cat, "name": name, "pid": self.device, "tid": stream,
                         "ts": self._abs(start), "dur": dur, "args": a})

    def memcpy(self, start, dur, stream: int = 7, **kw) -> "TraceBuilder":
        return self.kernel("Memcpy HtoD (Pageable -> Device)", start, dur, stream, cat="gpu_memcpy", **kw)

    def memset(self, start, dur, stream: int = 7, **kw) -> "TraceBuilder":
        return self.kernel("Memset (Device)", start, dur, stream, cat="gpu_memset", **kw)

    def nccl(self, coll: str, start, dur, stream: int = 20, nelems: int | None = None, out_nelems: int | None = None,
             dtype: str = "Float", group_size: int | None = None, pg_name: str = "0", pg_desc: str = "default_pg",
             pg_ranks: list | None = None, name: str | None = None, **kw) -> "TraceBuilder":
        """An NCCL kernel with Kineto's collective args; `coll` is allreduce, allgather, reducescatter, ..."""
        kname = name or {
            "allreduce": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "allgather": "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "reducescatter": "ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "broadcast": "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        }.get(coll, f"ncclKernel_{coll}")
        args = {"Collective name": coll, "dtype": dtype, "Process Group Name": pg_name,
                "Process Group Description": pg_desc}
        if nelems is not None:
            args["In msg nelems"] = nelems
            args["Out msg nelems"] = nelems if out_nelems is None else out_nelems
        if group_size is not None:
            args["Group size"] = group_size
        if pg_ranks is not None:
            args["Process Group Ranks"] = pg_ranks
        return self.kernel(kname, start, dur, stream, args=args, **kw)

    # ---------------------------------------------------------------- output
    def header(self) -> dict:
        h: dict = {"schemaVersion": 1}
        if self.device_properties is not None:
            h["deviceProperties"] = self.device_properties
        if self.distributed:
            d = {"backend": self.backend}
            if self.rank is not None:
                d["rank"] = self.rank
            if self.world_size is not None:
                d["world_size"] = self.world_size
            ws = self.world_size or 1
            d["pg_config"] = self.pg_config if self.pg_config is not None else [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": f"cuda:{self.backend}", "pg_size": ws,
                 "ranks": list(range(ws))}]
            h["distributedInfo"] = d
        if self.host_name is not None:
            h["host_name"] = self.host_name
        h.update(self.extra)
        return h

    def to_dict(self) -> dict:
        return {**self.header(), "traceEvents": list(self.events)}

    def to_bytes(self) -> bytes:
        try:
            return orjson.dumps(self.to_dict())
        except TypeError:  # hostile values orjson refuses (integers beyond 64 bits): the stdlib writes them
            return json.dumps(self.to_dict(), ensure_ascii=False).encode("utf-8", "surrogatepass")

    def write(self, path, gz: bool | None = None) -> str:
        path = str(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        data = self.to_bytes()
        if gz if gz is not None else path.endswith(".gz"):
            data = gzip.compress(data)
        with open(path, "wb") as f:
            f.write(data)
        return path


def gpu_rank(rank: int = 0, world_size: int = 2, steps: int = 2, step_us: int = 1000, **kw) -> TraceBuilder:
    """A plain GPU rank: per step a 600 µs compute kernel and a 300 µs allreduce of which 100 µs overlap.

    Step k (k = 1..steps) occupies host [(k-1)·step_us, k·step_us]; on the device the kernels of step k
    run at compute [k0+100, k0+700], comm [k0+600, k0+900] with k0 = (k-1)·step_us, launched at k0+10.
    Device window per step: [k0+100, k0+900] = 800 µs; comm 300, overlapped 100, exposed 200, idle 0.
    """
    b = TraceBuilder(rank=rank, world_size=world_size, **kw)
    for k in range(1, steps + 1):
        k0 = (k - 1) * step_us
        b.step(k, k0, k0 + step_us)
        b.kernel("void gemm_kernel<float>()", k0 + 100, 600, stream=7, launch_at=k0 + 10)
        b.nccl("allreduce", k0 + 600, 300, stream=20, launch_at=k0 + 11, nelems=1 << 20, group_size=world_size,
               pg_ranks=list(range(world_size)))
    return b


def write_gpu_ranks(folder, n: int) -> list[str]:
    """`n` plain GPU ranks of one job written as rank{r}.json in `folder` (rank r with 2 + r steps: told apart by
    their outputs), their paths in rank order."""
    out = []
    for r in range(n):
        p = os.path.join(str(folder), f"rank{r}.json")
        gpu_rank(r, world_size=n, steps=2 + r).write(p)
        out.append(p)
    return out


def cpu_rank(rank: int = 0, world_size: int = 2, steps: int = 2, step_us: int = 1000, **kw) -> TraceBuilder:
    """A plain gloo rank. Per step (k0 = (k-1)·step_us): aten::mm [k0+100, k0+500], the enqueue
    c10d::allreduce_ [k0+500, k0+505] (sync, not compute), gloo:all_reduce [k0+505, k0+805] on the gloo
    thread, aten::add [k0+600, k0+700]. Compute 500, comm 300, overlapped 100, window = the step.
    """
    b = TraceBuilder(rank=rank, world_size=world_size, backend="gloo", **kw)
    b.thread_name(MAIN_TID, "pt_main_thread")
    for k in range(1, steps + 1):
        k0 = (k - 1) * step_us
        b.step(k, k0, k0 + step_us)
        b.cpu_op("aten::mm", k0 + 100, 400)
        b.cpu_op("c10d::allreduce_", k0 + 500, 5)
        b.gloo("all_reduce", k0 + 505, 300, dims=[1024])
        b.cpu_op("aten::add", k0 + 600, 100)
    return b
