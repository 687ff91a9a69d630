"""The pipeline measured across ranks, for resolution (resolve.py): stages from PP: labels or from the chain of
send/recv peers (virtual stages where one stage per rank does not read), the schedule, and the bubbles on the
common clock; and the stage hint a rank's worker gets from the manifest.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from llmdiag.diagnose.io.discover import rank_from_name
from llmdiag.diagnose.metrics.job.layout import pipeline_groups
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.model.analysis import Issue, PipelineAction
from llmdiag.diagnose.model.format import NS_PER_MS

if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest

__all__ = ["measure_pipeline", "pipeline_groups", "stage_hint", "stages_of"]


def measure_pipeline(good, man, shift, issues, source, tracks=None):
    """(PipelineResult or None, rank -> its actions with their stage (rank-relative ns; ranks in a chain only),
    the chains). Actions are staged on the rank's own clock and measured on the common one."""
    acts = {o.rank: o.actions for o in good}
    with_actions = [r for r, a in acts.items() if a]
    links = {o.rank: o.links for o in good if o.links is not None}
    groups, why = _chains(links)
    virtual, v_sched, v = False, "", None
    if why and all(lk.blocks for lk in links.values()):  # one stage per rank does not read: virtual stages?
        from llmdiag.diagnose.metrics.job.pipeline.virtual import virtual_layout

        blocks = {r: _moved(lk.blocks, shift[r]) for r, lk in links.items()}
        placed, groups, v_sched, v, v_why = virtual_layout(blocks, {o.rank: o.p2p for o in good}, shift)
        why = f"{why}; virtual stages (interleaved, zero-bubble, V-shaped) do not read either: {v_why}" if v_why else ""
        if not v_why:
            acts, virtual = {r: _moved(xs, -shift[r]) for r, xs in placed.items()}, True
            with_actions = [r for r, a in acts.items() if a]
    if why:  # send/recv without PP: labels that do not read as a pipeline: say so, guess nothing
        issues.append(Issue(source, f"pipeline layout unknown: send/recv seen but {why}", None, "warning"))
        return None, {}, []
    if not with_actions:
        return None, {}, []
    from llmdiag.diagnose.metrics.job.pipeline.bubbles import analyse_pipeline
    from llmdiag.diagnose.metrics.job.pipeline.chains import schedule_of
    from llmdiag.diagnose.metrics.job.pipeline.virtual import VIRTUAL_NOTE
    from llmdiag.diagnose.metrics.job.pipeline.vshape import V_NAME, V_NOTE
    from llmdiag.diagnose.metrics.job.track_intervals import bubble_tracks
    from llmdiag.diagnose.model.manifest import PipelineConfig

    pp = (man.pipeline if man else None) or PipelineConfig()
    if links:  # no PP: labels anywhere: stages from the chain of send/recv neighbours
        with_actions = [r for g in groups for r in g if acts.get(r)]
        acts = {r: acts[r] for r in with_actions}
    else:
        groups = pipeline_groups(man, {o.rank: o.distributed for o in good}, with_actions)
    for g in groups:  # `Forward i` spans carry no stage: a rank's stage is its place in its pipeline
        for pos, r in enumerate(g):
            if r in acts:
                acts[r] = [dataclasses.replace(a, stage=pos) if a.stage < 0 else a for a in acts[r]]
    schedule = pp.schedule or v_sched or (schedule_of(acts.get(groups[0][-1], [])) if links
                                          else _infer_schedule(acts, with_actions))
    on_clock = {r: _moved(xs, shift[r]) for r, xs in acts.items()}
    res = analyse_pipeline(on_clock, groups, schedule, pp.microbatches, pp.stages_per_rank or v)
    for g in groups if tracks is not None and res is not None else []:  # the bubbles this pipeline measured
        for r, xs in bubble_tracks([x for x in g if x in on_clock], on_clock, shift).items():
            if r in tracks:
                tracks[r].bubble = xs
    if res is not None and links:
        res.inferred = True
        how = (V_NOTE if v_sched == V_NAME else VIRTUAL_NOTE) if virtual else (
            "Inferred from send/recv (no PP: labels): stages from the chain of peers, microbatches and "
            "forward/backward from the transfers. ")
        res.inference_note = next((lk.note for lk in links.values() if lk.note), "") + how
    origin = min(a.start for r in with_actions for a in on_clock[r])
    for o in good:
        o.metrics.pipeline_actions = [
            PipelineAction(a.stage, a.kind, a.microbatch, (a.start - origin) / NS_PER_MS, (a.end - origin) / NS_PER_MS)
            for a in on_clock.get(o.rank, [])
        ]
    return res, {r: xs for r, xs in acts.items() if xs}, [list(g) for g in groups]


def _chains(links: dict) -> tuple[list, str]:
    """chains() of the ranks' send/recv links; imported only where a rank has links (no PP: labels)."""
    if not links:
        return [], ""
    from llmdiag.diagnose.metrics.job.pipeline.chains import chains

    return chains(links)


def _moved(acts: list[Action], ns: int) -> list[Action]:
    return [dataclasses.replace(a, start=a.start + ns, end=a.end + ns) for a in acts]


def stages_of(good) -> dict[int, int]:
    """rank -> pipeline stage, where known: from its PP: labels, or its place in an inferred chain."""
    out = {o.rank: min(a.stage for a in o.actions) for o in good if o.actions and o.links is None}
    links = {o.rank: o.links for o in good if o.links is not None}
    groups, why = _chains(links)
    for g in groups if not why else []:
        out.update({r: pos for pos, r in enumerate(g)})
    return {r: s for r, s in out.items() if s >= 0}


def _infer_schedule(acts, ranks) -> str:
    kinds = {a.kind for r in ranks for a in acts[r]}
    if "W" in kinds or "I" in kinds:
        return "zbv"
    stages_per_rank = max(len({a.stage for a in acts[r]}) for r in ranks)
    if stages_per_rank > 1:
        return "interleaved1f1b"
    r0 = ranks[0]
    first_step = min(a.step for a in acts[r0])
    order = [a.kind for a in sorted(acts[r0], key=lambda a: a.start) if a.step == first_step]
    return "gpipe" if order == sorted(order, key=lambda k: k != "F") else "1f1b"


def stage_hint(man: Manifest | None, path: str) -> int | None:
    r = rank_from_name(path)
    stages = man.stages_of(r) if man and r is not None else []
    return stages[0] if stages else None
