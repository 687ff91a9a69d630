"""What a gate must know about its inputs before it trusts their numbers: the gate fails closed.

A regression gate that passes because the run it gates did not really run is worse than no gate. Each side
is checked for a run marked failed, ranks missing, left out or resolved among duplicates, an empty summary,
and gated metrics that vanished (defined in the baseline, undefined now: e.g. communication kernels renamed
so none is found). Each such problem fails the check (exit 1) with its reason, unless the user opted out of
that reason explicitly (`--allow-<reason>`); an opted-out problem is still reported, as allowed.
The verdict table is in docs/ci.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.errors import printable
from diagnose.model.analysis import Analysis
from diagnose.model.format import plural, ranges

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

    @property
    def opt_out(self) -> str:
        name = OPT_OUTS.get(self.reason, "")
        return f"--allow-{name}" if name else ""

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


def side_checks(a: Analysis, side: str) -> list[InputCheck]:
    """The problems of one side, each with the reason it fails."""
    out = []
    if not a.ranks:
        out.append(InputCheck("empty", side, f"{side}: no rank analysed (empty summary): nothing to gate"))
    if (why := _manifest_problem(a)) is not None:
        out.append(InputCheck("run_failed", side, f"{side}: {why}"))
    if a.ranks_missing:
        world = a.world_size or (len(a.ranks) + len(a.ranks_missing))
        out.append(InputCheck("ranks_missing", side, f"{side}: {len(a.ranks_missing)} of {world} ranks have no "
                                                     f"analysed trace (ranks {ranks_text(a.ranks_missing)})"))
    left = [i for i in a.issues if i.severity == "error"]
    if left:
        first = printable(left[0].message.removeprefix("llmdiag: "))
        out.append(InputCheck("ranks_left_out", side, f"{side}: {plural(len(left), 'input')} left out; first: "
                                                      f"{first[:300]}"))
    dup = sorted(a.ranks_duplicate)
    if dup:
        out.append(InputCheck("ranks_duplicate", side, f"{side}: ranks {ranks_text(dup)} had more than one trace "
                                                       "file and one was chosen (see the warnings)"))
    return out


def undefined_check(result, has_baseline: bool, strict: bool) -> InputCheck | None:
    """A gated metric with no value in the current run although the baseline has one (or, without a
    baseline, although a gate asked for it): the gate cannot be evaluated, so it fails closed. Undefined on
    both sides is n/a (nothing vanished; `--strict` fails that too)."""
    if result.status != "n/a" or result.current is not None or strict:
        return None
    if has_baseline and result.baseline is None:
        return None
    return InputCheck("metric_undefined", "current", f"current: {result.metric} is undefined, so the gate "
                                                     f"'{result.limit}' cannot be evaluated ({result.message})")


def apply_allow(checks: list[InputCheck], allow: set[str]) -> list[InputCheck]:
    for c in checks:
        c.allowed = bool(OPT_OUTS.get(c.reason)) and OPT_OUTS[c.reason] in allow
    return checks
