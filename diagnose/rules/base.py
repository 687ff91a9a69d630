"""What every recommendation rule shares: the facts of one Analysis, and how a finding is built.

Numbers in evidence and gains print through `llmdiag.diagnose.model.format.fmt`, the formatter every output uses,
so a number in a finding reads exactly as in the report's and the terminal's tables.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis, CommGroupStats, Evidence, Finding, RankMetrics
from llmdiag.diagnose.model.devices import device_word
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.roles import pg_role
from llmdiag.diagnose.model.placement import device_name, hosts, ranks_per_host

from llmdiag.diagnose.model.gemm_speedup import FP32_TO_BF16_SPEEDUP  # noqa: F401  (one definition, re-exported)


RISKS = ("memory_near_capacity", "contaminated_timings")  # no speed-up: their severity is the risk's, not a gain's
ASSUMED_CAP = "upper bound, topology assumed: medium at most"  # the words a capped gain's text carries


def severity_for(gain_ms: float | None, step_ms: float | None) -> str:
    """high ≥ 10 % of the step, medium ≥ 3 %, else low."""
    if not gain_ms or not step_ms:
        return "low"
    f = gain_ms / step_ms
    return "high" if f >= 0.10 else "medium" if f >= 0.03 else "low"


def graded(id: str, asked: str, gain_ms: float | None, step_ms: float | None, source: str) -> tuple[str, bool]:
    """The one severity rule (docs/recommendations.md "Severity", the report's glossary): the gain's share of the
    step (`severity_for`); a finding with no gain is low unless it is a correctness risk (RISKS keep the rule's
    level); a gain judged against an assumed reference (`source == "assumed"`) is capped at medium. Returns
    (severity, capped) so the gain text can say why a larger gain sits below a smaller one."""
    if gain_ms is None:
        return (asked if id in RISKS else "low"), False
    sev = severity_for(gain_ms, step_ms)
    if source == "assumed" and sev == "high":
        return "medium", True
    return sev, False


def stored_gain(gain_ms: float) -> float:
    """A gain as findings store it (µs-rounded ms): the one value its text, the JSON and every output print."""
    return round(float(gain_ms), 6)


class Ctx:
    """Facts several rules need, computed once per analysis."""

    def __init__(self, a: Analysis):
        self.a = a
        self.ranks = a.ranks
        self.man = a.manifest
        self.layout = a.layout or {}  # the assembly already took the manifest's layout where there is one
        self.step_ms = a.step_ms
        self.device = device_name(a)  # the manifest's, else the trace's
        self.dev = device_word(self.device, a.trace_kind)  # "GPU", "device" (MTIA/Gaudi/TPU) or "CPU": every rule's
        self.Dev = self.dev[0].upper() + self.dev[1:]  # the same at the start of a title
        self.gpu = any(r.trace_kind == "gpu" for r in self.ranks)
        self._hosts = hosts(a)
        self._roles: dict[tuple, str] = {}
        self.peer_waits: dict[int, float] | None = None  # set once by rules/comm.py (needs the straggler rule)

    def role(self, c: CommGroupStats) -> str:
        """Memoised per (kind, group, size): every rank asks the same few questions (16k ranks × 4 groups)."""
        key = (c.kind, c.pg, c.group_size)
        if key not in self._roles:
            self._roles[key] = pg_role(c.kind, c.pg, c.group_size, self.layout)
        return self._roles[key]

    def comm_of(self, r: RankMetrics, roles: tuple) -> tuple[float, float, list[CommGroupStats]]:
        """(per-step op time, per-step exposed op time, the stats) of one rank's comm in these roles."""
        cs = [c for c in r.comm_by_kind if self.role(c) in roles]
        tot = sum(c.total_ms for c in cs) / r.nsteps
        exp = sum(c.total_ms - c.overlapped_ms for c in cs) / r.nsteps
        return tot, min(exp, r.exposed_comm_ms), cs

    def option(self, name: str):
        """A run option the manifest recorded, or None (foreign traces: the setting is unknown)."""
        return self.man.option(name) if self.man else None

    def local_batch(self) -> int | None:
        return self.man.local_batch if self.man else None

    def host(self, rank: int) -> str:
        return self._hosts.get(rank, "unknown")

    def gpus_per_host(self) -> int | None:
        return ranks_per_host(self.a)

    def finding(self, id: str, severity: str, title: str, evidence: str, ranks, steps, action: str,
                expected_gain: str, gain_ms: float | None, metric: str, *, gain_kind: str = "estimate",
                source: str = "trace", events: list[str] | None = None, grade_ms: float | None = None) -> Finding:
        """`grade_ms`: the gain the severity is graded by where it is not the whole gain (what is left of it once
        a larger finding's fix that also shrinks it is made; docs/recommendations.md "Severity")."""
        gain = None if gain_ms is None else stored_gain(gain_ms)
        severity, capped = graded(id, severity, gain if grade_ms is None else grade_ms, self.step_ms,
                                  source)  # every rule's level: one rule
        if capped:
            expected_gain = f"{expected_gain} ({ASSUMED_CAP})"
        if gain is not None and self.contaminated:  # oversubscribed: no precise gain, and nothing above low
            gain, severity = None, "low"
            expected_gain = "not quantified: the run's timings are contaminated by CPU oversubscription"
        return Finding(id=id, severity=severity, title=title,
                       evidence=Evidence(evidence, metric, sorted({int(r) for r in ranks}),
                                         sorted({int(s) for s in steps}), source, list(events or [])),
                       action=action, expected_gain=expected_gain, gain_ms=gain,
                       gain_frac=gain / self.step_ms if gain is not None and self.step_ms else None,
                       gain_kind=gain_kind)

    def gain_text(self, gain_ms: float, how: str, bound: bool = False) -> str:
        """The gain in words: per step, and as the share of the mean step that every output prints; a bound
        (at most the measured component the change removes) reads "up to"."""
        gain_ms = stored_gain(gain_ms)  # the text prints the very number the finding stores
        frac = f" ({fmt(gain_ms / self.step_ms, 'pct')} of the step)" if self.step_ms else ""
        return f"{'up to' if bound else '≈'} {fmt(gain_ms, 'ms')} per step{frac}: {how}"

    @property
    def contaminated(self) -> bool:
        return bool(self.man and self.man.oversubscribed)

    @property
    def training(self) -> bool | None:
        """Does the run train? An llmdiag run (manifest) does; a foreign trace must show backward and optimizer
        ops; None where the summary predates that evidence (then rules behave as before)."""
        if self.man:
            return True
        ev = [r.training for r in self.ranks if r.training is not None]
        if not ev:
            return None
        return any(e.training for e in ev)


def steps_where(ranks: list[RankMetrics], pred=lambda st: True) -> list[int]:
    out = {st.step for r in ranks for st in r.steps if st.time_ms and pred(st)}
    return sorted(out) or sorted({st.step for r in ranks for st in r.steps})


HOST_BOUND_IDLE = 0.10  # a device idle at least this share of the step waits for its host


def host_sets_step(r: RankMetrics) -> bool:
    """The host sets the rank's step: its device idles ≥ HOST_BOUND_IDLE of the step and the host's waits for the
    device are known (`hints.host_wait_ms`), which then bound what faster device work can take off the step
    (fp32_gemm, data_movement)."""
    h = r.hints
    return h.host_wait_ms is not None and (h.device_idle_frac or 0) >= HOST_BOUND_IDLE

