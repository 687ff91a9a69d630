"""Terminal tables and GitHub Actions annotations for `check` and `diff`.

Plain text (no colour codes) so the same output reads in a terminal, a CI log and a pasted issue. Every string
goes out through its sink's escaping function (diagnose/model/escape.py): notes and messages quote manifests and
file names, which are untrusted.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap

from llmdiag.diagnose.gate.verdict import GateResult, Side, Verdict, shown
from llmdiag.diagnose.model.escape import github_data, github_property, markdown, terminal
from llmdiag.diagnose.model.format import fmt, fmt_delta, plural


DEFAULT_WIDTH = 100  # columns off a terminal (a pipe, a CI log) when COLUMNS is not set


def terminal_width() -> int:
    """The width every table and paragraph is fitted to: `COLUMNS` when set (a pipe or CI log can say its
    width), else the terminal's own width on a tty, else DEFAULT_WIDTH."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


# Header underlined with '-', no other rules, two spaces between columns (with the cell's one right pad).
_BOX = "    \n    \n -  \n    \n    \n    \n    \n    \n"


MIN_TEXT = 10  # a text column folds no narrower than this (or its widest cell)
WORD_TEXT = 20  # a text column's word longer than this (an identifier) folds before any number wraps


def prose(lines: list[str], width: int | None = None) -> str:
    """`lines` joined, each single line of prose wrapped to the width (words kept whole, a hanging indent);
    an element holding several lines (a table, already fitted) is kept as it is. Every line goes out through
    the terminal's escape (idempotent: text escaped upstream is unchanged), so a title built from a manifest
    string cannot reach the terminal raw."""
    width = terminal_width() if width is None else width
    return "\n".join("\n".join(map(terminal, x.split("\n"))) if "\n" in x else
                     terminal(x) if len(terminal(x)) <= width else
                     textwrap.fill(terminal(x), width, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False)
                     for x in lines)


def _narrow(widths: list[int], cols: list[int], floor: list[int], excess: int) -> int:
    """Take up to `excess` characters from `cols`, widest first, none below its `floor`; what is left over."""
    while excess > 0:
        free = [i for i in cols if widths[i] > floor[i]]
        if not free:
            break
        i = max(free, key=lambda k: widths[k])
        rest = max([widths[k] for k in free if k != i] + [floor[i]])
        step = max(1, min(excess, widths[i] - rest))
        widths[i] -= step
        excess -= step
    return excess


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None, width: int | None = None,
          keep: set[int] | frozenset[int] = frozenset(), whole: bool = False) -> str:
    """Columns through rich, fitted to `width` (the terminal's, `terminal_width()`, when None): columns in
    `right` are right-aligned numbers, wrapped only between words ("+2.00 ms" over "(+2.0%)"), never cut;
    text columns fold where the table would be too wide, down to MIN_TEXT, so a long kernel name costs
    lines, not the width; text columns in `keep` (names already shortened to fit, `fit`) never fold, nor,
    when `whole`, any number cell (only headers wrap). A table that cannot fit even so is printed wider than `width` rather than lose a
    character. Plain text: no colour codes, no markup read."""
    right = right or set()
    width = terminal_width() if width is None else width
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    n = len(headers)
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    word = [max(len(x) for r in cells for x in r[i].split() or [""]) for i in range(n)]
    if whole:  # only headers wrap: a number cell ("15.6% (rank 0)") stays on one line
        word = [max([word[i]] + [len(r[i]) for r in cells[1:]]) for i in range(n)]
    text = [i for i in range(n) if i not in right]
    excess = sum(widths) + 2 * (n - 1) - width
    # Narrow in stages, each widest column first: text to its longest word (at most WORD_TEXT: a kernel name
    # folds before a number wraps) or MIN_TEXT, numbers to their longest word, then text down to MIN_TEXT.
    short = [min(w, MIN_TEXT) for w in widths]
    first = [max(min(a, WORD_TEXT), b) for a, b in zip(word, short)]
    text = [i for i in text if i not in keep]
    for cols, floor in ((text, first), (sorted(right & set(range(n))), word), (text, short)):
        excess = _narrow(widths, cols, floor, excess)
    from rich.box import Box  # imported here: a run that prints no table (-q, JSON only) does not pay for rich
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(box=Box(_BOX, ascii=True), show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), show_header=True, expand=False)
    for i, h in enumerate(cells[0]):
        t.add_column(Text(h), justify="right" if i in right else "left", overflow="fold", width=widths[i])
    for r in cells[1:]:
        t.add_row(*(Text(c) for c in r))
    console = Console(width=sum(widths) + 2 * n + 2, file=io.StringIO(), color_system=None, force_terminal=False,
                      force_jupyter=False, legacy_windows=False, soft_wrap=False, emoji=False, highlight=False,
                      markup=False)
    with console.capture() as cap:
        console.print(t)
    return "\n".join(line.rstrip() for line in cap.get().rstrip("\n").splitlines())


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
    header = ["metric", "agg", "baseline", "current", "delta", "limit", "status", "worst"]
    text = table(header, rows, right={2, 3, 4}, keep={0})  # a metric's name whole where the table still fits
    if _widest(text) > terminal_width():
        text = table(header, rows, right={2, 3, 4})
    out = head + [""] + [text]
    for n in v.notes:
        out.append(f"note: {terminal(n)}")
    out += [f"n/a: {terminal(m)}" for m in _na_lines(v.results)]
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
    return prose(out)


