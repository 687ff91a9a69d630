"""The expert corpus, one case per expectation (tests/expert/expectations.py, tests/expert/planted.py).

Each problem must be found, each silent twin must stay silent, each headline must sit within tolerance of the
truth scripts, and per set every high/medium finding must be right or unverified ("precision"). No case is
pinned as an expected failure: a miss is a failing test. Real sets skip where ../shared/fixtures/real is
absent. Each set is analysed once per session.
"""

from __future__ import annotations

import functools

import pytest

from tests.expert import planted, planted_cases
from tests.expert.expectations import REAL as REAL_EXP
from tests.expert.score import REAL, score_set

_TMP: list = []


@functools.lru_cache(maxsize=None)
def _real(name: str) -> dict:
    return score_set(name, str(REAL / name), REAL_EXP[name])


@functools.lru_cache(maxsize=None)
def _planted(name: str) -> dict:
    knobs, exp = planted_cases.scenarios()[name]
    folder = _TMP[0] / name
    planted.write(knobs, str(folder))
    return score_set(name, str(folder), dict(exp, claims=exp.get("claims", []) + planted_cases.PLANTED_COMMON))


@pytest.fixture(scope="module", autouse=True)
def _planted_dir(tmp_path_factory):
    _TMP[:] = [tmp_path_factory.mktemp("expert_planted")]
    yield
    _planted.cache_clear()


def _cases(kind_sets: dict, real: bool) -> list:
    out = []
    for name, exp in kind_sets.items():
        ids = ([("problem", p["id"]) for p in exp.get("problems", [])] +
               [("silent", s["id"]) for s in exp.get("silent", [])] +
               [("headline", h["id"]) for h in exp.get("headline", [])] + [("precision", "precision")])
        for kind, cid in ids:
            marks = [pytest.mark.real(REAL / name)] if real else []
            out.append(pytest.param(name, kind, cid, marks=marks, id=f"{name}:{kind}:{cid}"))
    return out


def _check(res: dict, kind: str, cid: str):
    if kind == "problem":
        p = next(p for p in res["problems"] if p["id"] == cid)
        assert p["found"], f"{res['name']}: problem not found: {p['what']}"
    elif kind == "silent":
        s = next(s for s in res["silent"] if s["id"] == cid)
        assert s["kept"], f"{res['name']}: {s['fired']} fired: {s['why']}"
    elif kind == "headline":
        h = next(h for h in res["headline"] if h["id"] == cid)
        assert h["ok"], f"{res['name']}: {cid} = {h['got']}, want {h['want']}: {h['why']}"
    else:
        bad = [f for f in res["findings"] if f["scored"] and f["verdict"] in ("wrong", "misleading")]
        assert not bad, f"{res['name']}: " + "; ".join(f"{f['rule']} {f['verdict']}: {f['why']}" for f in bad)


@pytest.mark.parametrize("name,kind,cid", _cases(REAL_EXP, True))
def test_real(name, kind, cid):
    _check(_real(name), kind, cid)


@pytest.mark.parametrize("name,kind,cid", _cases({n: e for n, (_, e) in planted_cases.scenarios().items()}, False))
def test_planted(name, kind, cid):
    _check(_planted(name), kind, cid)


def test_truth_pairs_late_capture_by_completion():
    """The judge's own pairing: a planted rank that lacks k leading collectives pairs at offset k, with end-time
    errors near zero, and its twin pairs at offset 0 (the truth scripts are tested against what was planted)."""
    from tests.expert.truth import collectives
    from tests.expert.truth.load import runs

    for by, rank in ((1, 1), (3, 3), (5, 2)):
        folder = _TMP[0] / f"truth_late_{by}"
        planted.write(planted.Knobs(late_rank=rank, late_by=by), str(folder))
        offs = collectives.offsets(runs(str(folder))[0])
        assert offs[rank]["offset"] == by and offs[rank]["end_err_us"] < 1.0
        assert all(v["offset"] == 0 for r, v in offs.items() if r != rank)


