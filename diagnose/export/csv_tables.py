"""`analyze --tables DIR --format csv|both`: the tables of diagnose.export.tables as CSV, for Excel and shell tools.

The same tables, columns and rows as the Parquet files (TABLES declares them once), written by the stdlib: CSV
needs no pyarrow. A header row of the column names; null is an empty cell. Strings come from traces and are
untrusted: a cell that a spreadsheet would run as a formula (starting with =, +, -, @, tab or carriage return)
is written with a leading apostrophe, as OWASP advises against CSV injection.
"""

from __future__ import annotations

import csv
import io
import os

from llmdiag.diagnose.export.tables import OPTIONAL, TABLES, _text, columns, make_folder
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.files import write_atomic_with

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(v, t: str):
    """One CSV cell: None empty, a formula-looking string defused."""
    if v is None:
        return ""
    if t == "str":
        v = _text([v])[0]
        return "'" + v if v.startswith(_FORMULA) else v
    return v


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
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(zip(*([cell(v, t) for v in cols[name][c]] for c, t, _ in spec)))
        data = buf.getvalue().encode("utf-8")
        write_atomic_with(path, lambda f, d=data: f.write(d), 0o666)
        paths.append(path)
    return paths


def _header(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n").split(",")
    except OSError:
        return []