def _na_lines(results: list[GateResult]) -> list[str]:
    """One line per n/a message: gates that were "not compared" for one reason (the critical path's, gate/path.py)
    share a line that names them ("path_cpu, path_comm: not compared: ..."), so a sampled capture's reason is said
    once, not once per share."""
    named: dict[str, list[str]] = {}
    for r in results:
        if r.status == "n/a":
            why = r.message.removeprefix(f"{r.metric}: ")
            key = why if why.startswith("not compared: ") else r.message
            named.setdefault(key, []).append(r.metric)
    return [f"{', '.join(dict.fromkeys(ms))}: {m}" if m.startswith("not compared: ") else m for m, ms in named.items()]


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


# ---- one layout for every terminal table with names (analyze's sections): names get the width they need ----
NAME_FLOOR = 16  # a name column is never shortened below this (its legend key and the name's ends)
SEQ = " → "  # how a kernel-sequence cell joins its names (`fit`'s `seqs` columns)
_FREE = 1 << 20  # measuring: no wrapping


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _keyed(rows: list[list[str]], caps: dict[int, int], seqs: set[int]) -> tuple[list[list[str]], dict[str, int]]:
    """`rows` with every name longer than its column's cap written `[k] short form` (a sequence: `[k] → [m]`),
    and the legend: full name -> k, numbered in order of appearance, one key per distinct name."""
    legend: dict[str, int] = {}
    key = lambda name: legend.setdefault(name, len(legend) + 1)
    from llmdiag.diagnose.model.names import short_names  # the report's shortening, so both read alike

    # each name alone: its key tells it from the others, so no name needs widening to differ
    short = lambda name, cap: short_names([name], room)[name] if (room := cap - len(f"[{len(legend)}] ")) >= 6 else ""
    out = []
    for r in rows:
        cells = list(r)
        for i, c in caps.items():
            if len(cells[i]) <= c:
                continue
            if i in seqs:
                cells[i] = SEQ.join(f"[{key(n)}]" for n in cells[i].split(SEQ))
            else:
                k = key(cells[i])
                cells[i] = f"[{k}] {short(cells[i], c)}".rstrip()
        out.append(cells)
    return out, legend


def _split(header: list[str], rows: list[list[str]], right: set[int], keys: list[int], width: int,
           named: list[int]) -> str:
    """A table too wide even with names at their floor, as several: each repeats the key columns (`keys`)
    and takes the most other columns that fit beside them; name columns (`named`) never fold."""
    rest = [i for i in range(len(header)) if i not in keys]
    parts: list[str] = []
    while rest:
        k = len(rest)
        while k > 1:
            cols = keys + rest[:k]
            sub = table([header[i] for i in cols], [[r[i] for i in cols] for r in rows],
                        {j for j, i in enumerate(cols) if i in right}, width, {j for j, i in enumerate(cols) if i in named}, True)
            if _widest(sub) <= width:
                break
            k -= 1
        cols = keys + rest[:k]
        parts.append(table([header[i] for i in cols], [[r[i] for i in cols] for r in rows],
                           {j for j, i in enumerate(cols) if i in right}, width, {j for j, i in enumerate(cols) if i in named}, True))
        rest = rest[k:]
    return "\n\n".join(parts)


def legend_text(legend: dict[str, int], width: int) -> str:
    """`[k] full name` per line, the name wrapped under itself (between words where it has spaces, else cut
    anywhere), so every full name is printed once, within the width."""
    out = []
    for name, k in legend.items():
        lead = f"  [{k}] "
        out += [line.rstrip() for line in textwrap.wrap(name, max(20, width), initial_indent=lead,
                                                         subsequent_indent=" " * len(lead), break_long_words=True,
                                                         break_on_hyphens=False, drop_whitespace=False)]
    return "\n".join(out)


def fit(header: list[str], rows: list[list[str]], width: int | None = None, names: set[int] | None = None,
        seqs: set[int] | frozenset[int] = frozenset()) -> str:
    """A table of `rows` under `header` within `width` columns, every string escaped for the terminal here.
    Columns in `names` (kernel, op, host names) and `seqs` (kernel sequences, `SEQ`-joined) keep their full
    text while the table fits; else the widest is shortened, to NAME_FLOOR at least, each shortened name
    keyed `[k]` with its full name in a legend under the table. Then numbers and headers wrap between words;
    a table still too wide splits into several that repeat the first and the name columns. Every other
    column is a right-aligned number. Returns the table and its legend."""
    width = terminal_width() if width is None else width
    names = {0} if names is None else set(names)
    header = [terminal(h) for h in header]
    rows = [[terminal(c) for c in r] for r in rows]
    if not rows:
        return ""
    right = set(range(len(header))) - names - set(seqs) - {0}
    named = sorted(names | set(seqs))
    natural = {i: max(len(r[i]) for r in rows) for i in named}
    caps = dict(natural)
    while True:  # names shortened, widest first, until the table fits with its headers wrapped
        shown, legend = _keyed(rows, caps, set(seqs))
        text = table(header, shown, right, width, keep=set(named), whole=True)
        excess = _widest(text) - width
        wide = [i for i in named if caps[i] > NAME_FLOOR and max(len(r[i]) for r in shown) > NAME_FLOOR]
        if excess <= 0 or not wide:
            break
        i = max(wide, key=lambda k: caps[k])
        caps[i] = max(NAME_FLOOR, caps[i] - excess)
    if excess > 0:  # too wide even so: several tables, so the names need not shrink further than half the width
        key = [0] if 0 in named or not named else [0, named[0]]
        caps = {i: min(natural[i], max(NAME_FLOOR, width // 2 - 2)) for i in named}
        shown, legend = _keyed(rows, caps, set(seqs))
        text = _split(header, shown, right, key, width, named)
    return text + ("\n" + legend_text(legend, width) if legend else "")
