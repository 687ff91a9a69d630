"""`analyze --tables DIR`: the per-rank tables of an Analysis as Parquet files, for pandas, polars or duckdb.

HTA's users work in notebooks; these tables give them DataFrames of every rank without a pandas dependency
in llmdiag: each table is built column-wise from the typed Analysis with pyarrow (imported only here, only
when tables are asked for; `pip install 'llmdiag[tables]'`). Rows are long format (one per rank per step,
per rank per kernel, ...), so every table grows linearly with ranks. Units are in the column names (`_ms`,
`_us`, `_bytes`, `_gbps`); ratios are in [0, 1]; null means undefined or unknown, never 0.

Each column is declared once in TABLES with its meaning (docs/python.md lists them); the file's schema
metadata holds `llmdiag.version`, `llmdiag.tables_schema` (TABLES_SCHEMA_VERSION, raised when a column
changes meaning or goes) and the table's name. The numbers are the Analysis' own: nothing is recomputed.

What the Analysis does not carry is not invented: matched collectives are the skew analysis' records (per
(group, kind) aggregates, and the most skewed collectives with their late ranks), not every collective.
"""

from __future__ import annotations

import os
from itertools import repeat
from operator import is_not

import numpy as np

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model import views
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.fields import BREAKDOWN, FIELDS
from llmdiag.diagnose.model.files import write_atomic_with

TABLES_SCHEMA_VERSION = 1
EXTRA = "pip install 'llmdiag[tables]'"

