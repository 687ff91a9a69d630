"""The op → kernel, roofline and launch sections of the report (rows from diagnose.model.kernel_view_rows, which
the terminal prints too); per-rank numbers carry their summary path, numbers summed over ranks none."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.kernel_view_rows import (LAUNCH_HEADER, LAUNCH_NOTE, OP_HEADER, OP_NOTE, ROOF_HEADER, ROOF_NOTE,
                                             SEQ_HEADER, SEQ_NOTE, STREAM_HEADER, STREAM_NOTE, launch_rows, op_rows,
                                             roof_rows, seq_rows, stream_rows)
from llmdiag.diagnose.model.names import demangle, demangle_many, short_names

MAX_OPS = 30
MAX_ROOF = 30
MAX_LAUNCH = 32
SEQ_NAME = 60  # characters of one kernel name in a sequence cell


def kernel_views(a: Analysis, num) -> dict | None:
    """{"ops", "roof", "launch"} sections, each None when no rank has it; None when none has any."""
    ops, n_ops = op_rows(a, MAX_OPS)
    roof, n_roof = roof_rows(a, MAX_ROOF)
    launch, n_launch = launch_rows(a, MAX_LAUNCH)
    if not (ops or roof or launch):
        return None
    out = {"ops": None, "roof": None, "launch": None, "streams": None, "seqs": None}
    seqs = seq_rows(a, 10)
    if seqs:
        # one kernel a line, shortened as the top-kernel table shortens (argument lists first), the full name its title
        full = demangle_many(k for x in seqs for k in x.kernels)
        short = short_names(list(dict.fromkeys(full.values())), SEQ_NAME)
        out["seqs"] = {"header": SEQ_HEADER, "note": SEQ_NOTE, "rows": [
            {"op": x.op, "kernels": [{"short": short[full[k]], "full": full[k]} for k in x.kernels], "ranks": x.ranks,
             "cells": [num(x.count_per_step, p + "count_per_step", "avg"), num(x.ms_per_step, p + "ms_per_step", "ms"),
                       num(x.mean_us, p + "mean_us", "us"), num(x.share, p + "share", "pct", True)]}
            for i, x in enumerate(seqs) for p in [f"kernel_views.sequences.{i}."]]}
    streams = stream_rows(a, 16)
    if streams:
        out["streams"] = {"header": STREAM_HEADER, "note": STREAM_NOTE, "rows": [
            {"stream": x.stream, "ranks": x.ranks,
             "cells": [num(getattr(x, f), p + f, "ms") for f in ("idle_ms", "host_wait_ms", "other_ms")],
             "max": num(x.max_rank_ms, p + "max_rank_ms", "ms"), "max_rank": x.max_rank}
            for i, x in enumerate(streams) for p in [f"kernel_views.streams.{i}."]]}
    if ops:
        out["ops"] = {"header": OP_HEADER, "note": OP_NOTE, "more": n_ops - len(ops), "rows": [
            {"op": x.op, "ranks": x.ranks, "cells": [num(x.count, p + "count", "int"), num(x.ms_per_step, p + "ms_per_step", "ms"),
                                                    num(x.mean_us, p + "mean_us", "us"),
                                                    num(x.launch_delay_us, p + "launch_delay_us", "us")],
             "max": num(x.max_rank_ms, p + "max_rank_ms", "ms"), "max_rank": x.max_rank,
             "kernel": demangle(x.kernel)} for i, x in enumerate(ops) for p in [f"kernel_views.ops.{i}."]]}
    if roof:
        out["roof"] = {"header": ROOF_HEADER, "note": ROOF_NOTE, "more": n_roof - len(roof), "rows": [
            {"op": x.op, "shape": x.shape, "dtype": x.dtype or "?", "bound": x.bound or "—",
             "cells": [num(x.ranks, None, "int"), num(x.calls, p + "calls", "int"), num(x.kernel_ms, p + "kernel_ms", "ms"),
                       num(x.tflops, p + "tflops", "tflops"), num(x.gbps, p + "gbps", "gbps"),
                       num(x.intensity, p + "intensity", "avg"), num(x.peak_frac, p + "peak_frac", "pct", True)]}
            for i, x in enumerate(roof) for p in [f"kernel_views.roofline.{i}."]]}
        unknown = a.kernel_views.devices_without_peak
        if unknown:
            out["roof"]["note"] += (" No datasheet peak is listed for " + ", ".join(unknown[:4])
                                    + ": no compute/memory class and no share of peak there.")
    if launch:
        rows = []
        for i, r in launch:
            p = f"ranks.{i}.launch."
            L = r.launch
            rows.append({"rank": r.rank, "cells": [
                num(L.launches_per_step, p + "launches_per_step", "avg"), num(L.delay_median_us, p + "delay_median_us", "us"),
                num(L.delay_p90_us, p + "delay_p90_us", "us"), num(L.launch_ms_per_step, p + "launch_ms_per_step", "ms"),
                num(r.hints.short_kernel_frac, f"ranks.{i}.hints.short_kernel_frac", "pct", True),
                num(L.queue_max, None, "int")]})
        out["launch"] = {"header": LAUNCH_HEADER, "note": LAUNCH_NOTE, "more": n_launch - len(launch), "rows": rows}
    return out
