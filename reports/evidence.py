"""Links between findings and the report's rows and figures that hold their evidence, both ways.

A finding's `evidence.metric` names the summary field the rule tested; it picks the figure and table, and
the finding's ranks and steps pick rows. Only anchors the page actually has are linked (a rank not listed
in the per-rank table is found in the heatmap instead), and every linked row links back to the finding.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import ranges

# substring of evidence.metric -> (figure or section anchors, the row id prefix for the finding's ranks)
PLACES = [
    ("pipeline", [("pipeline timeline", "fig-pipeline"), ("stage table", "stages")], "stage-r-"),
    ("memory", [("memory figure", "fig-memory"), ("memory table", "memory-table")], "mem-r-"),
    ("skew", [("stragglers", "skew")], "straggler-"),
    ("busbw", [("bandwidth table", "bandwidth")], "rank-"),
    ("comm", [("heatmap", "fig-heatmap"), ("communication table", "overlap")], "rank-"),
    ("overlap", [("heatmap", "fig-heatmap"), ("communication table", "overlap")], "rank-"),
    ("", [("heatmap", "fig-heatmap"), ("step breakdown", "breakdown")], "rank-"),
]
MAX_LINKS = 12


def anchors(ctx: dict) -> set[str]:
    """Ids of the rows and figures this report will hold."""
    a: Analysis = ctx["a"]
    ids = {"overlap", "bandwidth", "skew", "breakdown"} | ({"fig-heatmap"} if len(a.ranks) > 1 else set())
    ids |= {f"rank-{r.rank}" for _, r, _ in ctx["shown"]}
    ids |= {f"step-{st['row'].step}" for st in ctx["steps"]}
    if ctx["memory"]:
        ids |= {"memory-table"} | {f"mem-r-{m['rank']}" for m in ctx["memory"]}
        if ctx["memory_series"]:
            ids.add("fig-memory")
    if a.pipeline:
        ids |= {"stages"} | {f"stage-r-{b.rank}" for b in a.pipeline.stage_bubbles[:64]}
        if ctx["pipe"] and ctx["pipe"]["rows"]:
            ids.add("fig-pipeline")
    if a.skew:
        ids |= {f"straggler-{x.rank}" for _, x in ctx["stragglers"]}  # the rows the report shows
    if len(ctx["step_series"]) >= 2:
        ids.add("fig-steps")
    return ids


def links(ctx: dict) -> tuple[list[list[tuple[str, str]]], dict[str, list[int]]]:
    """Per finding its (label, anchor) links; per anchor the findings that point at it (the back links)."""
    have = anchors(ctx)
    out, back = [], {}
    for i, f in enumerate(ctx["a"].findings):
        metric = str(f.evidence.metric or "")
        places, prefix = next((p, pre) for key, p, pre in PLACES if key in metric)
        ls = [(label, aid) for label, aid in places if aid in have]
        ranks = list(f.evidence.ranks or [])
        listed = [r for r in ranks if f"{prefix}{r}" in have]
        ls += [(f"rank {r}", f"{prefix}{r}") for r in listed[:MAX_LINKS]]
        shown = set(listed)
        unlisted = sorted(r for r in ranks if r not in shown)
        if unlisted and "fig-heatmap" in have:
            ls.append((f"rank{'s' if len(unlisted) > 1 else ''} {ranges(unlisted)} in the heatmap", "fig-heatmap"))
        ls += [(f"step {s}", f"step-{s}") for s in (f.evidence.steps or [])[:MAX_LINKS] if f"step-{s}" in have]
        if "fig-steps" in have and f.evidence.steps:
            ls.append(("per-step chart", "fig-steps"))
        seen, uniq = set(), []
        for label, aid in ls:
            if (label, aid) not in seen:
                seen.add((label, aid))
                uniq.append((label, aid))
                back.setdefault(aid, [])
                if i not in back[aid]:
                    back[aid].append(i)
        out.append(uniq)
    return out, back
