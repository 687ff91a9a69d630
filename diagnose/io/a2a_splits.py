"""Split sizes of gloo all-to-alls (`c10d::alltoall_base_`), which only a CPU op's `Concrete Inputs` records.

On NCCL, `record_param_comms` carries `In split size` / `Out split size` and the loader keeps them. On gloo
there is no such op: the splits are the op's 4th and 5th concrete inputs (output_split_sizes,
input_split_sizes), which the loader does not keep because every cpu_op has Concrete Inputs. This second,
narrow pass runs only for traces that hold `c10d::alltoall_base_` ops without split args (CPU runs are small).
Values are untrusted text: anything that is not a list of non-negative ints is skipped.
"""

from __future__ import annotations

import json
import re

from diagnose.io.stream import read_bytes

_NAME = re.compile(rb'"name"\s*:\s*"c10d::alltoall_base_"')
_TS = re.compile(rb'"ts"\s*:\s*(-?[0-9.eE+]+)')
_CI = re.compile(rb'"Concrete Inputs"\s*:\s*')
_DECODER = json.JSONDecoder()


def _ints(text) -> list[int] | None:
    try:
        v = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return v
    return None


def gloo_a2a_splits(path: str) -> list[tuple[float, list[int], list[int]]]:
    """(ts in the trace's µs, sent per peer, received per peer) for every uneven gloo all-to-all, in file order."""
    raw = read_bytes(path)
    out = []
    for m in _NAME.finditer(raw):
        # An event's args hold lists but no braces: the event ends at the second '}' after its name.
        lo = raw.rfind(b"{", 0, m.start())
        hi = raw.find(b"}", m.end())
        ev = raw[lo:hi]
        ts, ci = _TS.search(ev), _CI.search(ev)
        if not ts or not ci:
            continue
        try:
            inputs, _ = _DECODER.raw_decode(ev[ci.end():].decode("utf-8", "replace"))
            t = float(ts.group(1))
        except ValueError:
            continue
        if not isinstance(inputs, list) or len(inputs) < 5:
            continue
        recv, sent = _ints(inputs[3]), _ints(inputs[4])
        if recv and sent and len(recv) == len(sent):
            out.append((t, sent, recv))
    return out