# name -> (what one row is, [(column, type, meaning)]); types: i64, f64, str, bool
_STEP_PARTS = [(f.key, "f64", f.meaning) for f in BREAKDOWN]  # model/fields.py: the breakdown's columns
TABLES: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "ranks": ("one analysed rank: per-step means of its breakdown, and its arrival waits at matched collectives", [
        ("rank", "i64", "global rank"), ("file", "str", "its trace file"), ("host", "str", "host name, '' unknown"),
        ("device", "str", "deviceProperties name, '' unknown"), ("trace_kind", "str", "gpu or cpu"),
        ("steps", "i64", "analysed steps"), ("step_ms", "f64", "mean step time"),
        *[(c, t, f"mean per step: {d}") for c, t, d in _STEP_PARTS[:-1]],
        ("overlap_ratio", "f64", "Σ overlapped / Σ comm over the steps; null without comm"),
        *[(k, "f64", FIELDS[k].meaning) for k in ("exposed_comm_frac", "idle_frac")],
        ("kernel_time_ms", "f64", "summed time of all kernels (or top-level CPU ops) in the steps"),
        ("memory_peak_bytes", "i64", FIELDS["memory_peak"].meaning),
        ("last_arrivals", "i64", "matched collectives it arrived last at"),
        ("late_ms", "f64", "Σ its lateness where it was late (start − earliest start), whole trace"),
        ("imposed_ms", "f64", "Σ over the collectives it alone arrived last at of (its start − the second-latest "
                              "start), whole trace: the stragglers table's imposed_ms_per_step × steps"),
        ("wait_ms", "f64", "Σ (latest start − its start): its own wait for late peers")]),
    "stragglers": ("one straggler as the terminal and the report list it (skew.stragglers, largest value first)", [
        ("rank", "i64", "global rank"), ("host", "str", "host name, 'unknown' where neither trace nor manifest says"),
        ("kind", "str", "collective kind it is most clearly last at; '' for a compute straggler"),
        ("reason", "str", "the decision in words, as the terminal and the report print it"),
        ("value_frac", "f64", "the straggler's `value`: share of `kind`'s matched collectives it arrived last at, "
                              "or its compute excess / median"),
        ("imposed_ms_per_step", "f64", "Σ over collectives where it alone arrived last of (its start − the "
                                       "second-latest start), per step; 0 for a compute straggler"),
        ("last_n", "i64", "collectives of `kind` it alone arrived last at"), ("matched_n", "i64", "matched collectives of `kind`"),
        ("gain_ms_per_step", "f64", "step time saved at its peers' speed; null unknown"),
        ("gain_kind", "str", "simulated (replayed) or bound (at most the imposed wait or compute excess)")]),
    "steps": ("one step (ProfilerStep window) on one rank; the parts sum to step_ms", [
        ("rank", "i64", "global rank"), ("step", "i64", "ProfilerStep number"),
        ("start_ms", "f64", "window start, relative to the rank's trace origin"), ("step_ms", "f64", "window length"),
        *_STEP_PARTS]),
    "comm": ("one collective kind in one process group on one rank, summed over its steps", [
        ("rank", "i64", "global rank"), ("kind", "str", "allreduce, allgather, reducescatter, alltoall, sendrecv, ..."),
        ("pg", "str", "process group, '' when the trace does not say"), ("group_size", "i64", "ranks in the group"),
        ("count", "i64", "ops"), ("total_ms", "f64", "summed op durations (not a union)"),
        ("overlapped_ms", "f64", "Σ over ops of |op ∩ U(compute)|"),
        ("overlap_ratio", "f64", "overlapped_ms / total_ms (duration-weighted); null when total is 0"),
        ("bytes", "i64", "summed message sizes of the sized ops"), ("sized_count", "i64", "ops of known size"),
        ("algbw_gbps", "f64", "bytes / time over the sized ops"), ("busbw_gbps", "f64", "algbw × nccl-tests factor")]),
    "kernels": ("one of a rank's top kernels (top-level CPU ops on CPU traces), summed over its steps", [
        ("rank", "i64", "global rank"), ("name", "str", "kernel name as the trace writes it (demangled)"),
        ("kind", "str", "compute, comm, memcpy or memset"), ("count", "i64", "launches"),
        ("total_ms", "f64", "summed duration"), ("mean_us", "f64", "mean duration"), ("max_us", "f64", "longest"),
        ("share", "f64", "of the rank's summed kernel time")]),
    "memory": ("one device of one rank", [
        ("rank", "i64", "global rank"), ("device", "str", "cuda:0, cpu, ..."),
        ("peak_allocated_bytes", "i64", "peak Total Allocated"),
        ("peak_reserved_bytes", "i64", "peak Total Reserved; null where not recorded"),
        ("peak_ms", "f64", "time of the allocated peak, relative to the trace origin"),
        ("peak_op", "str", "innermost op at the peak, '' none"), ("capacity_bytes", "i64", "device memory, null unknown"),
        ("used_bytes", "i64", "reserved, or allocated where nothing reserves"),
        ("used_frac", "f64", "used / capacity; null when capacity is unknown")]),
    "memory_timeline": ("one point of a device's downsampled memory timeline (peaks kept)", [
        ("rank", "i64", "global rank"), ("device", "str", "cuda:0, cpu, ..."),
        ("time_ms", "f64", "relative to the rank's trace origin"), ("allocated_bytes", "i64", "Total Allocated"),
        ("reserved_bytes", "i64", "Total Reserved (0 where not recorded)")]),
    "collectives": ("one (process group, kind) of collectives matched across ranks (skew analysis)", [
        ("pg", "str", "process group"), ("kind", "str", "collective kind"),
        ("matched", "i64", "collectives seen on ≥ 2 ranks"), ("mean_skew_ms", "f64", "latest − earliest start, mean"),
        ("max_skew_ms", "f64", "largest arrival skew"), ("mean_transfer_ms", "f64", "shortest duration among ranks, mean")]),
    "late_arrivals": ("one rank at one of the most skewed matched collectives (the skew analysis keeps the top 10)", [
        ("pg", "str", "process group"), ("kind", "str", "collective kind"),
        ("ordinal", "i64", "n-th (pg, kind) collective of the trace (its sequence number where complete)"),
        ("ranks", "i64", "ranks matched"), ("skew_ms", "f64", "latest − earliest start"),
        ("transfer_ms", "f64", "shortest duration among ranks"),
        ("schedule_ordered", "bool", "its ranks sit on different pipeline stages (no one blamed)"),
        ("rank", "i64", "a rank of the collective: a late one, or one whose message size is known"),
        ("late", "bool", "the rank arrived after the largest gap between arrivals"),
        ("late_ms", "f64", "its start − the earliest start; null for punctual ranks (not kept)"),
        ("in_nelems", "i64", "elements it sent, null unknown"), ("out_nelems", "i64", "elements it received, null unknown")]),
    "p2p": ("send/recv between one ordered pair of ranks in one group", [
        ("pg", "str", "process group"), ("src", "i64", "sending rank"), ("dst", "i64", "receiving rank"),
        ("matched", "i64", "pairs matched"), ("unmatched", "i64", "sends or receives without a partner"),
        ("mean_transfer_ms", "f64", "later post to end"), ("mean_wait_ms", "f64", "earlier post to later post"),
        ("sender_waits", "i64", "pairs where the send was posted first"),
        ("receiver_waits", "i64", "pairs where the receive was posted first")]),
    "pipeline_stages": ("one pipeline stage (written only when the run is pipelined)", [
        ("schedule", "str", "gpipe, 1f1b, interleaved1f1b, zbv, ..."), ("stage", "i64", "stage index"),
        ("rank", "i64", "its rank"), ("busy_ms", "f64", "|U(F/B/I/W spans)| per step"),
        ("window_ms", "f64", "measured pipeline window per step"), ("bubble", "f64", "1 − busy / window"),
        ("bubble_replay", "f64", "same in the zero-communication replay; null without one"),
        ("bubble_theory", "f64", "closed formula for the schedule"), ("bubble_gap", "f64", "bubble − bubble_theory")]),
    "pipeline_actions": ("one forward/backward action of a pipelined rank (written only when present)", [
        ("rank", "i64", "global rank"), ("stage", "i64", "stage"), ("kind", "str", "F, B, I or W"),
        ("microbatch", "i64", "microbatch"), ("start_ms", "f64", "clock-aligned, from the analysis' origin"),
        ("end_ms", "f64", "clock-aligned, from the analysis' origin")]),
    "moe_ranks": ("one rank of expert parallelism (written only when present), per step", [
        ("rank", "i64", "global rank"), ("sent_rows", "i64", "rows its dispatches sent"),
        ("received_rows", "i64", "rows received"), ("dispatch_ms", "f64", "time in dispatch"),
        ("combine_ms", "f64", "time in combine"), ("a2a_ms", "f64", "all-to-all(v) communication"),
        ("a2a_exposed_ms", "f64", "of which not overlapped with compute"), ("expert_ms", "f64", "expert compute"),
        ("step_ms", "f64", "step time")]),
    "moe_layers": ("one rank of one MoE layer's dispatch in one step (written only when token counts are known)", [
        ("step", "i64", "index among the analysed steps"), ("layer", "i64", "dispatch ordinal within the step"),
        ("rank", "i64", "a rank of the EP group"), ("received_rows", "i64", "rows it received"),
        ("imbalance", "f64", "the layer's max / mean of received")]),
    # the HTA / TraceLens views (diagnose.model.kernel_views; docs/metrics.md "Op → kernel, roofline, launches")
    "op_kernels": ("one host op (by name) and the device events it launched, summed over the ranks (the top 20 ops by "
                   "time per step, then '(other ops)' and '(no host op)')", [
        ("op", "str", "innermost host op enclosing the launch call"), ("ranks", "i64", "ranks that ran it"),
        ("count", "i64", "device events launched, all ranks and steps"), ("total_ms", "f64", "their summed duration"),
        ("ms_per_step", "f64", "Σ over ranks of the rank's time per step"), ("mean_us", "f64", "mean duration"),
        ("launch_delay_us", "f64", "mean of kernel start − launch call start; null where no launch call is seen"),
        ("top_kernel", "str", "the kernel it launched with the most time ('' none)"),
        ("max_rank", "i64", "the rank with the most time per step in it"), ("max_rank_ms", "f64", "that rank's time per step")]),
    "roofline": ("GEMM or attention calls of one (op, shape, dtype) over the ranks against the device's datasheet peaks "
                 "(the top 20 by kernel time, then '(other)')", [
        ("op", "str", "aten::mm, aten::addmm, aten::_scaled_dot_product_*, ..."),
        ("shape", "str", "the op's Input Dims"), ("dtype", "str", "input precision ('' unknown)"),
        ("ranks", "i64", "ranks that ran it"), ("count", "i64", "calls that launched kernels"),
        ("kernel_ms", "f64", "summed kernel time"), ("work_gflop", "f64", "summed FLOPs / 1e9"),
        ("traffic_gb", "f64", "summed input + output bytes / 1e9"), ("achieved_tflops", "f64", "FLOPs / kernel time"),
        ("achieved_gbps", "f64", "bytes / kernel time"), ("intensity_flop_per_byte", "f64", "FLOPs per byte"),
        ("peak_tflops", "f64", "the device's dense peak; null unknown or ranks' devices differ"),
        ("peak_frac", "f64", "achieved_tflops / peak_tflops; null unknown"),
        ("bound", "str", "compute or memory (intensity vs the device's ridge point); '' unknown, 'mixed'")]),
    "stream_idle": ("one device stream id over the ranks that use it: idle between its events, ms per step", [
        ("stream", "i64", "device stream"), ("ranks", "i64", "ranks with events on it"),
        ("idle_ms", "f64", "mean over those ranks of the gaps between its events inside a step"),
        ("host_wait_ms", "f64", "of which before the next event's launch call (waiting on the host)"),
        ("other_ms", "f64", "of which launched and waiting on a dependency"),
        ("max_rank", "i64", "the rank where it idles most"), ("max_rank_ms", "f64", "that rank's idle per step")]),
    "kernel_sequences": ("one run of kernels a top-level host op launched back to back on one stream, summed over the "
                         "ranks (the top 10 by time per step; diagnose/metrics/rank/kernel_sequences.py)", [
        ("op", "str", "the top-level host op that launched them"),
        ("kernels", "str", "kernel names in launch order as the trace wrote them, joined by ' → '"),
        ("ranks", "i64", "ranks whose top sequences hold it"), ("count", "i64", "occurrences, all ranks and steps"),
        ("count_per_step", "f64", "occurrences per step on one rank, mean over those ranks"),
        ("total_ms", "f64", "summed kernel time of its occurrences"), ("ms_per_step", "f64", "Σ over ranks of time per step"),
        ("mean_us", "f64", "one occurrence's kernel time"), ("share", "f64", "of the ranks' compute-kernel time")]),
    "launches": ("one GPU rank's kernel launch statistics over its steps", [
        ("rank", "i64", "global rank"), ("launches", "i64", "runtime calls that launched a device event"),
        ("launches_per_step", "f64", "launches / steps"), ("delay_median_us", "f64", "start-to-start: event start − call start"),
        ("delay_p90_us", "f64", "its 90th percentile"), ("delay_max_us", "f64", "longest start-to-start delay"),
        ("launch_ms_per_step", "f64", "CPU time inside the launch calls per step"),
        ("short_kernel_frac", "f64", "share of compute/comm kernels under 10 µs"),
        ("queue_max", "i64", "longest launch queue on any stream (launched, not yet started)"),
        ("hta_delay_median_us", "f64", "HTA's: event start − call end, clipped at 0 (docs/metrics.md)"),
        ("hta_delay_p90_us", "f64", "its 90th percentile"), ("hta_delay_max_us", "f64", "longest HTA launch delay"),
        ("hta_events", "i64", "device events HTA's definition pairs with a launch call")]),
    "queue": ("one stream of a rank: launched-but-not-started device events (HTA's queue length; 2 longest per rank)", [
        ("rank", "i64", "global rank"), ("stream", "i64", "device stream"),
        ("max_events", "i64", "longest queue"), ("mean_events", "f64", "mean queue over the samples"),
        ("samples", "i64", "launches and starts sampled")]),
}
OPTIONAL = ("p2p", "pipeline_stages", "pipeline_actions", "moe_ranks", "moe_layers")  # written only when present
FORMATS = ("parquet", "csv", "both")  # analyze --format: what --tables writes


