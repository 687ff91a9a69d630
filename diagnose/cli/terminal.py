"""Plain-text tables for the terminal: the same cross-rank views, units and finding order as the HTML report.

Every number prints through `llmdiag.diagnose.model.format.fmt`; every table title says whether its numbers are per
step, per rank (a rank's mean over its steps) or totals, and over which ranks. Every string that comes from a
trace (names, hosts, groups, files, messages, evidence) passes through `printable`, so a name cannot move the
cursor or rewrite the screen.
"""

from __future__ import annotations

import os

from llmdiag.diagnose.model.escape import terminal as printable  # the terminal sink's one escaping function
from llmdiag.diagnose.cli.terminal_kernels import _launches, _op_kernels
from llmdiag.diagnose.cli.terminal_layout import (COLOUR, MAX_ROWS, WIDTH, _more, _ms, _pct, _sev, _table,
                                                   _wrap)
from llmdiag.diagnose.gate.format import terminal_width
from llmdiag.diagnose.model import views
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import column_unit, fmt, fmt_gain, header_unit, ranges
from llmdiag.diagnose.model.idle_view import IDLE_COLUMNS, IDLE_HEADER, IDLE_NOTE, idle_rows
from llmdiag.diagnose.model.moe_view import MOE_RANK_HEADER, accum_cards, ep_groups_text, moe_cards, moe_rank_rows
from llmdiag.diagnose.model.names import demangle_many
from llmdiag.diagnose.model.runs import others_hint, run_count
from llmdiag.diagnose.model.step_cap import note as step_note
from llmdiag.diagnose.model.steps import step_span, steps_of
from llmdiag.diagnose.model.views import DISTRIBUTIONS
from llmdiag.diagnose.model.whatif_view import (CONTRIB_HEADER, STAGE_HEADER, contribution_rows, plant_of, stage_rows,
                                        whatif_cards)

TOP_KERNELS = 10
TOP_FINDINGS = 5


def _headline(a: Analysis) -> str:
    g = a.aggregate
    head = [_wrap(f"llmdiag {a.llmdiag_version} — {printable(a.name)}: {g.ranks} rank{'s' if g.ranks != 1 else ''} "
                  f"analysed ({a.trace_kind} traces, world size {a.world_size or 'unknown'}){_run_of(a)}")]
    parts = [f"mean step time {fmt(g.step_time_ms, 'ms')}{_step_basis(a)}"]
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
    elif a.trace_kind == "gpu" and any(r.memory for r in a.ranks):
        parts.append("device memory peak not recorded (only CPU-side [memory] events)")
    return "\n".join(head + [_wrap("; ".join(parts), "  ")])


def _run_of(a: Analysis) -> str:
    """Which of the input's runs this is, where it holds several (the report's header says the same): a folder
    with the job run twice is two captures, and the one not analysed is named here, not only among the issues."""
    cur = next((r for r in a.runs if r.analysed), None)
    if cur is None:
        return ""
    n = run_count(a.runs)
    others = [str(r.number) for r in a.runs if not r.analysed]
    named = f"run {', '.join(others)}" if n <= 4 else f"the other {n - 1} runs"
    hint = f"; outlier steps there: {h} (see the issues)" if (h := others_hint(a.runs)) else ""
    return (f"; run {cur.number} of {n} in this input (started {printable(cur.start) or 'at an unknown time'}"
            + (f"; not analysed: {named}, `--run N` or `--run all`{hint}" if n > 1 else "") + ")")


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
    out.append(_steps(a))
    return "\n".join(x for x in out if x)


def _step_basis(a: Analysis) -> str:
    """What the headline's mean covers, the median step beside it, and the outlier steps it includes."""
    ss, slow = steps_of(a), f" (slowest rank {fmt(a.aggregate.step_time_max_ms, 'ms')})"
    if ss is None:
        return slow
    text = f" over ranks and {step_span(ss.numbers)}{slow}"
    if len(ss.steps) > 1:
        text += f"; median step {fmt(ss.median_ms, 'ms')}"
    out = [s for s in ss.steps if s.outlier]
    if out:
        text += "; outlier: " + ", ".join(f"step {s.step} {fmt(s.time_ms, 'ms')} ({fmt(s.ratio, 'x')} the median)"
                                          for s in out[:3]) + (f" and {len(out) - 3} more" if len(out) > 3 else "")
    return text


