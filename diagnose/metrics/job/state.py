"""The job as resolution decided it, frozen: what every section of the Analysis and every simulation reads.

`resolve_job` (resolve.py) decides, once, which outputs are the job's ranks (duplicates, traces of another job
and failed files left out), the world, the layout, each rank's host and clock shift (clock.py), how collectives
and send/recv pair across ranks (skew.py, pipeline/p2p.py) and the measured pipeline. The sections of the
Analysis (sections.py), the pipeline replay and the Kineto what-if (diagnose.simulate) read that decision here
instead of working it out again from the raw outputs, so a duplicate the gate calls resolved is resolved for
them too, and every reader puts a rank on the same clock. The timeline reads the same shifts from
`RankMetrics.clock_shift_ns`, written once by resolution from `shift_ns`.

Frozen: no stage after resolution rebinds a field, and none writes into what it holds (the outputs, the
SkewResult, the PipelineResult): the sections and the replay that add to the skew or the pipeline do so on a
copy. `release` drops the ranks' path hops once the Analysis is built (memory, not data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action

if TYPE_CHECKING:
    from llmdiag.diagnose.model.analysis import Issue
    from llmdiag.diagnose.model.manifest import Manifest
    from llmdiag.diagnose.model.matching import P2PMatch
    from llmdiag.diagnose.model.pipeline import PipelineResult
    from llmdiag.diagnose.model.skew import SkewResult


@dataclass(frozen=True, eq=False)
class Job:
    """The ranks resolution kept, their world, layout, clocks and matches, the pipeline it measured."""

    ranks: list[RankOutput]  # one output per kept rank, rank order
    shift_ns: dict[int, int]  # rank -> ns added to its rank-relative times to put them on the common clock
    missing: list[int] = field(default_factory=list)  # ranks of the world without a trace
    # the pipeline as measured (PipelineResult): each rank's actions with their stage (rank-relative ns, as the
    # rank's other records), only of ranks in a chain; the chains (ranks in stage order); none without a pipeline
    actions: dict[int, list[Action]] = field(default_factory=dict)
    chains: list[list[int]] = field(default_factory=list)
    # rank -> per row of its collectives, the number of its collective within its (group, kind) as the skew
    # matched them across ranks (metrics/job/skew.py; LONE and below: no other rank's row); empty where
    # nothing was matched. The job's critical path and the what-if cross it.
    collectives: dict[int, np.ndarray] = field(default_factory=dict)
    p2p: list[P2PMatch] = field(default_factory=list)  # send/recv matched across ranks, on the common clock
    oversubscribed: bool = False  # more ranks than CPU cores: timings contaminated
    # the kept outputs in the order resolution left them (file order): the order the skew was computed over,
    # and the one the job's path and the per-rank views read (ties break by position, as they did)
    in_order: list[RankOutput] = field(default_factory=list)
    source: str = ""  # the input as given
    manifest: Manifest | None = None
    world: int | None = None  # the world size the traces (else the manifest) state
    duplicates: list[int] = field(default_factory=list)  # ranks with several trace files, one kept
    layout: dict[str, int] | None = None  # parallel dims: manifest, process groups, DDP/FSDP ops, inferred pp
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host name ("" unknown)
    # rank -> ns from the earliest rank's trace origin to its own (clock.py): what collectives are matched on;
    # shift_ns adds the host skew the matching measured
    offset_ns: dict[int, int] = field(default_factory=dict)
    # the skew of the matched collectives, alignment issues applied and send/recv pairs held; stragglers
    # by arrival only (the compute-excess ones are a section: sections.py), None with one rank and no p2p
    skew: SkewResult | None = None
    pipeline: PipelineResult | None = None  # the pipeline measured (bubbles), before the replay completes it
    issues: list[Issue] = field(default_factory=list)  # what resolution found, in the order it found it

    def release(self) -> None:
        """Drops the ranks' path hops once the Analysis is built: the biggest per-rank arrays the coordinator
        holds, read only by the job's critical path (sections.py), and kept alive through the rules by the
        run's outputs otherwise. A release, not a write of data."""
        for o in self.in_order:
            o.path_hops = o.path_cuts = None

    def with_actions(self) -> list[RankOutput]:
        """The kept ranks with pipeline actions (parsed, or staged by resolution): what the what-if simulates;
        none, and nothing to simulate (analyze.py then never imports simulate)."""
        return [o for o in self.ranks if o.actions or (o.rank is not None and self.actions.get(o.rank))]