def test_truth_names_the_long_host_op():
    """The judge's host-op truth (truth/host_ops.py) against what was planted: one 21 ms aten::split_with_sizes per
    step holds ~21 ms of device idle on every rank, no launch inside it; the launch-bound twin (800 tiny kernels)
    has no device gap that one op holds for 5 ms or more."""
    from tests.expert.truth import host_ops
    from tests.expert.truth.load import runs

    folder = _TMP[0] / "truth_long_op"
    planted.write(planted.Knobs(long_host_op_ms=21.0), str(folder))
    for t in runs(str(folder))[0]:
        held = host_ops.per_step_by_op(t).get("aten::split_with_sizes", {})
        assert len(held) == 5 and all(18.0 <= v <= 21.5 for v in held.values()), held
        assert all(s["launches_inside"] == 0 for s in host_ops.stalls(t) if s["op"] == "aten::split_with_sizes")
    twin = _TMP[0] / "truth_long_op_twin"
    planted.write(planted.Knobs(tiny_kernels=800), str(twin))
    for t in runs(str(twin))[0]:
        assert not [s for s in host_ops.stalls(t) if s["held_ms"] >= 5.0 and s["op"]]


def test_recall_counts_a_right_finding_of_any_severity_only():
    """Recall semantics (docs/expert-corpus.md): a low finding that states the problem correctly finds it; a high
    finding that matches the problem's words but is judged wrong or misleading does not."""
    from tests.expert.judge import judge

    exp = {"problems": [{"id": "p", "what": "fp32", "any": [{"text": "fp32", "min_severity": "medium"}]}],
           "claims": [{"verdict": "wrong", "text": "bf16", "why": "V100"}, {"verdict": "right", "text": "fp32", "why": "ok"}]}

    def f(sev, text):
        return {"kind": "finding", "id": "fp32_gemm", "severity": sev, "ranks": [], "steps": [], "gain_ms": 1.0,
                "text": text}

    assert judge(exp, [f("low", "fp32 GEMMs: fp16 autocast")], [], {}, {})["problems"][0]["found"]
    assert not judge(exp, [f("high", "fp32 GEMMs: use bf16")], [], {}, {})["problems"][0]["found"]


def test_step_headlines_check_the_median_and_the_named_outlier():
    """The step headline checks (expectations.step_headlines) on hand-made headlines: a median stated and equal to
    the summary's passes, another number or no median fails; the outlier must be the truth's and named."""
    from tests.expert.expectations import step_headlines
    from tests.expert.judge import _headline

    med, basis, outl, listed = step_headlines("t")
    text = "mean step time 245.00 ms over ranks and steps 4–6 (slowest rank 248 ms); median step 157.20 ms; " \
           "outlier: step 4 379.00 ms (2.41× the median)"
    truth = {"median_step_ms": [157.2], "outlier_steps": [[4]]}
    good = {"median_step_ms": 157.2, "outlier_steps": [4], "headline_text": text}
    assert all(_headline(h, good, truth)["ok"] for h in (med, basis, outl))
    assert not _headline(med, dict(good, median_step_ms=245.0), truth)["ok"]
    assert not _headline(basis, dict(good, median_step_ms=160.0), truth)["ok"]
    assert not _headline(basis, dict(good, headline_text="step time 245.00 ms"), truth)["ok"]
    assert not _headline(outl, dict(good, outlier_steps=[]), truth)["ok"]
    assert not _headline(outl, dict(good, headline_text=text.split("; outlier")[0]), truth)["ok"]
    assert _headline(outl, {"outlier_steps": [], "headline_text": "x"}, {"outlier_steps": [[]]})["ok"]
    assert _headline(listed, {"step_numbers": [4, 5, 6]}, {"step_numbers": [[1, 2], [4, 5, 6]]})["ok"]
    assert not _headline(listed, {"step_numbers": [-1]}, {"step_numbers": [[4, 5, 6]]})["ok"]