def _steps(a: Analysis) -> str:
    """Every step over ranks (model/steps.py): medians over the ranks that have it, and the slowest rank."""
    ss = steps_of(a)
    if ss is None:
        return ""
    flag = any(s.outlier for s in ss.steps)  # the outlier column only where a step is one
    rows = [[str(s.step), str(s.ranks), _ms(s.time_ms), _ms(s.time_max_ms), str(s.max_rank), _ms(s.compute_ms),
             _ms(s.exposed_comm_ms), _ms(s.idle_ms), fmt(s.ratio, "x")]
            + ([f"outlier (> {fmt(ss.outlier_factor, 'x')})" if s.outlier else "—"] if flag else [])
            for s in ss.steps[:MAX_ROWS]]
    ratio = f"; × median = the step over the median step, {fmt(ss.median_ms, 'ms')}" if len(ss.steps) > 1 else ""
    return _table(f"Per step (ms: median over the ranks that have the step, and the slowest rank{ratio})",
                  ["step", "ranks", "step ms", "slowest ms", "slowest rank", "compute", "exposed", "idle", "× median"]
                  + (["outlier"] if flag else []), rows,
                  " ".join(x for x in (_more(len(ss.steps) - MAX_ROWS, "steps"), step_note(a)) if x), cut=set())


def _idle(a: Analysis) -> str:
    """Device idle per rank by cause (diagnose.model.idle_view; the report prints the same rows)."""
    rows, n = idle_rows(a, MAX_ROWS)
    if not any(x.idle.idle_ms > 0 for x in rows):
        return ""
    body = [[str(x.rank), _ms(x.idle.idle_ms), *(_ms(getattr(x.idle, f)) for _, f in IDLE_COLUMNS),
             f"{x.top_call} {_ms(x.top_ms)}" if x.top_call else "—"] for x in rows]
    return _table("Device idle by cause per rank (ms per step: each rank's mean over its steps; most idle first)",
                  IDLE_HEADER, body, (IDLE_NOTE + " " + _more(n - len(rows), "ranks")).strip(), cut={len(IDLE_HEADER) - 1})


def _share(x: float) -> str:
    """A path share (the summary's percent) in the report's rounding, `fmt(x / 100, "pct")`, as prose: "27.3 %"."""
    return f"{fmt(x / 100, 'pct', suffix=False)} %"


def _critical_path(a: Analysis) -> str:
    from llmdiag.diagnose.model.critical_path_view import (CP_COLUMNS, CP_HEADER, CP_NOTE, TERMINAL_ROWS, TYPICAL_NOTE,
                                                          critical_path_rows, typical_rows, unstated_words)

    rows, n = critical_path_rows(a, TERMINAL_ROWS)
    # shares: the summary's percent / 100 in the pct format, as the report, `diff` and `check` print them
    body = [[str(x.rank), _ms(x.path.length_ms), *(fmt(getattr(x.path, f) / 100, "pct", suffix=False) for _, f in CP_COLUMNS),
             f"{x.top_cause} {_share(x.top_share)}" if x.top_cause else "—"] for x in rows]
    title = "Critical path per rank (% of the path; path ms per step, each rank's mean; least device-bound first)"
    out = _table(title, CP_HEADER, body, (CP_NOTE + " " + _more(n - len(rows), "ranks")).strip(), cut={7})
    if typical := typical_rows(a, rows, lambda x, k: _ms(x), _share):  # steps of unequal length: the typical one's
        out += "\n" + "\n".join(_wrap(t, "  ", "") for t in typical) + "\n" + _wrap(TYPICAL_NOTE, "  ")
    if unstated := unstated_words(a):  # event-sampled ranks: the path is withheld, and the reason said
        out += "\n" + _wrap(unstated)
    return out + _job_path(a) if out else out


def _job_path(a: Analysis) -> str:
    from llmdiag.diagnose.model.critical_path_view import JOB_NOTE, job_path_view, job_path_words, job_unstated_words

    v = job_path_view(a)
    if v is None:
        return "\n" + _wrap(w) if (w := job_unstated_words(a)) else ""
    return "\n" + _wrap(job_path_words(v, lambda x, k: _ms(x), _share)) + "\n" + _wrap(JOB_NOTE, "  ")


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
                  cut={1}) + (("\n" + _wrap(note, "  ")) if (note := views.comm_note(a)) else "")


