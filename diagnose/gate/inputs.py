"""What a gate must know about its inputs before it trusts their numbers: the gate fails closed.

A regression gate that passes because the run it gates did not really run is worse than no gate. Each side
is checked for a run marked failed, ranks missing (named missing, or simply absent from a summary's rank list),
left out or duplicated, an empty summary, and gated metrics that vanished, on every rank or on some (defined in
the baseline, undefined now: e.g. communication kernels renamed so none is found). An aggregate over the ranks
where a metric is still defined would compare other ranks than the baseline's, so a partial side fails too. Each such problem fails the check (exit 1) with its reason, unless the user opted out of
that reason explicitly (`--allow-<reason>`); an opted-out problem is still reported, as allowed.
The verdict table is in docs/ci.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from llmdiag.diagnose.errors import printable
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import plural, ranges

# reason -> the flag (and config `allow` entry) that opts out of it; "" = no opt-out
OPT_OUTS = {
    "run_failed": "failed-run",
    "ranks_missing": "missing-ranks",
    "ranks_left_out": "missing-ranks",
    "ranks_duplicate": "duplicate-ranks",
    "metric_undefined": "undefined",
    "empty": "",
}
ALLOW_NAMES = tuple(dict.fromkeys(v for v in OPT_OUTS.values() if v))


@dataclass
class InputCheck:
    """One reason not to trust a side: fails the check unless `allowed`."""

    reason: str  # a key of OPT_OUTS
    side: str  # "current" or "baseline"
    message: str
    allowed: bool = False
    metric: str = ""  # the gated metric a metric_undefined check is about (`undefined:<metric>` allows it alone)

    @property
    def opt_out(self) -> str:
        name = OPT_OUTS.get(self.reason, "")
        one = f" (or --allow-undefined-metric {self.metric})" if self.metric else ""
        return f"--allow-{name}{one}" if name else ""

    @property
    def fails(self) -> bool:
        return not self.allowed


def _manifest_problem(a: Analysis) -> str | None:
    man = a.manifest
    if man is None:
        return None
    bad = man.failed_ranks()
    if man.status not in (None, "ok") or bad:
        why = man.failure.get("reason") if isinstance(man.failure, dict) else man.failure
        ranks = sorted(int(r) for r in bad if str(r).lstrip("-").isdigit())
        text = f"the run is marked {man.status or 'failed'} in its manifest"
        if ranks:
            text += f" ({plural(len(ranks), 'rank')} not ok: {ranks_text(ranks)})"
        if why:
            text += f": {printable(str(why).splitlines()[0][:200])}"
        return text
    return None


def ranks_text(ranks: list[int]) -> str:
    return ranges(sorted(ranks))


def missing_ranks(a: Analysis) -> list[int]:
    """Ranks of the world without an analysed rank: those the summary names missing, and those it leaves out of
    its rank list without naming them (a hand-edited or truncated summary must not pass on the ranks it kept)."""
    present = {r.rank for r in a.ranks}
    absent = set(range(a.world_size)) - present if a.world_size and a.world_size > len(present) else set()
    return sorted(set(a.ranks_missing) | absent)


def side_checks(a: Analysis, side: str) -> list[InputCheck]:
    """The problems of one side, each with the reason it fails."""
    out = []
    if not a.ranks:
        out.append(InputCheck("empty", side, f"{side}: no rank analysed (empty summary): nothing to gate"))
    if (why := _manifest_problem(a)) is not None:
        out.append(InputCheck("run_failed", side, f"{side}: {why}"))
    if missing := missing_ranks(a):
        world = max(a.world_size or 0, len(a.ranks) + len(missing))
        out.append(InputCheck("ranks_missing", side, f"{side}: {len(missing)} of {world} ranks have no "
                                                     f"analysed trace (ranks {ranks_text(missing)})"))
    left = [i for i in a.issues if i.severity == "error"]
    if left:
        first = printable(left[0].message.removeprefix("llmdiag: "))
        out.append(InputCheck("ranks_left_out", side, f"{side}: {plural(len(left), 'input')} left out; first: "
                                                      f"{first[:300]}"))
    dup, twice = sorted(a.ranks_duplicate), sorted(r for r, n in Counter(r.rank for r in a.ranks).items() if n > 1)
    if dup or twice:
        why = [f"ranks {ranks_text(dup)} had more than one trace file and one was chosen (see the warnings)"] * bool(
            dup) + [f"ranks {ranks_text(twice)} appear more than once in the rank list"] * bool(twice)
        out.append(InputCheck("ranks_duplicate", side, f"{side}: " + "; ".join(why)))
    return out


def _keys(units: dict) -> tuple[set, set]:
    """(keys whose value is defined, keys whose value is undefined) of a unit -> (label, value) map."""
    defined = {k for k, (_, v) in units.items() if v is not None}
    return defined, units.keys() - defined


def _where(metric_per: str, keys) -> str:
    """Per-stage values are keyed by pipeline rank (one per replica and stage): named by rank."""
    return f"{'pipeline rank' if metric_per == 'stage' else metric_per}s {ranks_text(sorted(keys))}"


def partial_checks(result, per: str, base: dict | None, cur: dict, same_world: bool) -> list[InputCheck]:
    """A gated metric defined on some ranks (stages) and not on others: undefined in the current run on a rank
    where the baseline has it (or absent from it, when the world sizes are equal), or undefined on some ranks of
    one side while defined on others. The aggregate would be taken over the ranks where it is still defined,
    which are not the ranks the baseline measured, so the gate fails closed (`--allow-undefined` accepts it).
    A metric undefined on every rank of a side is `undefined_check`'s case."""
    out = []
    c_def, c_undef = _keys(cur)
    gate = f"the gate '{result.metric} {result.limit}' would see only the other {'pipeline rank' if per == 'stage' else per}s"
    if base is not None:
        b_def, b_undef = _keys(base)
        gone = (b_def - c_def) if same_world else (b_def & cur.keys()) - c_def
        if gone and (c_def or result.current is not None):
            out.append(InputCheck("metric_undefined", "current", f"current: {result.metric} is undefined on "
                                  f"{_where(per, gone)}, where the baseline has it: {gate}", metric=result.metric))
        if b_def and b_undef:
            out.append(InputCheck("metric_undefined", "baseline", f"baseline: {result.metric} is undefined on "
                                  f"{_where(per, b_undef)} and defined on {_where(per, b_def)}: {gate}", metric=result.metric))
    if c_def and c_undef and not out:
        out.append(InputCheck("metric_undefined", "current", f"current: {result.metric} is undefined on "
                              f"{_where(per, c_undef)} and defined on {_where(per, c_def)}: {gate}", metric=result.metric))
    return out


