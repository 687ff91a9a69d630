"""`analyze --tables DIR --format csv|both`: the tables of diagnose.export.tables as CSV, for Excel and shell tools.

The same tables, columns and rows as the Parquet files (TABLES declares them once), written by the stdlib: CSV
needs no pyarrow. A header row of the column names; null is an empty cell. Strings come from traces and are
untrusted, and each cell is made inert here, the one place CSV is written:
- control characters (CR, LF, tab, ESC, BEL, C1, bidi overrides) are written as visible escapes (`\r`,
  `\x1b`: errors.printable), so no cell holds a line break a reader could start a row at (a lone CR did);
- a cell that a spreadsheet would run as a formula (starting with =, +, -, @) gets a leading apostrophe, as
  OWASP advises against CSV injection;
- any field with a comma, a quote, CR or LF is quoted (RFC 4180, quotes doubled): written by hand, because
  the csv module quotes only the characters of its own line terminator (`\n` here, so a CR went unquoted).
"""

from __future__ import annotations

import os

from llmdiag.diagnose.errors import printable
from llmdiag.diagnose.export.tables import OPTIONAL, TABLES, _text, columns, make_folder
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.files import write_atomic_with

_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_QUOTE = (",", '"', "\r", "\n")


def cell(v, t: str) -> str:
    """One CSV cell's text: None empty, a string made inert (controls escaped, a formula start defused)."""
    if v is None:
        return ""
    if t == "str":
        v = printable(_text([v])[0])
        return "'" + v if v.startswith(_FORMULA) else v
    return str(v)


def field(text: str) -> str:
    """`text` as one RFC 4180 field: quoted (quotes doubled) when it holds a comma, a quote, CR or LF."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in _QUOTE) else text


def row(cells) -> str:
    return ",".join(field(c) for c in cells) + "\n"


def write_csv(a: Analysis, folder: str) -> list[str]:
    """Every table as `<folder>/<name>.csv` (each atomically); a stale optional CSV whose header is the table's
    own is removed, as write_tables does for Parquet. Returns the paths."""
    cols = columns(a)
    make_folder(folder)
    paths = []
    for name, (_, spec) in TABLES.items():
        path = os.path.join(folder, f"{name}.csv")
        header = [c for c, _, _ in spec]
        if name not in cols:
            if name in OPTIONAL and os.path.isfile(path) and _header(path) == header:
                os.unlink(path)
            continue
        lines = [row(header)]
        lines += map(row, zip(*([cell(v, t) for v in cols[name][c]] for c, t, _ in spec)))
        data = "".join(lines).encode("utf-8")
        write_atomic_with(path, lambda f, d=data: f.write(d), 0o666)
        paths.append(path)
    return paths


def _header(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n").split(",")
    except OSError:
        return []
