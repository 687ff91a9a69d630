"""A planted slowdown named as such: `llmdiag run --inject-slow rank:R:F[:forward|backward]` records the option
in the manifest (`options.inject_slow`), so a finding that blames rank R (a slow pipeline stage, a straggler) is
about our knob, not the user's model: it says so and advises no layer move for it.
"""

from __future__ import annotations

import re

from diagnose.model.analysis import Analysis, Evidence, Finding

BLAMES = ("pipeline_imbalance", "stragglers")  # rules whose evidence.ranks name the slow rank
_SPEC = re.compile(r"rank:([0-9]{1,7}):([0-9]{1,3}(?:\.[0-9]{1,6})?)(?::(forward|backward))?")  # workloads/slow.py


def planted(a: Analysis) -> tuple[int, str, str | None, str] | None:
    """(rank, factor as written, forward/backward or None, the spec) from the manifest, or None (no manifest, no
    option, or a value that is not the knob's syntax: then nothing is called planted)."""
    spec = a.manifest.option("inject_slow") if a.manifest else None
    m = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
    return (int(m[1]), str(m[2]), m[3], str(spec)) if m else None


def planted_words(rank: int, factor: str, kind: str | None, spec: str) -> str:
    return (f"rank {rank}'s {kind or 'compute'} was slowed ×{factor} on purpose (--inject-slow {spec}, recorded "
            "in the manifest)")


def name_planted(a: Analysis, fs: list[Finding]) -> list[Finding]:
    """Findings that blame the planted rank say it was planted; their action is to drop the knob, not to move
    layers or inspect the host (the slowdown is ours). The gain stays: the time the planted slowdown costs."""
    p = planted(a)
    if not p:
        return fs
    words = planted_words(*p)
    for f in fs:
        if f.id not in BLAMES or p[0] not in f.evidence.ranks:
            continue
        ev = f.evidence
        f.evidence = Evidence(f"{words}; {ev.text}", ev.metric, ev.ranks, ev.steps, "manifest",
                              [*ev.events, "manifest.options.inject_slow"])
        f.title = f"{f.title} (planted: --inject-slow)"
        f.action = (f"none for the model: {words}; run without `--inject-slow` to see the real balance (no layer "
                    "move or host change is advised for a planted slowdown)")
        f.expected_gain = f.expected_gain.split("; moving one layer")[0] + "; the slowdown is the planted one"
    return fs
