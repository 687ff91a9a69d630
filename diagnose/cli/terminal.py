"""Plain-text tables for the terminal: the same cross-rank views, units and finding order as the HTML report.

Every number prints through `diagnose.model.format.fmt`; every table title says whether its numbers are per
step, per rank (a rank's mean over its steps) or totals, and over which ranks. Every string that comes from a
trace (names, hosts, groups, files, messages, evidence) passes through `printable`, so a name cannot move the
cursor or rewrite the screen.
"""

from __future__ import annotations

import textwrap
from contextvars import ContextVar

import click

from diagnose.errors import printable
from diagnose.gate.format import table
from diagnose.model import views
from diagnose.model.analysis import Analysis
from diagnose.model.format import column_unit, fmt, fmt_gain, header_unit, ranges
from diagnose.model.moe_view import MOE_RANK_HEADER, accum_cards, ep_groups_text, moe_cards, moe_rank_rows
from diagnose.model.names import demangle, middle, short_names
from diagnose.model.views import DISTRIBUTIONS
from diagnose.model.whatif_view import CONTRIB_HEADER, STAGE_HEADER, contribution_rows, stage_rows, whatif_cards

MAX_ROWS = 16
TOP_KERNELS = 10
TOP_FINDINGS = 5
NAME_WIDTH = 60
MIN_CUT = 12  # a name column is never cut below this
WIDTH: ContextVar[int] = ContextVar("width", default=100)
COLOUR: ContextVar[bool] = ContextVar("colour", default=False)
SEVERITY_STYLE = {"high": {"fg": "red", "bold": True}, "medium": {"fg": "yellow", "bold": True},
                  "low": {"fg": "cyan"}, "error": {"fg": "red", "bold": True}, "warning": {"fg": "yellow"}}


