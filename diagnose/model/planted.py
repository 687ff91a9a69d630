"""A slowdown planted on purpose: `llmdiag run --inject-slow rank:R:F[:forward|backward]` records the option in
the manifest (`options.inject_slow`). Read here once, so the findings (diagnose/rules/planted.py) and the
what-if section (diagnose/model/whatif_view.py) name it in the same words.
"""

from __future__ import annotations


from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.lazy_re import lazy_compile

_SPEC = lazy_compile(r"rank:([0-9]{1,7}):([0-9]{1,3}(?:\.[0-9]{1,6})?)(?::(forward|backward))?")  # workloads/slow.py


def planted(a: Analysis) -> tuple[int, str, str | None, str] | None:
    """(rank, factor as written, forward/backward or None, the spec) from the manifest, or None (no manifest, no
    option, or a value that is not the knob's syntax: then nothing is called planted)."""
    spec = a.manifest.option("inject_slow") if a.manifest else None
    m = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
    return (int(m[1]), str(m[2]), m[3], str(spec)) if m else None


def planted_words(rank: int, factor: str, kind: str | None, spec: str) -> str:
    return (f"rank {rank}'s {kind or 'compute'} was slowed ×{factor} on purpose (--inject-slow {spec}, recorded "
            "in the manifest)")
