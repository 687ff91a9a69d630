"""Generated traces for idle that one host call holds: blocking copies and syncs (CUDA and HIP names), `.item()`,
one long host op, allocator calls, and their silent twins. Each builder returns the trace and the answer the
test checks, placed by hand in microseconds (never computed by the code under test).

Per step k (k0 = (k-1)·STEP): kernel A [k0+10, k0+110] launched at k0+5; the blocking region starts at k0+100
while A still runs; kernel B is launched after the region returns and runs 200 µs. The device window is A's
start to B's end.
"""

from __future__ import annotations

from tests.gen.builder import MAIN_TID, TraceBuilder

STEP = 1_000_000  # 1 s per step: room for a 493 ms copy


def _call(b: TraceBuilder, name: str, start, dur, corr: int | None = None) -> None:
    args = {"correlation": corr} if corr is not None else {}
    b.cpu_op(name, start, dur, cat="cuda_runtime", args=args)


def _copy(b: TraceBuilder, call: str, start, dur, dev_name: str, dev_start, dev_dur) -> None:
    """A copy call [start, start+dur] on the host and its device copy, one correlation."""
    b.kernel(dev_name, dev_start, dev_dur, stream=7, cat="gpu_memcpy", launch=False)
    _call(b, call, start, dur, corr=b._corr)


def blocking_copy(kind: str, d_us: int, steps: int = 2) -> tuple[TraceBuilder, dict]:
    """`kind`: "hip" (hipMemcpyWithStream), "cuda" (cudaMemcpy), "pageable_async" (cudaMemcpyAsync to pageable
    memory), "sync" (cudaStreamSynchronize alone), "item" (aten::item → _local_scalar_dense → cudaMemcpyAsync +
    cudaStreamSynchronize). The call holds the host d_us from k0+106; the answer: the idle it holds per step,
    the op the idle breakdown names, the call the stretch names, and that call's enclosing ops."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, steps + 1):
        k0 = (k - 1) * STEP
        b.step(k, k0, k0 + STEP - 1000)
        b.kernel("void gemm_a_kernel()", k0 + 10, 100, launch_at=k0 + 5)  # [10, 110]
        end = k0 + 106 + d_us  # the call returns
        if kind in ("hip", "cuda", "pageable_async"):
            b.cpu_op("aten::to", k0 + 100, d_us + 12)
            b.cpu_op("aten::_to_copy", k0 + 102, d_us + 8)
            b.cpu_op("aten::copy_", k0 + 104, d_us + 4)
            call = {"hip": "hipMemcpyWithStream", "cuda": "cudaMemcpy", "pageable_async": "cudaMemcpyAsync"}[kind]
            # ROCm names the copy by direction only (no Pageable/Pinned): the call's name alone makes it blocking
            dev = {"hip": "Memcpy HtoD (Host -> Device)", "cuda": "Memcpy HtoD (Pinned -> Device)",
                   "pageable_async": "Memcpy DtoH (Device -> Pageable)"}[kind]
            _copy(b, call, k0 + 106, d_us, dev, end - 2, 2)  # device copy [end-2, end]
            idle_held = (end - 2) - (k0 + 110)  # A ends at 110; the copy's own device event ends the gap
            named, stack = call, ["aten::copy_", "aten::_to_copy", "aten::to"]
        elif kind == "sync":
            b.cpu_op("aten::synchronize_wrapper", k0 + 100, d_us + 12)  # a user op around a bare sync
            _call(b, "cudaStreamSynchronize", k0 + 106, d_us)
            idle_held = end - (k0 + 110)
            named, stack = "cudaStreamSynchronize", ["aten::synchronize_wrapper"]
        else:  # .item(): the D2H copy runs at once, the host then waits in the sync
            b.cpu_op("aten::item", k0 + 100, d_us + 12)
            b.cpu_op("aten::_local_scalar_dense", k0 + 101, d_us + 10)
            _copy(b, "cudaMemcpyAsync", k0 + 104, 2, "Memcpy DtoH (Device -> Pinned)", k0 + 110, 2)  # [110, 112]
            _call(b, "cudaStreamSynchronize", k0 + 106, d_us)
            idle_held = d_us  # aten::item holds [112, 112 + d_us] (it ends at k0 + 112 + d_us)
            named, stack = "cudaStreamSynchronize", ["aten::_local_scalar_dense", "aten::item"]
        b.kernel("void gemm_b_kernel()", end + 24, 200, launch_at=end + 20)  # launched after the call returns
    top = "aten::item" if kind == "item" else named
    return b, {"held_ms": idle_held / 1000, "op": top, "call": named, "stack": stack}


def async_copy_twin(steps: int = 2) -> TraceBuilder:
    """The silent twin: a cudaMemcpyAsync from pinned memory whose copy overlaps kernel A, and kernel B queued
    behind it: no idle held by any call."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, steps + 1):
        k0 = (k - 1) * STEP
        b.step(k, k0, k0 + 2000)
        b.kernel("void gemm_a_kernel()", k0 + 10, 1000, launch_at=k0 + 5)  # [10, 1010]
        b.cpu_op("aten::to", k0 + 20, 12)
        _copy(b, "cudaMemcpyAsync", k0 + 24, 4, "Memcpy HtoD (Pinned -> Device)", k0 + 30, 50)
        b.kernel("void gemm_b_kernel()", k0 + 1010, 500, launch_at=k0 + 40)  # queued: runs right after A
    return b