def _wrap(text: str, indent: str = "", first: str | None = None) -> str:
    """Prose wrapped to the terminal width (words kept whole; a long name may still overflow)."""
    return textwrap.fill(text, WIDTH.get(), initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _sev(word: str) -> str:
    """A severity word, coloured on a terminal (click strips styles when the output is not a tty)."""
    return click.style(word, **SEVERITY_STYLE.get(word, {})) if COLOUR.get() else word


def _fit(header: list[str], rows: list[list[str]], cut: set[int], right: set[int]) -> str:
    """The table, its text columns (`cut`) ellipsised in the middle, widest first, until it fits the width;
    a table still too wide is split into two, the second repeating the key columns (0 and `cut`)."""
    width = lambda t: max(len(line) for line in t.splitlines())
    while True:
        text = table(header, rows, right=right)
        excess = width(text) - WIDTH.get()
        widths = {i: max(len(r[i]) for r in rows) for i in cut}
        wide = [i for i in cut if widths[i] > MIN_CUT]
        if excess <= 0 or not wide:
            break
        i = max(wide, key=lambda k: widths[k])
        w = max(MIN_CUT, widths[i] - excess)
        rows = [r[:i] + [middle(r[i], w)] + r[i + 1:] for r in rows]
    keys = sorted({0} | cut)
    rest = [i for i in range(len(header)) if i not in keys]
    if excess <= 0 or len(rest) < 2:
        return text
    for k in range(len(rest) - 1, 0, -1):  # the most columns that fit beside the keys
        first = keys + rest[:k]
        sub = table([header[i] for i in first], [[r[i] for i in first] for r in rows],
                    right={j for j, i in enumerate(first) if i in right})
        if width(sub) <= WIDTH.get() or k == 1:
            second = keys + rest[k:]
            return sub + "\n\n" + _fit([header[i] for i in second], [[r[i] for i in second] for r in rows],
                                         {j for j, i in enumerate(second) if i in cut} - {0},
                                         {j for j, i in enumerate(second) if i in right})
    return text


def _table(title: str, header: list[str], rows: list[list], note: str = "", cut: set[int] | None = None) -> str:
    if not rows:
        return ""
    rows = [[printable(x) for x in r] for r in rows]
    right = set(range(1, len(header)))
    out = ["\n" + _wrap(title), _fit(header, rows, cut if cut is not None else {0}, right - (cut or {0}))]
    if note:
        out.append(_wrap(note.strip(), "  "))
    return "\n".join(out)


def _more(n: int, what: str) -> str:
    return f"  ... {n} more {what} in the JSON summary" if n > 0 else ""


def _ms(v) -> str:
    return fmt(v, "ms", suffix=False)


def _pct(v) -> str:
    return fmt(v, "pct")


def _headline(a: Analysis) -> str:
    g = a.aggregate
    head = [_wrap(f"llmdiag {a.llmdiag_version} — {printable(a.name)}: {g.ranks} rank{'s' if g.ranks != 1 else ''} "
                  f"analysed ({a.trace_kind} traces, world size {a.world_size or 'unknown'})")]
    parts = [f"mean step time {fmt(g.step_time_ms, 'ms')} (slowest rank {fmt(g.step_time_max_ms, 'ms')})"]
    if g.overlap_ratio_mean is not None:
        parts.append(f"overlap mean {_pct(g.overlap_ratio_mean)}, worst {_pct(g.overlap_ratio_min)} "
                     f"(rank {g.overlap_worst_rank})")
    elif views.p2p_bubble_note(a):
        parts.append("communication: pipeline send/recv only, counted as bubble (see the communication table)")
    else:
        parts.append("no communication in the analysed steps")
    if g.tokens_per_s:
        parts.append(fmt(g.tokens_per_s, "tps"))
    if g.mfu is not None:
        parts.append(f"MFU {_pct(g.mfu)}")
    if g.memory_peak_max is not None:
        parts.append(f"memory peak {fmt(g.memory_peak_max, 'gib')} (rank {g.memory_peak_rank})")
    return "\n".join(head + [_wrap("; ".join(parts), "  ")])


def _ranks(a: Analysis) -> str:
    ranks = sorted(a.ranks, key=lambda r: (-r.exposed_comm_ms, -r.step_time_ms, r.rank))  # the column shown
    hosts = views.hosts(a)
    rows = [[r.rank, hosts[r.rank], _ms(r.step_time_ms), _ms(r.compute_only_ms), _ms(r.overlapped_comm_ms),
             _ms(r.exposed_comm_ms), _ms(r.other_ms), _ms(r.idle_ms), _pct(r.overlap_ratio), str(len(r.steps))]
            for r in ranks[:MAX_ROWS]]
    out = [_table("Step breakdown per rank (ms per step: each rank's mean over its steps; most exposed "
                  "communication first; comp only = compute with no comm, ovl comm = comm under compute)",
                  ["rank", "host", "step ms", "comp only", "ovl comm", "exposed", "other", "idle", "overlap", "steps"], [list(map(str, r)) for r in rows],
                  _more(len(ranks) - MAX_ROWS, "ranks"), cut={1})]
    if len(ranks) > MAX_ROWS:
        rows = []
        for label, key, unit, _ in DISTRIBUTIONS:
            sp = views.spread(a, key)
            if sp:
                rows.append([label] + [f"{fmt(v, unit)} (rank {r})" for v, r in (sp.min, sp.median, sp.p90, sp.max)])
        out.append(_table(f"Across all {len(ranks)} ranks (per rank: its mean per step)",
                          ["metric", "min", "median", "p90", "max"], rows))
    steps = views.per_step(a)
    rows = [[str(st.step), str(st.ranks), _ms(st.mean_ms), _ms(st.max_ms), str(st.max_rank)] for st in steps[:MAX_ROWS]]
    out.append(_table("Per step (step time: mean over the ranks that have the step, and the slowest rank)",
                      ["step", "ranks", "mean ms", "slowest ms", "slowest rank"], rows, _more(len(steps) - MAX_ROWS,
                                                                                              "steps")))
    return "\n".join(x for x in out if x)


def _comm(a: Analysis) -> str:
    groups = views.comm_by_group(a)
    bw = column_unit([g.busbw_gbps for g in groups[:MAX_ROWS]], "gbps")
    rows = [[g.kind or "unknown", g.pg or "-", g.role if g.role != "?" else "unknown", str(g.ranks), fmt(g.ops_per_step, "avg"), _ms(g.time_ms_per_step),
             _ms(g.exposed_ms_per_step), _pct(g.overlap),
             f"{_pct(g.worst_overlap)} (rank {g.worst_rank})" if g.worst_rank is not None else "n/a",
             fmt(g.busbw_gbps, bw, suffix=False)] for g in groups[:MAX_ROWS]]
    return _table("Communication per collective and process group (per step, mean over the ranks that run it; "
                  "overlap duration-weighted over those ranks)",
                  ["kind", "group", "role", "ranks", "ops/step", "ms/step", "exposed ms/step", "overlap",
                   "worst rank overlap", f"busbw {header_unit(bw)}"], rows, _more(len(groups) - MAX_ROWS, "groups"),
                  cut={1}) + (("\n" + _wrap(note, "  ")) if (note := views.p2p_bubble_note(a)) else "")


def _pipeline(a: Analysis) -> str:
    p = a.pipeline
    if not p:
        return ""
    rows = [[str(b.stage), str(b.rank), _ms(b.busy_ms), _pct(b.measured), _pct(b.replay), _pct(b.theory), _pct(b.gap)]
            for b in p.stage_bubbles[:MAX_ROWS * 4]]
    return _table(f"Pipeline bubbles per stage ({p.schedule}, p={p.stages}, m={p.microbatches}, "
                  f"window {fmt(p.window_ms, 'ms')} per step)",
                  ["stage", "rank", "busy ms/step", "measured", "replay", "theory", "gap"], rows,
                  printable(p.explanation) + _predicted(p))


def _predicted(p) -> str:
    """The replayed predictions of the run's own schedule at other microbatch counts, the cost model they
    rest on, and how far the same model lands from this run's own measured window."""
    own = [q for q in p.predictions if q.schedule == p.schedule and q.step_ms is not None]
    if not own:
        return ""
    steps = ", ".join(f"m={q.microbatches} {fmt(q.step_ms, 'ms')}" for q in own)
    err = (f"; at this run's m={p.microbatches} it replays {fmt(p.prediction_error, 'pct')} from the measured "
           f"window") if p.prediction_error is not None else ""
    return "\n" + printable(f"Predicted pipeline ms/step ({p.schedule}, same global batch): {steps}{err}. "
                            f"{p.prediction_model}")


def _memory(a: Analysis) -> str:
    mem = views.memory_use(a)
    shown = mem[:MAX_ROWS]
    units = {k: column_unit([getattr(x.stat, k) for x in shown], "gib") for k in ("peak_allocated", "peak_reserved",
                                                                                 "capacity")}
    b = lambda x, k: fmt(getattr(x.stat, k), units[k], suffix=False)
    rows = [[str(x.rank), x.stat.device, b(x, "peak_allocated"), b(x, "peak_reserved"), b(x, "capacity"),
             _pct(x.frac), x.stat.peak_op or "-"] for x in shown]
    h = {k: header_unit(u) for k, u in units.items()}
    return _table("Memory per rank and device (peaks over the trace; closest to capacity first)",
                  ["rank", "device", f"peak allocated {h['peak_allocated']}", f"peak reserved {h['peak_reserved']}",
                   f"capacity {h['capacity']}", "of capacity", "op at peak"],
                  rows, _more(len(mem) - MAX_ROWS, "devices"), cut={6})


def _kernels(a: Analysis) -> str:
    kernels = views.kernel_table(a, TOP_KERNELS)
    full = {k.name: demangle(k.name) for k in kernels}
    short = short_names(list(dict.fromkeys(full.values())), NAME_WIDTH)
    rows = [[short[full[k.name]], k.kind, str(k.ranks), _ms(k.ms_per_step), fmt(k.count_per_step, "avg"),
             fmt(k.mean_us, "us", suffix=False), _pct(k.share)] for k in kernels]
    return _table("Top kernels / ops over ranks (per step, mean over the ranks whose top-K list holds it; share "
                  "of all kernel time over those ranks)",
                  ["name", "kind", "ranks", "ms/step", "count/step", "mean µs", "share"], rows)


def _skew(a: Analysis) -> str:
    sk = a.skew
    if not sk:
        return ""
    out = []
    if sk.matched:
        rows = [[c.kind, c.pg or "-", str(c.matched), _ms(c.mean_skew_ms), _ms(c.max_skew_ms), _ms(c.mean_transfer_ms)]
                for c in sk.by_collective[:MAX_ROWS]]
        out.append(_table("Arrival skew of matched collectives (per collective, over the ranks it matched on; "
                          "most skewed first)", ["kind", "group", "matched", "mean skew ms", "max skew ms",
                                                 "transfer ms"], rows,
                          _more(len(sk.by_collective) - MAX_ROWS, "collective groups")))
    if sk.stragglers:
        hosts = views.hosts(a)
        worst = sorted(sk.stragglers, key=lambda x: (-x.value, x.rank))[:MAX_ROWS]
        out.append(f"\nStragglers ({len(sk.stragglers)}; largest first)\n" + "\n".join(
            f"  rank {x.rank} ({printable(hosts.get(x.rank, 'unknown'))}): {printable(x.reason)}"
            + ("" if x.kind else f" ({_pct(x.value)})")  # an arrival straggler's reason holds its counts
            for x in worst) + ("\n" + _more(len(sk.stragglers) - MAX_ROWS, "stragglers")
                               if len(sk.stragglers) > MAX_ROWS else ""))
    return "\n".join(x for x in out if x)


def _findings(a: Analysis) -> str:
    """The first findings in the one order (`a.findings` is already sorted: severity, then gain)."""
    if not a.findings:
        return ""
    lines = []
    for f in a.findings[:TOP_FINDINGS]:
        gain = "" if f.gain_ms is None else f" — {fmt_gain(f)}"
        title = _wrap(f"{printable(f.title)}{gain}", "      ", f"  [{f.severity}] ")
        lines.append(title.replace(f"[{f.severity}]", f"[{_sev(f.severity)}]", 1))
        for label, text in (("evidence", f.evidence.text), ("action", f.action), ("expected gain", f.expected_gain)):
            lines.append(_wrap(f"{label}: {printable(text)}", "        ", "      "))
    more = len(a.findings) - TOP_FINDINGS
    return ("\n" + _wrap(f"Recommendations (first {min(TOP_FINDINGS, len(a.findings))} of {len(a.findings)}; high "
                         "severity first, then by gain)") + "\n" + "\n".join(lines)
            + (f"\n  ... {more} more in the report" if more > 0 else ""))


def _issues(a: Analysis) -> str:
    out = []
    if a.issues:
        shown = a.issues[:MAX_ROWS]
        line = lambda i: i.message[len("llmdiag: "):] if i.message.startswith("llmdiag: ") else f"{i.file}: {i.message}"
        out.append("\nIssues\n" + "\n".join(_wrap(f"{printable(line(i))}", "    ", f"  {i.severity}: ").replace(
            f"{i.severity}:", f"{_sev(i.severity)}:", 1) for i in shown)
                   + (f"\n  ... {len(a.issues) - MAX_ROWS} more" if len(a.issues) > MAX_ROWS else ""))
    if a.ranks_missing:
        miss = a.ranks_missing
        out.append(f"\nRanks without a trace: {len(miss)} of {a.world_size} ({ranges(miss)})")
    return "\n".join(out)


def _cards(title: str, cards: list[tuple[str, str, str]]) -> str:
    return "\n" + _wrap(title) + "\n" + "\n".join(_wrap(f"{v}  {note}".rstrip(), "    ", f"  {label}: ")
                                                 for label, v, note in cards)


def _moe(a: Analysis) -> str:
    m = a.moe
    if m is None:
        return ""
    head = _cards(f"Expert parallelism (MoE; token counts from {m.source}, roles from {m.role_source}; "
                  f"{ep_groups_text(m)})", moe_cards(m))
    return head + "\n" + _table("MoE per rank (tokens and ms per step, mean over the analysed steps)",
                                MOE_RANK_HEADER, moe_rank_rows(m), cut=set())


def _accum(a: Analysis) -> str:
    return _cards("Gradient accumulation (per optimizer step)", accum_cards(a.accum)) if a.accum else ""


def _whatif(a: Analysis) -> str:
    """S and its top three contributors (diagnose.simulate); the per-group table and stages where the
    graph was built. docs/simulation.md defines the numbers."""
    w = a.whatif
    if w is None:
        return ""
    out = _cards("What-if simulation (dependency graph of all workers, replayed; docs/simulation.md)", whatif_cards(w))
    if w.stages:
        out += "\n" + _table(f"Pipeline per stage as traced (imbalance {fmt(w.imbalance, 'pct')}: slowest stage "
                             "over the mean)", STAGE_HEADER, stage_rows(w), cut=set())
    if not w.missing and w.contributions:
        out += "\n" + _table("Slowdown per group (ideal job with one group at its measured durations)",
                             CONTRIB_HEADER, contribution_rows(w), cut={1})
    return out


def render(a: Analysis, width: int = 160, colour: bool = False) -> str:
    """The analysis as text, in the report's order of sections, fitted to `width` columns (tables cut their
    name columns in the middle, prose wraps); severities coloured when `colour` (a tty; click.style, so no
    extra dependency, and click.echo drops the codes where the output is piped)."""
    tw, tc = WIDTH.set(max(60, width)), COLOUR.set(colour)
    try:
        parts = [_headline(a), _ranks(a), _comm(a), _pipeline(a), _moe(a), _accum(a), _kernels(a), _memory(a),
                 _skew(a), _whatif(a), _findings(a), _issues(a)]
    finally:
        WIDTH.reset(tw)
        COLOUR.reset(tc)
    return "\n".join(x for x in parts if x)
