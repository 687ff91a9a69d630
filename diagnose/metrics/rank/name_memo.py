"""Per-name memo for kernel and op name classifiers.

The ranks a process analyses share their names (every rank of a job runs the same kernels and ops), and a
classifier's answer depends on the name alone, so it is computed once per distinct name per process. Only
names of ordinary length are kept (a hostile multi-MB name is classified, not stored), in a table cleared
when it reaches MAX entries: memory stays bounded whatever the traces hold.
"""

from __future__ import annotations

import functools

from llmdiag.diagnose.metrics.rank.comm_families import NAME_CAP

MAX = 1 << 15  # names remembered per classifier (a trace has hundreds of distinct names)


def per_name(fn):
    """`fn(name)` computed once per distinct name (see the module doc); fn must depend on the name alone."""
    seen: dict = {}
    missing = object()

    @functools.wraps(fn)
    def memo(name: str):
        got = seen.get(name, missing)
        if got is missing:
            got = fn(name)
            if len(name) <= NAME_CAP:
                if len(seen) >= MAX:
                    seen.clear()
                seen[name] = got
        return got

    return memo