def host_op(d_us: int, steps: int = 3, op: str = "aten::split_with_sizes") -> TraceBuilder:
    """One long host op per step [k0+120, k0+120+d_us] under `KeyedJaggedTensor.split`, launching nothing; kernel
    B launched after it. The idle it holds: [k0+110, k0+120+d_us] less the 10 µs before the op (host-bound)."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, steps + 1):
        k0 = (k - 1) * STEP
        b.step(k, k0, k0 + 2 * d_us)
        b.kernel("void gemm_a_kernel()", k0 + 10, 100, launch_at=k0 + 5)  # [10, 110]
        b.annotation("KeyedJaggedTensor.split", k0 + 115, d_us + 10)
        b.cpu_op(op, k0 + 120, d_us)
        b.kernel("void gemm_b_kernel()", k0 + 130 + d_us, 200, launch_at=k0 + 125 + d_us)
    return b


def many_launches(n: int, gap_us: int, steps: int = 3) -> TraceBuilder:
    """The twin of host_op: idle made of n gaps of gap_us between n 2-µs kernels, each gap filled by its own short
    host op that launches the next kernel at its end (launch-bound when n is large and gap_us small)."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, steps + 1):
        k0 = (k - 1) * STEP
        b.step(k, k0, k0 + n * (gap_us + 2) + 100)
        t = k0 + 10
        for _ in range(n):
            b.cpu_op("aten::add", t + 1, gap_us - 2)  # the host op fills the gap and launches at its end
            b.kernel("void vectorized_elementwise_kernel()", t + gap_us, 2, launch_at=t + gap_us - 4)
            t += gap_us + 2
    return b


def allocator(mallocs: list[int], frees: list[int], call_us: list[int], kernels: int = 50,
              prefix: str = "cuda") -> TraceBuilder:
    """Per step i: `kernels` 20-µs kernels back to back, then mallocs[i] + frees[i] allocator calls of call_us[i]
    each, one after another with the device idle, then one kernel launched after them."""
    b = TraceBuilder(rank=0, world_size=1)
    for i, (m, f, d) in enumerate(zip(mallocs, frees, call_us)):
        k0 = i * STEP
        b.step(i + 1, k0, k0 + STEP - 1000)
        for j in range(kernels):
            b.kernel("void gemm_kernel()", k0 + 100 + 20 * j, 20, launch_at=k0 + 5 + j)
        t = k0 + 100 + 20 * kernels
        for j in range(m + f):
            _call(b, f"{prefix}Malloc" if j < m else f"{prefix}Free", t, d)
            t += d
        b.kernel("void gemm_kernel()", t + 10, 20, launch_at=t + 5)
    return b


__all__ = ["MAIN_TID", "STEP", "allocator", "async_copy_twin", "blocking_copy", "host_op", "many_launches"]
