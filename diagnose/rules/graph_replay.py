"""Device idle inside CUDA/HIP graph replays (issue #34, recall): a replay's work is queued, its stream free, and
the device runs nothing the trace shows. Reads `RankMetrics.graph_replays` (metrics/rank/graph_replay.py); the cause
is not in a Kineto trace, and the finding says so and what to capture next. docs/recommendations.md describes when
it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.graph_replay import GraphReplays
from llmdiag.diagnose.rules.base import Ctx, severity_for

FLOOR = 0.03  # idle inside replays below 3 % of the step gets no finding


def _bad(c: Ctx) -> list[tuple[RankMetrics, GraphReplays]]:
    return [(r, g) for r in c.ranks if (g := r.graph_replays) is not None and r.step_time_ms
            and g.idle_ms >= FLOOR * r.step_time_ms]


def _held(c: Ctx, g: GraphReplays) -> str:
    if not g.held_call:
        return ""
    where = " under ".join(f"`{x}`" for x in (g.held_op, g.held_region) if x)
    return (f"; meanwhile the host waited {fmt(g.held_ms, 'ms')} in `{g.held_call}`"
            f"{' (' + where + ')' if where else ''} for the {c.dev}'s queue: there the host waited on the device, "
            f"not the device on the host (the replay's work was queued), so removing that wait frees the host "
            f"and not the {c.dev}")


def graph_replay_idle(c: Ctx) -> list[Finding]:
    """Precondition read from the trace: graph launch calls whose recorded nodes share their correlation id, and
    stretches of at least 1 ms inside a replay (from when it could start to its last recorded node) with no device
    op on any stream, FLOOR of the step or more. The gain is a bound, not simulated: the idle itself, were its
    cause removed; the cause is not in the trace."""
    bad = _bad(c)
    if not bad:
        return []
    gain = statistics.fmean(g.idle_ms for _, g in bad)
    w, g = max(bad, key=lambda x: x[1].idle_ms)
    ev = (f"rank {w.rank}: the {c.dev} is idle {fmt(g.idle_ms, 'ms')} per step inside CUDA-graph replays "
          f"({fmt(g.stretches, 'avg')} stretches of 1 ms or more per step, no op on any stream; "
          f"{fmt(g.before_first_ms, 'ms')} of it before a replay's first recorded node): "
          f"{fmt(g.launches, 'avg')} `{g.launch_call}` calls per step, whose recorded nodes "
          f"({fmt(g.nodes, 'avg')} per step) run {fmt(g.node_ms, 'ms')} of {c.dev} time in "
          f"{fmt(g.span_ms, 'ms')} of replay spans per step")
    if g.longest_nodes:
        place = ("before its first recorded node, its stream free" if g.longest_before_first
                 else "between its recorded nodes")
        ev += (f"; the longest stretch, {fmt(g.longest_ms, 'ms')} in step {g.longest_step}, lies {place}: a replay "
               f"launched{f' under `{g.longest_op}`' if g.longest_op else ''} {fmt(g.longest_launch_lead_ms, 'ms')} "
               f"before that node, on stream {g.longest_stream}, whose {plural(g.longest_nodes, 'recorded node')} "
               f"run {fmt(g.longest_node_ms, 'ms')} in its {fmt(g.longest_span_ms, 'ms')} span")
    ev += _held(c, g)
    ev += (f" ({plural(len(bad), 'rank')}). The trace does not show what the replays waited on: a graph's event-wait "
           "and host-function nodes leave no event in a Kineto trace, and kernel nodes may go unrecorded under graph "
           f"replay, so the {c.dev} may have waited on another stream's event, the host, or a peer, or not idled at all")
    act = ("capture what the replays do before changing anything: Nsight Systems with "
           "`nsys profile --cuda-graph-trace=node` records every node of each replay (event waits and host functions "
           "included) with its start and end; or profile a few steps with the graphs off (torch.compile without "
           "`mode=\"reduce-overhead\"`, or `torch._inductor.config.triton.cudagraphs = False`) so each kernel is "
           "recorded with its launch. Then look inside the graph for a captured cross-stream event wait, a host "
           "callback, or a collective waiting on peers")
    eg = c.gain_text(gain, f"the {c.dev} idle inside the replays, mean over those ranks, were its cause removed; "
                     "not simulated: the cause is not in the trace", bound=True)
    return [c.finding("graph_replay_idle", severity_for(gain, c.step_ms), f"{c.Dev} idle inside CUDA-graph replays",
                      ev, [r.rank for r, _ in bad], [g.longest_step] if g.longest_step else [], act, eg, gain,
                      "ranks[].graph_replays.idle_ms", gain_kind="bound",
                      events=[g.launch_call or "cudaGraphLaunch", "kernels correlated to the graph launch"])]