def schema_markdown() -> str:
    """The tables' reference as docs/python.md prints it (a test keeps the two equal)."""
    types = {"i64": "int64", "f64": "float64", "str": "string", "bool": "bool"}
    out = []
    for name, (row, spec) in TABLES.items():
        out += [f"#### `{name}`" + (" (only when present)" if name in OPTIONAL else ""), "", f"One row: {row}.", "",
                "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c}` | {types[t]} | {d.replace('|', chr(92) + '|')} |" for c, t, d in spec] + [""]
    return "\n".join(out)


def require_pyarrow() -> None:
    """LlmdiagError (one line, exit 2) when pyarrow is missing, before any analysis runs."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise LlmdiagError("--tables needs pyarrow, which is not installed", hint=EXTRA) from None


def columns(a: Analysis) -> dict[str, dict[str, list]]:
    """Every table as {column: values}, rows in rank order; optional tables only where the analysis has them."""
    sk = a.skew
    hosts = views.hosts(a)
    out = {"ranks": _ranks(a), "stragglers": _flat([(x.rank, hosts.get(x.rank, "unknown"), x.kind, x.reason, x.value,
                                                     x.imposed_ms, x.last_n, x.matched_n, x.gain_ms, x.gain_kind)
                                                    for _, x in views.stragglers(a)], "stragglers"),
           "steps": _rows(a, "steps"), "comm": _rows(a, "comm_by_kind"),
           "kernels": _rows(a, "top_kernels"), "memory": _rows(a, "memory"), "memory_timeline": _timeline(a),
           "collectives": _records(sk.by_collective if sk else [], ["pg", "kind", "matched", "mean_skew_ms",
                                                                   "max_skew_ms", "mean_transfer_ms"]),
           "late_arrivals": _late(a), **_views(a)}
    if sk and sk.p2p:
        out["p2p"] = _records(sk.p2p, [c for c, _, _ in TABLES["p2p"][1]])
    if a.pipeline:
        out["pipeline_stages"] = _stages(a)
    if any(r.pipeline_actions for r in a.ranks):
        out["pipeline_actions"] = _flat([(r.rank, x.stage, x.kind, x.microbatch, x.start_ms, x.end_ms)
                                         for r in a.ranks for x in r.pipeline_actions], "pipeline_actions")
    if a.moe:
        out["moe_ranks"] = _flat([(m.rank, m.sent, m.received, m.dispatch_ms, m.combine_ms, m.a2a_ms, m.a2a_exposed_ms,
                                   m.expert_ms, m.step_ms) for m in a.moe.ranks], "moe_ranks")
        if a.moe.layers:
            out["moe_layers"] = _flat([(lay.step, lay.layer, r, n, lay.imbalance) for lay in a.moe.layers
                                       for r, n in zip(lay.group, lay.received)], "moe_layers")
    return out


def _views(a: Analysis) -> dict[str, dict[str, list]]:
    """The op → kernel and roofline tables of the job, the launch and queue tables per rank (empty on CPU traces)."""
    kv = a.kernel_views
    ok = [(o.op, o.ranks, o.count, o.total_ms, o.ms_per_step, o.mean_us, o.launch_delay_us, o.kernel, o.max_rank,
           o.max_rank_ms) for o in (kv.ops if kv else [])]
    roof = [(x.op, x.shape, x.dtype, x.ranks, x.calls, x.kernel_ms, x.gflop, x.gbytes, x.tflops, x.gbps, x.intensity,
             x.peak_tflops, x.peak_frac, x.bound) for x in (kv.roofline if kv else [])]
    la = [(r.rank, x.launches, x.launches_per_step, x.delay_median_us, x.delay_p90_us, x.delay_max_us,
           x.launch_ms_per_step, r.hints.short_kernel_frac, x.queue_max, x.hta_delay_median_us, x.hta_delay_p90_us,
           x.hta_delay_max_us, x.hta_events) for r in a.ranks if (x := r.launch)]
    qu = [(r.rank, q.stream, q.max, q.mean, q.samples) for r in a.ranks if r.launch for q in r.launch.queue]
    si = [(x.stream, x.ranks, x.idle_ms, x.host_wait_ms, x.other_ms, x.max_rank, x.max_rank_ms)
          for x in (kv.streams if kv else [])]
    sq = [(x.op, " → ".join(x.kernels), x.ranks, x.count, x.count_per_step, x.total_ms, x.ms_per_step, x.mean_us, x.share)
          for x in (kv.sequences if kv else [])]
    return {"op_kernels": _flat(ok, "op_kernels"), "roofline": _flat(roof, "roofline"), "launches": _flat(la, "launches"),
            "queue": _flat(qu, "queue"), "stream_idle": _flat(si, "stream_idle"),
            "kernel_sequences": _flat(sq, "kernel_sequences")}


def _flat(rows: list[tuple], table: str) -> dict[str, list]:
    names = [c for c, _, _ in TABLES[table][1]]
    cols = list(zip(*rows)) if rows else [()] * len(names)
    return {n: list(v) for n, v in zip(names, cols)}


def _records(items, names: list[str]) -> dict[str, list]:
    return {n: [getattr(x, n) for x in items] for n in names}


def _ranks(a: Analysis) -> dict[str, list]:
    sk = a.skew
    last, late, imposed, wait = ((getattr(sk, f) if sk else {}) for f in
                                 ("last_arrivals", "late_ms_by_rank", "imposed_ms_by_rank", "wait_ms_by_rank"))
    rows = [(r.rank, r.file, r.host, r.device, r.trace_kind, r.steps_total or len(r.steps), r.step_time_ms, r.compute_ms, r.comm_ms,
             r.overlapped_comm_ms, r.exposed_comm_ms, r.compute_only_ms, r.other_ms, r.idle_ms, r.overlap_ratio,
             r.exposed_comm_frac, r.idle_frac, r.kernel_time_ms, r.memory_peak, last.get(str(r.rank), 0),
             late.get(str(r.rank), 0.0), imposed.get(str(r.rank), 0.0), wait.get(str(r.rank), 0.0)) for r in a.ranks]
    return _flat(rows, "ranks")


def _rows(a: Analysis, attr: str) -> dict[str, list]:
    """A per-rank list of records, one row per record, the rank first."""
    if attr == "steps":
        rows = [(r.rank, s.step, s.start_ms, s.time_ms, s.compute_ms, s.comm_ms, s.overlapped_comm_ms, s.exposed_comm_ms,
                 s.compute_only_ms, s.other_ms, s.idle_ms, s.overlap_ratio) for r in a.ranks for s in r.steps]
        return _flat(rows, "steps")
    if attr == "comm_by_kind":
        return _flat([(r.rank, c.kind, c.pg, c.group_size, c.count, c.total_ms, c.overlapped_ms, c.overlap_ratio,
                       c.bytes, c.sized_count, c.algbw_gbps, c.busbw_gbps) for r in a.ranks for c in r.comm_by_kind],
                     "comm")
    if attr == "top_kernels":
        return _flat([(r.rank, k.name, k.kind, k.count, k.total_ms, k.mean_us, k.max_us, k.share)
                      for r in a.ranks for k in r.top_kernels], "kernels")
    return _flat([(r.rank, m.device, m.peak_allocated, m.peak_reserved, m.peak_ms, m.peak_op, m.capacity, m.used,
                   m.used_frac) for r in a.ranks for m in r.memory], "memory")


def _timeline(a: Analysis) -> dict[str, list]:
    rows = [(r.rank, m.device, p[0], p[1], p[2] if len(p) > 2 else 0) for r in a.ranks for m in r.memory
            for p in m.timeline]
    return _flat(rows, "memory_timeline")


def _late(a: Analysis) -> dict[str, list]:
    rows = []
    for x in a.skew.late if a.skew else []:
        lateness = dict(zip(x.late_ranks, x.late_ms))
        named = set(lateness) | {int(k) for k in x.in_nelems} | {int(k) for k in x.out_nelems}
        for rank in sorted(named):
            rows.append((x.pg, x.kind, x.ordinal, x.ranks, x.skew_ms, x.transfer_ms, x.schedule_ordered, rank,
                         rank in lateness, lateness.get(rank), x.in_nelems.get(str(rank)), x.out_nelems.get(str(rank))))
    return _flat(rows, "late_arrivals")


def _stages(a: Analysis) -> dict[str, list]:
    p = a.pipeline
    return _flat([(p.schedule, s.stage, s.rank, s.busy_ms, p.window_ms, s.measured, s.replay, s.theory, s.gap)
                  for s in p.stage_bubbles], "pipeline_stages")


# ---- arrow and parquet ----------------------------------------------------------------------------------
def arrow_tables(a: Analysis) -> dict:
    """Every table as a pyarrow.Table with its schema metadata (pyarrow must be installed).

    Arrays are assembled from numpy buffers (`Array.from_buffers`): pa.array() over Python values imports
    pandas whenever it is installed (its pandas checks), half a second llmdiag never needs. Strings are
    large_string (64-bit offsets: 16,384 ranks of hostile 20 kB kernel names pass 2 GB)."""
    import pyarrow as pa

    types = {"i64": pa.int64(), "f64": pa.float64(), "str": pa.large_string(), "bool": pa.bool_()}
    out = {}
    for name, cols in columns(a).items():
        spec = TABLES[name][1]
        fields = [pa.field(c, types[t], metadata={"doc": d}) for c, t, d in spec]
        meta = {"llmdiag.version": a.llmdiag_version, "llmdiag.tables_schema": str(TABLES_SCHEMA_VERSION),
                "llmdiag.table": name, "llmdiag.row": TABLES[name][0], "llmdiag.source": _text([a.name])[0]}
        arrays = [_array(pa, cols[c], types[t], t) for c, t, _ in spec]
        out[name] = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))
    return out


def _array(pa, values: list, typ, t: str):
    """One column from Python values; None is null. An int beyond int64 (a hostile trace) is null, not wrapped."""
    n = len(values)
    if t == "i64":
        values = [v if v is None or -(2**63) <= v < 2**63 else None for v in values]
    valid = np.fromiter(map(is_not, values, repeat(None)), bool, n)
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if t == "str":
        data = [v.encode("utf-8") for v in _text([v or "" for v in values])]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, data), np.int64, n), out=offsets[1:])
        return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))], nulls)
    fill = [v if v is not None else 0 for v in values]
    if t == "bool":
        body = np.packbits(np.array(fill, bool).reshape(n), bitorder="little")
    else:
        body = np.array(fill, np.int64 if t == "i64" else np.float64).reshape(n)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(body)], nulls)


def _text(values: list) -> list:
    """Strings Parquet (UTF-8) can hold: lone surrogates from non-UTF-8 file names become U+FFFD."""
    out = []
    for v in values:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            v = v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            v = v.encode("utf-8", "replace").decode("utf-8")
        out.append(v)
    return out


def write_tables(a: Analysis, folder: str) -> list[str]:
    """Write every table as `<folder>/<name>.parquet` (each atomically); an optional table this analysis lacks
    is removed where an earlier llmdiag run left one, so the folder never mixes two analyses. Returns the paths.
    (CSV: diagnose.export.csv_tables.write_csv.)"""
    import pyarrow.parquet as pq

    tables = arrow_tables(a)
    make_folder(folder)
    paths = []
    for name, t in tables.items():
        path = os.path.join(folder, f"{name}.parquet")
        write_atomic_with(path, lambda f, t=t: pq.write_table(t, f), 0o666)  # readable by the team, as reports are
        paths.append(path)
    for name in OPTIONAL:
        stale = os.path.join(folder, f"{name}.parquet")
        if name not in tables and os.path.isfile(stale) and _ours(pq, stale):
            os.unlink(stale)
    return paths


def make_folder(folder: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise LlmdiagError(f"cannot create the tables folder: {e.strerror or e}", folder) from None


def _ours(pq, path: str) -> bool:
    try:
        return b"llmdiag.tables_schema" in (pq.read_schema(path).metadata or {})
    except Exception:  # not a Parquet file we can read: not ours to remove
        return False
