"""The op → kernel, roofline and launch views as the terminal and the report print them: the job's op and
roofline rows (Analysis.kernel_views, summed over ranks by diagnose.metrics.kernel_world) and one launch row
per rank (RankMetrics.launch). Headers and captions live here, once."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.kernel_views import OpRow, RoofRow, SeqRow
from llmdiag.diagnose.model.names import demangle_many

OP_HEADER = ["op", "ranks", "events", "ms/step", "mean µs", "launch delay µs", "most ms/step (rank)", "top kernel"]
OP_NOTE = ("Device events by the innermost host op enclosing their launch call, summed over the ranks (ms/step: the "
           "sum of each rank's per-step time; events: over all steps). Launch delay: kernel start − launch call "
           "start, the mean (queueing plus launch latency; llmdiag's start-to-start delay, not HTA's, and negative "
           "only where the host and device clocks disagree). Ops past the top 20 are '(other ops)'.")
ROOF_HEADER = ["op", "shape", "dtype", "ranks", "calls", "kernel ms", "TFLOP/s", "GB/s", "FLOP/B", "of peak", "bound"]
ROOF_NOTE = ("GEMM and attention ops whose Input Dims the trace records: FLOPs from the shapes (GEMM 2·M·N·K, attention "
             "4·B·H·S²·D, ×2.5 backward, causal masks counted in full), bytes = inputs + output once (a lower bound). "
             "Bound: compute when FLOP/B exceeds the device's ridge point (datasheet peak FLOP/s ÷ HBM bytes/s), "
             "else memory; blank where the device or precision has no listed peak.")
STREAM_HEADER = ["stream", "ranks", "idle ms/step", "host wait", "other", "most idle (rank)"]
STREAM_NOTE = ("Per device stream, mean over the ranks that use it: the gaps between its consecutive events inside a "
               "step (HTA's per-stream idle), split into host wait (the next event was not launched yet) and other "
               "(launched, waiting on a dependency: another stream, an event, a sync). The device's idle across all "
               "streams is the idle table above.")
SEQ_HEADER = ["op", "kernels", "ranks", "per step", "ms/step", "mean µs", "of kernel time"]
SEQ_NOTE = ("Kernels launched back to back by one op: candidates for fusion (torch.compile, a fused kernel). Runs of 2 "
            "to 6 compute kernels one top-level host op launched on one stream, seen at least 3 times and once per "
            "step; per step: occurrences on one rank (mean over the ranks listing it); ms/step: summed over the "
            "ranks; of kernel time: all occurrences' time over the ranks' compute-kernel time (sequences sharing "
            "kernels share time: not additive). A run inside a listed one with as many occurrences, or shifted by one "
            "kernel from it, is not repeated.")
LAUNCH_HEADER = ["rank", "launches/step", "delay p50 µs", "delay p90 µs", "launch ms/step", "short kernels", "queue max"]
LAUNCH_NOTE = ("Launch delay: device event start − its launch call's start (llmdiag's start-to-start delay, over the "
               "analysed steps, unclipped: negative is a host/device clock offset); HTA's, from the call's end, clipped "
               "at 0, is launch.hta_delay_* in summary.json. Short kernels: under 10 µs. Queue: device "
               "events launched on a stream and not yet started (HTA's queue length); near 1024 the launching thread "
               "stalls.")


def op_rows(a: Analysis, limit: int) -> tuple[list[OpRow], int]:
    """(the job's op rows, most device time per step first, at most `limit`; how many rows it has)."""
    kv = a.kernel_views
    return (kv.ops[:limit], len(kv.ops)) if kv else ([], 0)


def roof_rows(a: Analysis, limit: int) -> tuple[list[RoofRow], int]:
    """(the job's roofline rows, most kernel time first, at most `limit`; how many rows it has)."""
    kv = a.kernel_views
    return (kv.roofline[:limit], len(kv.roofline)) if kv else ([], 0)


def stream_rows(a: Analysis, limit: int) -> list:
    """The job's per-stream idle rows (Analysis.kernel_views.streams), most idle first, at most `limit`."""
    kv = a.kernel_views
    return kv.streams[:limit] if kv else []


def launch_rows(a: Analysis, limit: int) -> tuple[list, int]:
    """(ranks with launch statistics, longest launch queue first then largest p90 delay, at most `limit`;
    how many have them): (index in a.ranks, RankMetrics)."""
    rows = [(i, r) for i, r in enumerate(a.ranks) if r.launch is not None]
    rows.sort(key=lambda x: (-x[1].launch.queue_max, -(x[1].launch.delay_p90_us or 0.0), x[1].rank))
    return rows[:limit], len(rows)


def seq_rows(a: Analysis, limit: int) -> list[SeqRow]:
    """The job's frequent kernel sequences (Analysis.kernel_views.sequences), most time per step first."""
    kv = a.kernel_views
    return kv.sequences[:limit] if kv else []


def seq_text(kernels: list[str]) -> str:
    """A sequence's kernel names, demangled, in launch order."""
    names = demangle_many(kernels)
    return " → ".join(names[k] for k in kernels)
