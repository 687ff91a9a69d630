"""The terminal's one layout: the width and colour of the current render, prose wrapping, severity colours and
tables fitted by `gate.format.fit`, shared by every section of `cli/terminal.py` and `cli/terminal_kernels.py`."""

from __future__ import annotations

import textwrap
from contextvars import ContextVar
from typing import Any

import click

from llmdiag.diagnose.gate.format import fit
from llmdiag.diagnose.model.escape import terminal as printable  # the terminal sink's one escaping function
from llmdiag.diagnose.model.format import fmt

MAX_ROWS = 16
WIDTH: ContextVar[int] = ContextVar("width", default=100)
COLOUR: ContextVar[bool] = ContextVar("colour", default=False)
SEVERITY_STYLE: dict[str, dict[str, Any]] = {"high": {"fg": "red", "bold": True}, "medium": {"fg": "yellow", "bold": True},
                  "low": {"fg": "cyan"}, "error": {"fg": "red", "bold": True}, "warning": {"fg": "yellow"}}


def _wrap(text: str, indent: str = "", first: str | None = None) -> str:
    """Prose wrapped to the terminal width (words kept whole, a word longer than the line cut), each paragraph
    escaped for the terminal here: with `fit` for tables, the terminal sink's one place of escaping."""
    paras = str(text).split("\n")
    return "\n".join(textwrap.fill(printable(p).replace(" %", _GLUE), WIDTH.get(),
                                   initial_indent=indent if first is None or n else first, subsequent_indent=indent,
                                   break_long_words=True, break_on_hyphens=False).replace(_GLUE, " %")
                     for n, p in enumerate(paras))


_GLUE = "\u00a0%"  # a share's number and its " %" kept on one line (textwrap breaks only at ASCII whitespace)


def _sev(word: str) -> str:
    """A severity word, coloured on a terminal (click strips styles when the output is not a tty)."""
    return click.style(word, **SEVERITY_STYLE.get(word, {})) if COLOUR.get() else word


def _table(title: str, header: list[str], rows: list[list], note: str = "", cut: set[int] | None = None,
           seqs: set[int] | frozenset[int] = frozenset()) -> str:
    """Title, table and note, fitted to the width by the one layout (`gate.format.fit`): name columns
    (`cut`, default the first) keep their full text while the table fits, else are keyed to a legend."""
    if not rows:
        return ""
    out = ["\n" + _wrap(title), fit(header, [[str(x) for x in r] for r in rows], WIDTH.get(),
                                      names=cut if cut is not None else {0}, seqs=seqs)]
    if note:
        out.append(_wrap(note.strip(), "  "))
    return "\n".join(out)


def _more(n: int, what: str) -> str:
    return f"... {n} more {what} in the JSON summary" if n > 0 else ""


def _ms(v) -> str:
    return fmt(v, "ms", suffix=False)


def _pct(v) -> str:
    return fmt(v, "pct")
