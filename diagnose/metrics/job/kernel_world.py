"""The op → kernel and roofline views over the job (Analysis.kernel_views): each rank's rows, computed in its
worker (diagnose.metrics.op_kernels, roofline) and carried in its RankOutput, summed in the coordinator. Only
these bounded sums reach the summary, so it does not grow per rank. Rows past WORLD_TOP are summed into one
"(other ops)" / "(other)" row."""

from __future__ import annotations

from llmdiag.diagnose.model.devices import compute_peak
from llmdiag.diagnose.model.kernel_views import KernelViews, OpKernels, OpRow, RankSequences, RooflineRow, RoofRow, SeqRow, StreamIdle

WORLD_TOP = 20
STREAMS = 16  # stream rows kept
WORLD_SEQ = 10  # kernel sequences kept over the job (as per rank: diagnose.metrics.kernel_sequences.TOP)


def world_views(ranks: list[tuple[int, int, str, list[OpKernels], list[RooflineRow]]],
                idle: list[tuple[int, int, list]] | None = None,
                seqs: list[RankSequences] | None = None) -> KernelViews | None:
    """From (rank, steps, device, op rows, roofline rows) per rank, and (rank, steps, [(stream, idle ns, host
    wait ns)]) per rank, and each rank's kernel sequences; None where no rank has op rows or roofline rows."""
    if not any(ops or roof for _, _, _, ops, roof in ranks):
        return None
    ops, n_ops = _ops(ranks)
    roof, n_roof = _roof(ranks)
    return KernelViews(ops=ops, roofline=roof, ops_total=n_ops, roofline_total=n_roof, streams=_streams(idle or []),
                       devices_without_peak=sorted({(d or "unnamed")[:200] for _, _, d, _, roof in ranks
                                                    if roof and compute_peak(d) is None})[:8],
                       sequences=_sequences(seqs or []))


def _ops(ranks) -> tuple[list[OpRow], int]:
    acc: dict[str, list] = {}  # op -> [ranks, count, total, ms/step, delay·n, n, {kernel: ms}, (ms/step, -rank)]
    for rank, steps, _, ops, _ in ranks:
        for o in ops:
            x = acc.setdefault(o.op, [0, 0, 0.0, 0.0, 0.0, 0, {}, (-1.0, 0)])
            per = o.total_ms / max(1, steps)
            x[0] += 1
            x[1] += o.count
            x[2] += o.total_ms
            x[3] += per
            if o.launch_delay_us is not None:
                x[4] += o.launch_delay_us * o.count
                x[5] += o.count
            for k in o.kernels[:1]:
                x[6][k] = x[6].get(k, 0.0) + o.total_ms
            x[7] = max(x[7], (per, -rank))
    order = sorted(acc, key=lambda op: (-acc[op][3], op))
    keep = [op for op in order if not op.startswith("(")][:WORLD_TOP]
    rest = [op for op in order if op not in keep and op != "(no host op)"]
    rows = [_op_row(op, [acc[op]]) for op in keep]
    if rest:
        rows.append(_op_row("(other ops)", [acc[op] for op in rest]))
    if "(no host op)" in acc:
        rows.append(_op_row("(no host op)", [acc["(no host op)"]]))
    return rows, len(acc)


def _op_row(op: str, xs: list) -> OpRow:
    ranks = max(x[0] for x in xs)
    count, total, per = sum(x[1] for x in xs), sum(x[2] for x in xs), sum(x[3] for x in xs)
    dn = sum(x[5] for x in xs)
    kernels: dict[str, float] = {}
    for x in xs:
        for k, v in x[6].items():
            kernels[k] = kernels.get(k, 0.0) + v
    top = max(x[7] for x in xs)
    return OpRow(op=op, ranks=ranks, count=count, total_ms=total, ms_per_step=per,
                 mean_us=total * 1e3 / count if count else 0.0, launch_delay_us=sum(x[4] for x in xs) / dn if dn else None,
                 kernel=max(kernels, key=lambda k: (kernels[k], k)) if kernels else "", max_rank=-top[1],
                 max_rank_ms=top[0])


