"""Terminal tables and GitHub Actions annotations for `check` and `diff`.

Plain text (no colour codes) so the same output reads in a terminal, a CI log and a pasted issue. Every string
goes out through its sink's escaping function (diagnose/model/escape.py): notes and messages quote manifests and
file names, which are untrusted.
"""

from __future__ import annotations

from diagnose.gate.verdict import GateResult, Side, Verdict, shown
from diagnose.model.escape import github_data, github_property, markdown, terminal
from diagnose.model.format import fmt, fmt_delta, plural


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """Columns padded to the widest cell; columns in `right` are right-aligned (numbers)."""
    right = right or set()
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def ranks_text(side: Side) -> str:
    """How many ranks a side has, and of what world size when traces are missing ("world size 16, 1 rank analyzed")."""
    n, ws = side.ranks, side.world_size
    return plural(n, "rank") if n == ws else f"world size {ws}, {plural(n, 'rank')} analyzed"


def _cells(r: GateResult, strict: bool) -> list[str]:
    u = shown(r.unit)
    return [r.metric, r.agg, fmt(r.baseline, u), fmt(r.current, u), fmt_delta(r.delta, u, r.baseline),
            r.limit, _status(r, strict), r.worst or "-"]


def _status(r, strict: bool) -> str:
    if r.status == "fail":
        return "FAIL"
    if r.status == "n/a":
        return "FAIL (n/a, strict)" if strict else "n/a"
    return "pass"


def render_verdict(v: Verdict) -> str:
    cur, base = v.current, v.baseline
    head = [f"llmdiag check: {terminal(cur.label)} ({ranks_text(cur)})"]
    if base:
        head[0] += f" vs baseline {terminal(base.label)} ({ranks_text(base)})"
    rows = [[terminal(c) for c in _cells(r, v.strict)] for r in v.results]
    out = head + [""] + [table(["metric", "agg", "baseline", "current", "delta", "limit", "status",
                                "worst"], rows, right={2, 3, 4})]
    for n in v.notes:
        out.append(f"note: {terminal(n)}")
    for r in v.results:
        if r.status == "n/a":
            out.append(f"n/a: {terminal(r.message)}")
    for c in v.inputs:
        out.append(f"input: {terminal(c.message)}" + (f" (allowed by {c.opt_out})" if c.allowed else
                                              f" (fails the check; {c.opt_out} to allow)" if c.opt_out else ""))
    failed, na = v.failed(), sum(r.status == "n/a" for r in v.results)
    bad_inputs = v.failed_inputs()
    out.append("")
    if failed or bad_inputs:
        why = [f"{len(failed)} of {len(v.results)} gates failed"] if failed else []
        why += [f"{plural(len(bad_inputs), 'input problem')}"] if bad_inputs else []
        out.append("FAIL: " + ", ".join(why))
    else:
        n = len(v.results)
        out.append(f"PASS: {plural(n, 'gate')}" + (f" ({na} n/a)" if na else ""))
    return "\n".join(out)


def github_annotations(v: Verdict) -> list[str]:
    """Workflow commands: `::error` per failed gate, `::warning` per n/a gate and note."""
    out = []
    for r in v.results:
        if r.status == "fail" or (r.status == "n/a" and v.strict):
            level = "error"
        elif r.status == "n/a":
            level = "warning"
        else:
            continue
        title = f"llmdiag check: {r.metric} {r.limit}"
        out.append(f"::{level} title={github_property(title)}::{github_data(r.message)}")
    for c in v.inputs:
        level = "warning" if c.allowed else "error"
        out.append(f"::{level} title={github_property('llmdiag check: ' + c.reason)}::{github_data(c.message)}")
    for n in v.notes:
        out.append(f"::notice title={github_property('llmdiag check')}::{github_data(n)}")
    return out


def markdown_summary(v: Verdict) -> str:
    """The verdict as a Markdown table, for GitHub's job summary page ($GITHUB_STEP_SUMMARY)."""
    title = f"### llmdiag check: {'PASS' if v.status == 'pass' else 'FAIL'} — {markdown(v.current.label)}"
    if v.baseline:
        title += f" vs baseline {markdown(v.baseline.label)}"
    lines = [title, "", "| metric | agg | baseline | current | delta | limit | status | worst |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for r in v.results:
        cells = _cells(r, v.strict)
        lines.append("| " + " | ".join(markdown(c) for c in cells) + " |")
    lines += [""] + [f"- **{'allowed' if c.allowed else 'FAIL'}** ({c.reason}): {markdown(c.message)}"
                     for c in v.inputs]
    lines += [""] + [f"- {markdown(n)}" for n in v.notes]
    return "\n".join(lines) + "\n"
