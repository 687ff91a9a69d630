"""The job as assembly resolved it, for the stages above metrics to read.

`assemble` (cross_rank.py) decides which outputs are the job's ranks (duplicates, traces of another job and
failed files left out), the clock shift of each (clock.py), each pipeline rank's staged actions and the
pipeline chains, and matches collectives and send/recv across ranks. The pipeline replay and the Kineto what-if
(diagnose.simulate) read that decision here instead of working it out again from the raw outputs, so a
duplicate the gate calls resolved is resolved for them too, and every reader puts a rank on the same clock.
The timeline reads the same shifts from `RankMetrics.clock_shift_ns`, written from `shift_ns`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action

if TYPE_CHECKING:
    from llmdiag.diagnose.model.matching import P2PMatch


@dataclass
class Job:
    """The ranks assembly kept, their clock shifts, pipeline actions and matches: what simulate reads."""

    ranks: list[RankOutput]  # one output per kept rank, rank order
    shift_ns: dict[int, int]  # rank -> ns added to its rank-relative times to put them on the common clock
    missing: list[int] = field(default_factory=list)  # ranks of the world without a trace
    # the pipeline as measured (PipelineResult): each rank's actions with their stage (rank-relative ns, as the
    # rank's other records), only of ranks in a chain; the chains (ranks in stage order); none without a pipeline
    actions: dict[int, list[Action]] = field(default_factory=dict)
    chains: list[list[int]] = field(default_factory=list)
    # rank -> per row of its collectives, the number of its collective within its (group, kind) as the skew
    # matched them across ranks (metrics/job/skew.py; LONE and below: no other rank's row); kept where there
    # are pipeline actions, empty where nothing was matched
    collectives: dict[int, np.ndarray] = field(default_factory=dict)
    p2p: list[P2PMatch] = field(default_factory=list)  # send/recv matched across ranks, on the common clock
    oversubscribed: bool = False  # more ranks than CPU cores: timings contaminated

    def with_actions(self) -> list[RankOutput]:
        """The kept ranks with pipeline actions (parsed, or staged by assembly): what the what-if simulates;
        none, and nothing to simulate (analyze.py then never imports simulate)."""
        return [o for o in self.ranks if o.actions or (o.rank is not None and self.actions.get(o.rank))]
