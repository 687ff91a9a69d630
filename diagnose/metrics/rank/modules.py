"""Time by nn.Module (TraceLens's module view), from a trace recorded with `with_modules=True` (or with_stack).

Such a trace holds a `python_function` span named `nn.Module: <Class>_<k>` for each module call (k numbers the
instances of a class). Per module instance: its calls, their host time (the spans' durations summed), its
nesting depth under other module spans on the same thread, and the device events it launched (those whose
launch call, matched by correlation id, starts inside one of its spans on that thread): how many, and their
device time. Inclusive, as a module tree reads: a parent's numbers contain its children's. Empty for a trace
without module spans (`with_modules` off: llmdiag's own workloads record with_stack only when asked).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank.launches import launch_calls

PREFIX = "nn.Module: "


@dataclass
class ModuleRow:
    module: str  # `<Class>_<k>` as the trace names it
    type: str  # `<Class>`
    depth: int  # module spans enclosing its first call on its thread (0: a root module)
    calls: int
    host_us: float  # the calls' spans summed
    device_events: int  # device events launched inside its calls
    device_us: float  # their durations summed


def module_breakdown(t: RankTrace) -> list[ModuleRow]:
    """Rows by device time then host time, largest first, for a classified trace; [] without module spans."""
    mod_names = [i for i, n in enumerate(t.names) if n.startswith(PREFIX)]
    if not mod_names:
        return []
    spans = np.flatnonzero(np.isin(t.name, mod_names) & (t.stream < 0))
    if not len(spans):
        return []
    dev = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
    rt = launch_calls(t, dev) if len(dev) else np.zeros(0, np.int64)
    dev, rt = dev[rt >= 0], rt[rt >= 0]
    depth = _depths(t, spans)
    count, dev_ns = np.zeros(len(spans), np.int64), np.zeros(len(spans), np.float64)
    for th in np.unique(t.thread[spans]).tolist():  # per thread: its launches by start, prefix sums
        mine = t.thread[rt] == th
        o = np.argsort(t.ts[rt[mine]], kind="stable")
        lts = t.ts[rt[mine]][o]
        cum = np.concatenate([[0.0], np.cumsum(t.dur[dev[mine]][o].astype(np.float64))])
        s = np.flatnonzero(t.thread[spans] == th)
        lo = np.searchsorted(lts, t.ts[spans[s]], side="left")
        hi = np.searchsorted(lts, t.ts[spans[s]] + t.dur[spans[s]], side="left")
        count[s], dev_ns[s] = hi - lo, cum[hi] - cum[lo]
    acc: dict[int, list] = {}
    for j, i in enumerate(spans.tolist()):
        r = acc.setdefault(int(t.name[i]), [0, 0.0, 0, 0.0, depth[j]])
        r[0] += 1
        r[1] += t.dur[i] / 1e3
        r[2] += int(count[j])
        r[3] += dev_ns[j] / 1e3
    out = []
    for n, (calls, host, k, dev_us, d) in acc.items():
        name = t.names[n][len(PREFIX):]
        out.append(ModuleRow(name, name.rsplit("_", 1)[0] if "_" in name else name, d, calls, host, k, dev_us))
    out.sort(key=lambda r: (-r.device_us, -r.host_us, r.module))
    return out


def _depths(t: RankTrace, spans: np.ndarray) -> list[int]:
    """Per span (in `spans` order): module spans enclosing it on its thread. One stack sweep per thread."""
    order = sorted(range(len(spans)), key=lambda j: (int(t.thread[spans[j]]), int(t.ts[spans[j]]),
                                                     -int(t.dur[spans[j]])))
    out = [0] * len(spans)
    stack: list[int] = []  # ends of the open spans of the current thread
    cur = None
    for j in order:
        i = spans[j]
        if t.thread[i] != cur:
            stack, cur = [], t.thread[i]
        while stack and stack[-1] <= t.ts[i]:
            stack.pop()
        out[j] = len(stack)
        stack.append(int(t.ts[i] + t.dur[i]))
    return out
