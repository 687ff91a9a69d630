"""Each event's `args`, for `events(path, rank, args=True)`: the one column the loader does not keep.

The loader keeps only the few args the metrics read (RankTrace: stream, correlation, External id, collective
args); a notebook user wants them all (HTA's get_trace has them as columns). They are read again from the file
and lined up with the table's rows by the loader's own rule: the complete (`ph: X`) events in file order, those
with a usable timestamp kept (io.loader._times), sorted by start, ties in file order. The result is checked
against the loaded trace (same count, same names, same starts) and refused, never misaligned, where it
differs.
"""

from __future__ import annotations

import numpy as np
import orjson

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.columns import Columns, _floats
from llmdiag.diagnose.io.loader import _times
from llmdiag.diagnose.io.stream import read_bytes
from llmdiag.diagnose.io.trace import RankTrace


def event_args(t: RankTrace) -> list[str]:
    """Row i of `t` -> its event's args as JSON text ('{}' where it has none)."""
    try:
        doc = orjson.loads(read_bytes(t.path))
    except (OSError, orjson.JSONDecodeError) as e:
        raise LlmdiagError(f"cannot re-read the trace for its args ({e})", t.path) from None
    raw = doc.get("traceEvents") if isinstance(doc, dict) else doc
    X = [e for e in (raw if isinstance(raw, list) else []) if type(e) is dict and e.get("ph") == "X"]
    del doc, raw
    cols = Columns()  # the two columns io.loader._times reads
    cols.parts = [{"ts": _floats([e.get("ts") for e in X]), "dur": _floats([e.get("dur") for e in X])}]
    ts, _, keep, origin = _times(cols, [])
    order = np.argsort(np.where(keep, ts, np.inf), kind="stable")[: int(keep.sum())]
    if len(order) != len(t) or origin != t.origin_us or not np.array_equal(ts[order].astype(np.int64), t.ts) \
            or any(str(X[k].get("name", "")) != t.names[t.name[i]] for i, k in enumerate(order.tolist())):
        raise LlmdiagError("cannot line the trace's args up with its events (the file changed since it was read?)",
                           t.path)
    out = []
    for k in order.tolist():
        a = X[k].get("args")
        try:
            out.append(orjson.dumps(a if isinstance(a, dict) else {}).decode())
        except TypeError:  # a value orjson refuses (a 65-bit int): the stdlib writes it
            import json

            out.append(json.dumps(a, default=str))
    return out
