"""A planted-straggler corpus of generated multi-rank GPU pipeline traces (on tests/gen/pipeline.py): one
stage's forward, backward or both run slower by a known factor, or one point-to-point link (both
directions between two neighbouring stages) transfers slower, each case with a silent twin (the same job,
nothing planted). Every action's cost and every link's transfer varies by a deterministic ± jitter, so the
twins are not trivially uniform. The truth (rank and op type, or link) is known by construction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tests.gen.pipeline import Case

OPTYPE = {"F": "forward-compute", "B": "backward-compute"}


@dataclass
class Planted(Case):
    slow_kind: str | None = None  # "F", "B", or None for both
    slow_link: int | None = None  # the link between stages slow_link and slow_link + 1, both directions
    link_factor: float = 1.0  # its transfers take this many times longer
    link_jitter_us: int = 0  # every link's transfer varies by up to ± this (deterministic per link)

    def link_us(self, src: int, dst: int) -> int:
        lo = min(src, dst)
        base = self.lat_us + (lo * 7 + (dst > src) * 3) % (2 * self.link_jitter_us + 1) - self.link_jitter_us
        return round(base * self.link_factor) if lo == self.slow_link else base

    def cost(self, s: int, kind: str, mb: int = 0) -> int:
        base = Case.cost(dataclasses.replace(self, slow_stage=None), s, kind, mb)  # with the jitter, unplanted
        if s == self.slow_stage and (self.slow_kind is None or self.slow_kind == kind):
            base = round(base * self.slow_factor)
        return base

    @property
    def truth(self) -> tuple[int, str | None] | None:
        if self.slow_stage is None:
            return None
        return self.rank(self.slow_stage), OPTYPE.get(self.slow_kind) if self.slow_kind else None

    @property
    def truth_link(self) -> str | None:
        """"a-b", the ranks at the two ends of the slow link."""
        return None if self.slow_link is None else f"{self.rank(self.slow_link)}-{self.rank(self.slow_link + 1)}"


def corpus() -> list[Planted]:
    """24 planted cases (2–4 stages, 1F1B and GPipe, F/B/both, factors 1.25–1.6) and 8 silent twins."""
    out = []
    shapes = [(2, 4, "1f1b"), (3, 6, "1f1b"), (4, 8, "1f1b"), (4, 4, "gpipe")]
    kinds = [None, "F", "B"]
    k = 0
    for p, m, sched in shapes:
        for kind in kinds:
            for rep in range(2):
                stage = (k * 5 + rep) % p
                factor = (1.25, 1.6)[(k + rep) % 2]
                out.append(Planted(p=p, m=m, schedule=sched, slow_stage=stage, slow_factor=factor, slow_kind=kind,
                                   lat_us=20 + 10 * (k % 3), jitter_us=15, link_jitter_us=4, steps=2))
            k += 1
    for p, m, sched in shapes:
        for lat in (20, 40):
            out.append(Planted(p=p, m=m, schedule=sched, lat_us=lat, jitter_us=15, link_jitter_us=4, steps=2))
    return out + links()


def links() -> list[Planted]:
    """10 slow links (3 and 4 stages, 1F1B and GPipe, every neighbouring pair, transfers ×4 or ×8 of 30 µs) and
    4 silent twins. With 2 stages a link has no peer of its direction to be slower than: not planted there."""
    out = []
    shapes = [(3, 6, "1f1b"), (4, 8, "1f1b"), (4, 4, "gpipe"), (3, 3, "gpipe")]
    for k, (p, m, sched) in enumerate(shapes):
        for a in range(p - 1):
            out.append(Planted(p=p, m=m, schedule=sched, slow_link=a, link_factor=(4, 8)[(k + a) % 2], lat_us=30,
                               jitter_us=15, link_jitter_us=4, steps=2))
        out.append(Planted(p=p, m=m, schedule=sched, lat_us=30, jitter_us=15, link_jitter_us=4, steps=2))
    return out