def _roof(ranks) -> tuple[list[RoofRow], int]:
    acc: dict[tuple, list] = {}  # (op, shape, dtype) -> [ranks, calls, ms, gflop, gbytes, {peak}, {bound}]
    for _, _, _, _, roof in ranks:
        for x in roof:
            g = acc.setdefault((x.op, x.shape, x.dtype), [0, 0, 0.0, 0.0, 0.0, set(), set()])
            g[0] += 1
            g[1] += x.count
            g[2] += x.kernel_ms
            g[3] += x.gflop
            g[4] += x.gbytes
            g[5].add(x.peak_tflops)
            g[6].add(x.bound)
    order = sorted(acc, key=lambda k: (-acc[k][2], k))
    keep = [k for k in order if k[0] != "(other)"][:WORLD_TOP]
    rest = [k for k in order if k not in keep]
    rows = [_roof_row(*k, [acc[k]]) for k in keep]
    if rest:
        rows.append(_roof_row("(other)", "", "", [acc[k] for k in rest], mixed=True))
    return rows, len(acc)


def _roof_row(op: str, shape: str, dtype: str, gs: list, mixed: bool = False) -> RoofRow:
    ms, gflop, gb = sum(g[2] for g in gs), sum(g[3] for g in gs), sum(g[4] for g in gs)
    peaks = set().union(*(g[5] for g in gs))
    bounds = set().union(*(g[6] for g in gs))
    tflops = gflop / ms if ms else None  # GFLOP per ms is TFLOP/s
    peak = next(iter(peaks)) if len(peaks) == 1 and not mixed else None
    bound = "" if mixed else (next(iter(bounds)) if len(bounds) == 1 else "mixed")
    return RoofRow(op=op, shape=shape, dtype=dtype, ranks=max(g[0] for g in gs), calls=sum(g[1] for g in gs),
                   kernel_ms=ms, gflop=gflop, gbytes=gb, tflops=tflops, gbps=gb / ms * 1e3 if ms else None,
                   intensity=gflop / gb if gb else None, peak_tflops=peak,
                   peak_frac=tflops / peak if peak and tflops is not None else None, bound=bound)


def _streams(idle: list[tuple[int, int, list]]) -> list[StreamIdle]:
    acc: dict[int, list] = {}  # stream -> [ranks, Σ idle/step, Σ host/step, (idle/step, -rank)]
    for rank, steps, rows in idle:
        for stream, idle_ns, host_ns in rows:
            x = acc.setdefault(stream, [0, 0.0, 0.0, (-1.0, 0)])
            per = idle_ns / 1e6 / max(1, steps)
            x[0] += 1
            x[1] += per
            x[2] += host_ns / 1e6 / max(1, steps)
            x[3] = max(x[3], (per, -rank))
    rows = [StreamIdle(stream=s, ranks=x[0], idle_ms=x[1] / x[0], host_wait_ms=x[2] / x[0],
                       other_ms=(x[1] - x[2]) / x[0], max_rank=-x[3][1], max_rank_ms=x[3][0]) for s, x in acc.items()]
    rows.sort(key=lambda r: (-r.idle_ms, r.stream))
    return rows[:STREAMS]


def _sequences(ranks: list[RankSequences]) -> list[SeqRow]:
    """Each rank's top sequences summed by (op, kernels); the WORLD_SEQ with the most time per step (a sequence
    outside a rank's own top rows counts nothing there, as with the op rows)."""
    acc: dict[tuple, list] = {}  # (op, kernels) -> [ranks, count, total ms, ms/step, Σ count/step]
    for r in ranks:
        for x in r.rows:
            a = acc.setdefault((x.op, tuple(x.kernels)), [0, 0, 0.0, 0.0, 0.0])
            steps = max(1, r.steps)
            a[0] += 1
            a[1] += x.count
            a[2] += x.total_ms
            a[3] += x.total_ms / steps
            a[4] += x.count / steps
    kernel_ms = sum(r.kernel_ms for r in ranks)
    order = sorted(acc, key=lambda k: (-acc[k][3], k))[:WORLD_SEQ]
    return [SeqRow(op=k[0], kernels=list(k[1]), ranks=a[0], count=a[1], count_per_step=a[4] / a[0], total_ms=a[2],
                   ms_per_step=a[3], mean_us=a[2] * 1e3 / a[1] if a[1] else 0.0,
                   share=a[2] / kernel_ms if kernel_ms else 0.0) for k in order for a in [acc[k]]]
