"""The one number format of every human-facing output: terminal, HTML report, findings, `check`, `diff`.

A number reads the same wherever it is printed because it is printed by `fmt` with a unit from `UNITS`;
changes print through `fmt_delta`. "n/a" is the only rendering of an undefined value (None, NaN), never 0.

A number printed with its suffix picks its unit from its size (bytes B…GiB, GB/s → MB/s, TFLOP/s → GFLOP/s),
so 5 MiB never reads "0.01 GiB" and 0.00147 TFLOP/s never "0.0"; a bare number in a table column keeps the
unit its header states, chosen for the column by `column_unit`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdiag.diagnose.model.pipeline import PipelineResult

NS_PER_MS = 1_000_000  # trace times are integer ns after loading; summaries hold ms
GIB = 2**30

# unit -> (scale, decimals, suffix)
UNITS = {
    "ms": (1.0, 2, " ms"), "us": (1.0, 1, " µs"), "pct": (100.0, 1, "%"), "gib": (2.0**-30, 2, " GiB"),
    "gbps": (1.0, 1, " GB/s"), "int": (1.0, 0, ""), "tps": (1.0, 0, " tok/s"), "tflops": (1.0, 1, " TFLOP/s"),
    "num": (1.0, 3, ""), "avg": (1.0, 1, ""), "x": (1.0, 2, "×"), "ratio": (1.0, 3, ""),
    "mib": (2.0**-20, 2, " MiB"), "kib": (2.0**-10, 2, " KiB"), "b": (1.0, 0, " B"), "mbps": (1e3, 1, " MB/s"),
    "s": (1e-3, 2, " s"), "ms_us": (1e3, 1, " µs"), "gflops": (1e3, 1, " GFLOP/s"), "mflops": (1e6, 1, " MFLOP/s"),
}
# unit -> the smaller units it steps down to, largest first: a value below 1 in one tries the next
LADDERS = {"gib": ("gib", "mib", "kib", "b"), "gbps": ("gbps", "mbps"), "tflops": ("tflops", "gflops", "mflops"),
           "ms": ("s", "ms", "ms_us")}
_BYTES = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _undefined(x) -> bool:
    return x is None or isinstance(x, bool) or (isinstance(x, float) and not math.isfinite(x))


def fmt(x, unit: str = "num", suffix: bool = True) -> str:
    """`x` in `unit`, rounded by the table above ("bytes" picks B/KiB/MiB/GiB from the value)."""
    if _undefined(x):
        return "n/a"
    if not isinstance(x, (int, float)):
        return str(x)
    if unit == "bytes":
        for name, size in _BYTES:
            if abs(x) >= size:
                return f"{x / size:.2f} {name}" if suffix else f"{x / size:.2f}"
        return f"{x:.0f} B" if suffix else f"{x:.0f}"
    if suffix and unit in LADDERS and unit != "ms":
        unit = column_unit([x], unit)
    scale, nd, suf = UNITS[unit]
    if unit == "num" and isinstance(x, int):
        nd = 0  # counts stay counts
    s = f"{float(x) * scale:,.{nd}f}"
    return s + suf if suffix else s


def column_unit(values, unit: str) -> str:
    """The unit of `unit`'s ladder that prints the largest of `values` at 1 or more (the smallest unit when
    all are below that; `unit` itself when none is defined). For time the ladder is s/ms/µs: seconds only
    from 10 s, µs only below 0.1 ms, so step tables stay in ms."""
    xs = [abs(float(v)) for v in values if not _undefined(v) and isinstance(v, (int, float))]
    ladder = LADDERS.get(unit)
    if not ladder or not xs or max(xs) == 0:
        return unit
    top = max(xs)
    if unit == "ms":
        return "s" if top >= 10_000 else ("ms_us" if top < 0.1 else "ms")
    for u in ladder:  # every unit of a ladder reads the same input (bytes, GB/s, TFLOP/s)
        if top * UNITS[u][0] >= 1:
            return u
    return ladder[-1]


def header_unit(unit: str) -> str:
    """The unit's name for a column header: 'GiB', 'MB/s', 'ms'."""
    return UNITS[unit][2].strip()


