"""The kernel views in the terminal (op → kernel, roofline, kernel sequences, launches): the rows of
`model/kernel_view_rows.py`, which the report prints too, through the terminal's one layout."""

from __future__ import annotations

from llmdiag.diagnose.cli.terminal_layout import MAX_ROWS, _more, _ms, _pct, _table
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import column_unit, fmt, header_unit
from llmdiag.diagnose.model.names import demangle


def _op_kernels(a: Analysis) -> str:
    from llmdiag.diagnose.model.kernel_view_rows import OP_HEADER, OP_NOTE, op_rows

    rows, n = op_rows(a, 10)
    body = [[x.op, str(x.ranks), str(x.count), _ms(x.ms_per_step), fmt(x.mean_us, "us", False),
             fmt(x.launch_delay_us, "us", False), f"{_ms(x.max_rank_ms)} ({x.max_rank})", demangle(x.kernel)] for x in rows]
    ops = _table("Op → kernel (host op that launched the device events, summed over ranks)", OP_HEADER, body,
                 (OP_NOTE + " " + _more(n - len(rows), "ops")).strip(), cut={0, len(OP_HEADER) - 1})
    return "\n".join(x for x in (ops, _roofline(a), _kernel_sequences(a)) if x)


def _roofline(a: Analysis) -> str:
    """The report's roofline rows (kernel_view_rows.roof_rows: one computation), each number in its column's
    unit, stated in the header."""
    from llmdiag.diagnose.model.kernel_view_rows import ROOF_HEADER, ROOF_NOTE, roof_rows

    rows, n = roof_rows(a, MAX_ROWS)
    if not rows:
        return ""
    units = {k: column_unit([getattr(x, k) for x in rows], u) for k, u in (("tflops", "tflops"), ("gbps", "gbps"))}
    head = ROOF_HEADER[:5] + ["kernel ms", header_unit(units["tflops"]), header_unit(units["gbps"])] + ROOF_HEADER[8:]
    body = [[x.op, x.shape, x.dtype or "?", str(x.ranks), str(x.calls), _ms(x.kernel_ms),
             fmt(x.tflops, units["tflops"], False), fmt(x.gbps, units["gbps"], False), fmt(x.intensity, "avg"),
             _pct(x.peak_frac), x.bound or "—"] for x in rows]
    unknown = a.kernel_views.devices_without_peak if a.kernel_views else []
    note = ROOF_NOTE + (" No datasheet peak is listed for " + ", ".join(unknown[:4]) + "." if unknown else "")
    return _table("GEMM and attention against the roofline (calls and kernel ms: totals over the ranks and analysed steps)", head, body,
                  (note + " " + _more(n - len(rows), "ops")).strip(), cut={0, 1, 2, 10})


def _kernel_sequences(a: Analysis) -> str:
    from llmdiag.diagnose.model.kernel_view_rows import SEQ_HEADER, SEQ_NOTE, seq_rows, seq_text

    rows = seq_rows(a, 5)
    body = [[x.op, seq_text(x.kernels), str(x.ranks), fmt(x.count_per_step, "avg"), _ms(x.ms_per_step),
             fmt(x.mean_us, "us", False), _pct(x.share)] for x in rows]
    return _table("Frequent kernel sequences (top 5)", SEQ_HEADER, body, SEQ_NOTE, cut={0}, seqs={1})


def _launches(a: Analysis) -> str:
    from llmdiag.diagnose.model.kernel_view_rows import LAUNCH_HEADER, LAUNCH_NOTE, launch_rows

    rows, n = launch_rows(a, MAX_ROWS)
    body = [[str(r.rank), fmt(r.launch.launches_per_step, "avg"), fmt(r.launch.delay_median_us, "us", False),
             fmt(r.launch.delay_p90_us, "us", False), _ms(r.launch.launch_ms_per_step), _pct(r.hints.short_kernel_frac),
             str(r.launch.queue_max)] for _, r in rows]
    return _table("Kernel launches per rank (longest launch queue first)", LAUNCH_HEADER, body,
                  (LAUNCH_NOTE + " " + _more(n - len(rows), "ranks")).strip())