def undefined_check(result, has_baseline: bool, strict: bool) -> InputCheck | None:
    """A gated metric with no value in the current run although the baseline has one (or, without a
    baseline, although a gate asked for it), or with none in the baseline although the current run has one (a
    stale or edited baseline): the gate cannot be evaluated, so it fails closed. Undefined on both sides is n/a
    (nothing vanished; `--strict` fails that too)."""
    if result.status != "n/a" or strict:
        return None
    if result.current is None and not (has_baseline and result.baseline is None):
        return InputCheck("metric_undefined", "current", f"current: {result.metric} is undefined, so the gate "
                                                         f"'{result.limit}' cannot be evaluated ({result.message})", metric=result.metric)
    if has_baseline and result.baseline is None and result.current is not None:
        return InputCheck("metric_undefined", "baseline", f"baseline: {result.metric} is undefined while the "
                          f"current run has it, so the gate '{result.limit}' cannot be evaluated (re-record the "
                          "baseline)", metric=result.metric)
    return None


def apply_allow(checks: list[InputCheck], allow: set[str]) -> list[InputCheck]:
    """Mark the checks the user allowed: by reason (`undefined`), or a metric_undefined one by its metric name
    (`undefined:memory_peak`: a trace set without memory events on some ranks, the other gates still closed)."""
    for c in checks:
        c.allowed = (bool(OPT_OUTS.get(c.reason)) and OPT_OUTS[c.reason] in allow) or (
            bool(c.metric) and f"undefined:{c.metric}" in allow)
    return checks