def fmt_delta(d, unit: str, base=None) -> str:
    """A signed change `d` in `unit`, with its relative size against `base` where that is defined; shares
    ("pct") change in percentage points."""
    if _undefined(d):
        return "n/a"
    sign = "+" if d >= 0 else "-"
    if unit == "pct":  # a change of a share is in percentage points, never a relative "%"
        return f"{sign}{abs(d) * 100:.1f} pt"
    rel = f" ({sign}{abs(d) / abs(base) * 100:.1f}%)" if base and not _undefined(base) and unit not in ("ratio", "pct") \
        else ""
    return f"{sign}{fmt(abs(d), unit)}{rel}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'; an evenly strided run of three or more -> '0-2040 step 8' (at most
    20 pieces, then the count left out): how every output lists ranks, in text that stays short at 16k ranks."""
    if not ranks:
        return ""
    parts: list[str] = []
    i, n = 0, len(ranks)
    while i < n:
        j = i
        if i + 1 < n:
            step = ranks[i + 1] - ranks[i]
            while j + 1 < n and ranks[j + 1] - ranks[j] == step:
                j += 1
            if step != 1 and j - i < 2:  # two ranks with a gap: not a run
                j = i
        if j == i:
            parts.append(str(ranks[i]))
        elif ranks[j] - ranks[i] == j - i:
            parts.append(f"{ranks[i]}-{ranks[j]}")
        else:
            parts.append(f"{ranks[i]}-{ranks[j]} step {ranks[i + 1] - ranks[i]}")
        i = j + 1
        if len(parts) == 20 and i < n:
            return ", ".join(parts) + f", ... ({n - i} more)"
    return ", ".join(parts)


def fmt_gain(finding) -> str:
    """A finding's gain as every output prints it: "≈ X ms per step (Y% of the step)" for an estimate, "up to
    X ms per step (Y% of the step)" for a bound (at most the measured time it removes), "n/a" without a gain."""
    g = getattr(finding, "gain_ms", None)
    if _undefined(g):
        return "n/a"
    frac = getattr(finding, "gain_frac", None)
    share = "" if _undefined(frac) else f" ({fmt(frac, 'pct')} of the step)"
    lead = "up to" if getattr(finding, "gain_kind", "estimate") == "bound" else "≈"
    return f"{lead} {fmt(g, 'ms')} per step{share}"


def pipeline_explanation(res: PipelineResult, oversubscribed: bool) -> str:
    """Why the measured, replayed and formula bubbles of a finished pipeline result differ, in words, after how
    its stages were found (`inference_note`): written once, when the replay is in (simulate/replay.py)."""
    bubbles = res.stage_bubbles
    parts = [f"Measured bubble {res.measured:.1%} against {res.theory:.1%} from the {res.schedule} formula "
             f"(p={res.stages}, m={res.microbatches}"
             + (f", v={res.stages_per_rank}" if res.stages_per_rank > 1 else "") + ")"]
    ideal = res.theory == 0.0 and res.stages > 1  # the zero-bubble family's 0 is an ideal, not this m's answer
    if res.replay is not None:
        parts[0] += f" and {res.replay:.1%} in a replay of the same run with free communication."
        inherent = res.replay - res.theory
        overhead = res.measured - res.replay
        if ideal:
            parts.append(f"Replay − formula = {inherent:+.1%}: the schedule's fill and drain at this m (the "
                         "formula's 0 is not reached at a finite m), plus any stage imbalance.")
        elif res.imbalance is not None and inherent > 0.02:
            busiest = max(bubbles, key=lambda b: b.busy_ms)
            parts.append(f"Replay − formula = {inherent:+.1%}: stage imbalance (stage {busiest.stage} on rank "
                         f"{busiest.rank} is {res.imbalance:.0%} busier than the mean stage; the formula assumes "
                         f"equal stages with backward costing the same on every stage).")
        elif inherent < -0.02:
            parts.append(f"Replay − formula = {inherent:+.1%}: the stages overlap more than the formula's "
                         "uniform model allows (cheap first/last stages or uneven F/B costs).")
        else:
            parts.append(f"Replay − formula = {inherent:+.1%}: the stages are balanced; the schedule itself "
                         "accounts for the replayed bubble.")
        if overhead > 0.02:
            why = ("point-to-point communication waits, host overhead and, on this oversubscribed CPU run, "
                   "ranks competing for cores") if oversubscribed else \
                "point-to-point communication waits and host overhead between actions"
            parts.append(f"Measured − replay = {overhead:+.1%}: {why}.")
        else:
            parts.append(f"Measured − replay = {overhead:+.1%}: communication and overheads add little.")
    else:
        parts[0] += "."
    if ideal:
        parts.append("The formula's 0 is the zero-bubble ideal (F, B and W of equal cost, W filling every gap); "
                     "DualPipe(V)'s own bubble, (stages/2 − 1)(F&B + B − 3W), is a time, not a fraction.")
    return res.inference_note + " ".join(parts)
