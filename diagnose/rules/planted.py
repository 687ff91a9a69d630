"""A planted slowdown named as such: `llmdiag run --inject-slow rank:R:F[:forward|backward]` records the option
in the manifest (`options.inject_slow`), so a finding that blames rank R (a slow pipeline stage, a straggler) is
about our knob, not the user's model: it says so and advises no layer move for it.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis, Evidence, Finding
from llmdiag.diagnose.model.planted import planted, planted_words  # read once, also by the what-if view

BLAMES = ("pipeline_imbalance", "stragglers")  # rules whose evidence.ranks name the slow rank


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