def _pipeline(a: Analysis) -> str:
    p = a.pipeline
    if not p:
        return ""
    rows = [[str(b.stage), str(b.rank), _ms(b.busy_ms), _pct(b.measured), _pct(b.replay), _pct(b.theory), _pct(b.gap)]
            for b in p.stage_bubbles[:MAX_ROWS * 4]]
    return _table(f"Pipeline bubbles per stage ({printable(p.schedule)}, p={p.stages}, m={p.microbatches}, "
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
    full = demangle_many(k.name for k in kernels)
    rows = [[full[k.name], k.kind, str(k.ranks), _ms(k.ms_per_step), fmt(k.count_per_step, "avg"),
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
        worst = [x for _, x in views.stragglers(a)[:MAX_ROWS]]
        out.append(f"\nStragglers ({len(sk.stragglers)}; largest first)\n" + "\n".join(
            _wrap(f"rank {x.rank} ({hosts.get(x.rank, 'unknown')}): {x.reason}"
                  + ("" if x.kind else f" ({_pct(x.value)})"), "    ", "  ")  # an arrival straggler's reason holds its counts
            for x in worst) + ("\n  " + _more(len(sk.stragglers) - MAX_ROWS, "stragglers")
                               if len(sk.stragglers) > MAX_ROWS else ""))
    return "\n".join(x for x in out if x)


def _findings(a: Analysis) -> str:
    """The first findings in the one order (`a.findings` is already sorted: severity, then gain)."""
    if not a.findings:
        return ""
    lines = []
    for f in a.findings[:TOP_FINDINGS]:
        gain = "" if f.gain_ms is None else f" — {fmt_gain(f)}" + (
            f"; {fmt(f.shared_ms, 'ms')} of it counted above" if f.shared_ms else "")
        sev = printable(f.severity)
        title = _wrap(f"{f.title}{gain}", "      ", f"  [{sev}] ")
        lines.append(title.replace(f"[{sev}]", f"[{_sev(sev)}]", 1))
        for label, text in (("evidence", f.evidence.text), ("action", f.action), ("expected gain", f.expected_gain)):
            lines.append(_wrap(f"{label}: {printable(text)}", "        ", "      "))
    more = len(a.findings) - TOP_FINDINGS
    return ("\n" + _wrap(f"Recommendations (first {min(TOP_FINDINGS, len(a.findings))} of {len(a.findings)}; a caveat "
                         "on the timings first, then high severity first, then by gain)") + "\n" + "\n".join(lines)
            + (f"\n  ... {more} more in the report" if more > 0 else ""))


def _issues(a: Analysis) -> str:
    """Issues grouped by the file they are about, each path said once (the tool's own lines, `llmdiag: …`,
    and issues about no file first)."""
    out = []
    if a.issues:
        shown = a.issues[:MAX_ROWS]
        own = lambda i: i.message.startswith("llmdiag: ")
        groups: dict[str, list] = {}
        for i in shown:  # one name per file: a folder given relative and its files absolute are one place
            groups.setdefault("" if own(i) or not i.file else os.path.abspath(str(i.file)), []).append(i)
        files = [f for f in groups if f]
        base = os.path.commonpath([os.path.dirname(f) for f in files]) if len(files) > 1 else ""
        lines = [_wrap(f"\nIssues (files in {base.rstrip(os.sep)}{os.sep})" if base else "\nIssues")]
        for f in sorted(groups, key=lambda f: f != ""):  # stable: files in order of their first issue
            lead = "    " if f else "  "
            if f:
                lines.append(_wrap(f"in {os.path.relpath(f, base) if base else f}:", "    ", "  "))
            for i in groups[f]:
                msg = i.message[len("llmdiag: "):] if own(i) else i.message
                sev = printable(i.severity)
                lines.append(_wrap(msg, lead + "  ", f"{lead}{sev}: ").replace(f"{sev}:", f"{_sev(sev)}:", 1))
        out.append("\n".join(lines) + (f"\n  ... {len(a.issues) - MAX_ROWS} more" if len(a.issues) > MAX_ROWS else ""))
    if a.ranks_missing:
        miss = a.ranks_missing
        out.append(f"\nRanks without a trace: {len(miss)} of {a.world_size} ({ranges(miss)})")
    return "\n".join(out)


def _cards(title: str, cards: list[tuple[str, str, str]]) -> str:
    """Label: value  note, one card a line; every part escaped (cards quote op types and trace names)."""
    return "\n" + _wrap(title) + "\n" + "\n".join(_wrap(f"{v}  {note}".rstrip(), "    ", f"  {printable(label)}: ")
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
    out = _cards("What-if simulation (dependency graph of all workers, replayed; docs/simulation.md)",
                 whatif_cards(w, plant_of(a)))
    if w.stages:
        out += "\n" + _table(f"Pipeline per stage as traced (imbalance {fmt(w.imbalance, 'pct')}: slowest stage "
                             "over the mean)", STAGE_HEADER, stage_rows(w), cut=set())
    if not w.missing and w.contributions:
        out += "\n" + _table("Slowdown per group (ideal job with one group at its measured durations)",
                             CONTRIB_HEADER, contribution_rows(w), cut={1})
    return out


def render(a: Analysis, width: int | None = None, colour: bool = False) -> str:
    """The analysis as text, in the report's order of sections, fitted to `width` columns (tables cut their
    name columns in the middle, prose wraps); severities coloured when `colour` (a tty; click.style, so no
    extra dependency, and click.echo drops the codes where the output is piped). `width` None: the terminal's,
    or `COLUMNS`, or 100 off a terminal (`gate.format.terminal_width`)."""
    tw, tc = WIDTH.set(max(60, terminal_width() if width is None else width)), COLOUR.set(colour)
    try:
        parts = [_headline(a), _ranks(a), _idle(a), _critical_path(a), _comm(a), _pipeline(a), _moe(a), _accum(a), _kernels(a), _op_kernels(a), _launches(a), _memory(a),
                 _skew(a), _whatif(a), _findings(a), _issues(a)]
    finally:
        WIDTH.reset(tw)
        COLOUR.reset(tc)
    return "\n".join(x for x in parts if x)
