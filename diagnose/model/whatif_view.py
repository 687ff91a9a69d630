"""The what-if figures as the terminal and the report print them (one list of labelled, formatted values),
so the two outputs cannot disagree on a number or its unit."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.planted import planted, planted_words
from llmdiag.diagnose.model.whatif import Contribution, WhatIf

GROUP_NAMES = {"optype": "op type", "stage": "stage", "dp_rank": "DP rank"}
CONTRIB_HEADER = ["by", "group", "S with only it measured", "share of (S − 1)"]
STAGE_HEADER = ["stage", "compute ms", "bubble"]
# Below this S − 1 a share of it (M_S, M_W, the per-group shares) divides by a number the noise of one step can
# match: one group may remove more than all of it or add to it. Said beside the shares, never hidden.
SMALL_SLOWDOWN = 0.05


def group_name(group: str, w: WhatIf | None = None) -> str:
    """The group as printed; the per-position group named by the ranks' role in the job's layout (WhatIf.position:
    a tp4pp2 run's peers of a stage are TP ranks, not DP ranks)."""
    if group == "dp_rank" and w is not None:
        return w.position
    return GROUP_NAMES.get(group, group)


def contributor(c: Contribution, w: WhatIf | None = None) -> str:
    return f"{group_name(c.group, w)} {c.key}"


# (short value, the planted slowdown in words, the (group, key) contributors it explains)
Plant = tuple[str, str, set[tuple[str, str]]]


def plant_of(a: Analysis) -> Plant | None:
    """The manifest's `--inject-slow` and the what-if groups holding its ops: the planted rank's stage, the op
    types of the slowed kind (both compute types where no kind is given), and the DP rank where there is one."""
    p, w = planted(a), a.whatif
    if not p or w is None:
        return None
    rank, factor, kind, _ = p
    stage = {b.rank: b.stage for b in (a.pipeline.stage_bubbles if a.pipeline else [])}.get(rank)
    dps = {c.key for c in w.by("dp_rank")}
    keys = {("stage", str(stage))} if stage is not None else set()
    keys |= {("dp_rank", k) for k in dps if len(dps) == 1}
    keys |= {("optype", c.key) for c in w.by("optype") if "compute" in c.key and (kind or "") in c.key}
    return f"rank {rank} {kind or 'compute'} ×{factor}", planted_words(*p), keys


def whatif_cards(w: WhatIf, plant: Plant | None = None) -> list[tuple[str, str, str]]:
    """(label, value, note) of the headline numbers; an incomplete graph gives only what is missing. With a
    planted slowdown (plant_of) the contributors it explains are marked and a card names it beside them."""
    if w.missing:
        return [("not simulated", "—", "; ".join(w.missing) + " (no partial answer is shown)")]
    mine = plant[2] if plant else set()
    top = ", ".join(f"{contributor(c, w)} {fmt(c.slowdown, 'ratio')}"
                    + (" (planted)" if (c.group, c.key) in mine else "") for c in w.top(3))
    cards = [
        ("slowdown S", fmt(w.slowdown, "ratio"),
         f"simulated step as traced (launch delays removed) {fmt(w.no_delay_step_ms, 'ms')} over the ideal "
         f"{fmt(w.ideal_step_ms, 'ms')}: " + _cost(w)),
        ("top contributors", top, "S recomputed with only that group at its measured durations"),
        *_planted_card(w, plant),
        ("simulated vs measured", f"{fmt(w.simulated_step_ms, 'ms')} vs {fmt(w.measured_step_ms, 'ms')}",
         f"replay error {fmt(w.sim_error, 'pct')} with the measured launch delays; {fmt(w.ops, 'int')} ops, "
         f"{w.workers} workers, {w.steps} steps"),
        ("launch slowdown", fmt(w.launch_slowdown, "ratio"),
         "measured step over the replay without launch delays (host gaps the graph does not explain)"),
    ]
    for a in w.assumed:
        cards.append(("assumed", "—", a))
    for x in w.left_out:
        cards.append(("left out", "—", f"{x}: not replayed, the job is too large for the replay budget"))
    if w.ms is not None:
        cards.append(("M_S (last stage)", fmt(w.ms, "pct"),
                      "share of the slowdown removed by making the last stage's ops ideal" + _ms_sign(w)))
    if w.mw is not None:
        cards.append(("M_W (worst workers)", fmt(w.mw, "pct"),
                      f"share removed by making worker(s) {', '.join(map(str, w.mw_ranks))} ideal"
                      + ("; over 100 %: with them ideal the step is shorter than the all-ideal one (their peers run "
                         "faster than the all-worker typical durations)" if w.mw > 1 else "")))
    if (w.ms is not None or w.mw is not None) and w.slowdown is not None and w.slowdown - 1 < SMALL_SLOWDOWN:
        cards.append(("shares", "—", f"S − 1 is only {fmt(w.slowdown - 1, 'pct')}: shares of so small a slowdown "
                      "are unstable, one group can remove more than all of it (over 100 %) or add to it (below 0)"))
    if w.link_gains:
        link, gain = max(w.link_gains.items(), key=lambda kv: (kv[1], kv[0]))
        if gain > 0:
            cards.append(("slowest link", f"ranks {link}",
                          f"if its transfers ran at their op type's median: step −{fmt(gain, 'ms')} "
                          f"({fmt(gain / w.no_delay_step_ms, 'pct')}), an estimate from the replay"))
    return cards


def _cost(w: WhatIf) -> str:
    """What stragglers cost: 1 − 1/S of the step. S below 1 (the traced step replays faster than the ideal one,
    whose typical durations are means over workers) is no negative cost but noise: said as such."""
    if w.slowdown is None or w.slowdown < 1:
        return "no straggler cost (S below 1: the step as traced replays no slower than the ideal, within noise)"
    return f"stragglers cost {fmt(1 - 1 / w.slowdown, 'pct')} of the step"


def _planted_card(w: WhatIf, plant: Plant | None) -> list[tuple[str, str, str]]:
    if not plant:
        return []
    value, words, mine = plant
    named = [contributor(c, w) for c in sorted(w.contributions, key=lambda c: -c.slowdown) if (c.group, c.key) in mine]
    return [("planted", value, words + (f"; it explains {', '.join(named[:3])} (marked planted above)"
                                                   if named else "") + ": a slowdown of the knob, not of the model")]


def _ms_sign(w: WhatIf) -> str:
    """Why M_S leaves [0, 100 %] (a correct value, not a bug): the ideal is every op type's typical duration over
    all stages, so where another stage is the slow one, the last stage's measured ops are faster than that typical
    and making them "ideal" slows them: the step grows and the share is negative (below −100 % when it grows by
    more than the whole slowdown). The stage whose ideal gains most is where the slowdown sits."""
    if w.ms is None or w.ms >= 0:
        return ""
    best = max(w.stage_gains.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    where = (f"; the slowdown sits in stage {best[0]} (its ops ideal: step −{fmt(best[1], 'ms')})"
             if best and best[1] > 0 else "")
    return ("; negative: the last stage runs faster than the all-stage typical durations, so making it ideal slows "
            "it and the step grows" + where)


def contribution_rows(w: WhatIf) -> list[list[str]]:
    s = w.slowdown or 1.0
    rows = []
    for c in sorted(w.contributions, key=lambda c: (list(GROUP_NAMES).index(c.group) if c.group in GROUP_NAMES
                                                    else 9, -c.slowdown)):
        share = (c.slowdown - 1) / (s - 1) if s > 1 else None
        rows.append([group_name(c.group, w), c.key, fmt(c.slowdown, "ratio"), fmt(share, "pct")])
    return rows


def stage_rows(w: WhatIf) -> list[list[str]]:
    return [[str(s.stage), fmt(s.compute_ms, "ms", False), fmt(s.bubble, "pct")] for s in w.stages]
