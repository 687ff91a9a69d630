"""`python -m tests.expert.score [--json | --markdown | --xfail-report] [--real-only | --planted-only] [--llmdiag DIR]
[SET ...]`: the verdict.

Runs llmdiag (`llmdiag.diagnose.analyze.analyze_path`, findings from `llmdiag.diagnose.rules`) on every real set under
../shared/fixtures/real and on the planted corpus (tests/expert/planted.py, written to a temporary folder),
judges each finding against the expectations (tests/expert/expectations.py, judge.py), and prints per set and
overall: findings with verdicts, precision = right high/medium findings / all judged high/medium findings
(unverified ones counted apart), recall = problems found / problems present, silent twins kept, headlines.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tests.expert import planted, planted_cases
from tests.expert.expectations import REAL as REAL_EXP
from tests.expert.judge import finding_view, issue_view, judge
from tests.expert.truth import idle as truth_idle
from tests.expert.truth import steps as truth_steps
from tests.expert.truth.load import runs

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "fixtures" / "real"


def truth_values(path: str) -> dict:
    """The numbers headlines are checked against, from the truth scripts: one value per run in the folder."""
    groups = runs(path)
    sums = [truth_steps.summary(g) for g in groups]
    meds = [x["median_ms"] for x in sums]
    # issue #27's words: "a step over 1.5x the median is flagged and named" (the median of all the job's steps)
    outl = [sorted(k for k, v in x["job_step_ms"].items() if v > 1.5 * x["median_ms"]) for x in sums if x["steps"]]
    comm = []
    for g in groups:
        per = [v["comm_ms"] for t in g for v in truth_idle.per_step(t).values()]
        if per:
            comm.append(sum(per) / len(per))
    dev = [truth_steps.device_period_ms(t) for g in groups for t in g]
    return {"median_step_ms": [m for m in meds if m is not None], "comm_ms_per_step": comm,
            "device_step_ms": [d for d in dev if d is not None],
            "outlier_steps": outl, "step_numbers": [x["steps"] for x in sums if x["steps"]]}


def run_llmdiag(path: str) -> dict:
    """llmdiag's findings, issues and headline numbers for one set; a refusal is recorded, not raised."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.errors import LlmdiagError

    try:
        a = analyze_path(path, jobs=1)
    except LlmdiagError as e:
        return {"findings": [], "issues": [{"kind": "issue", "id": "issue", "severity": "error", "ranks": [],
                                            "steps": [], "gain_ms": None, "text": str(e)}],
                "headline": {"refused": True, "step_ms": None, "memory_peak_max": None, "comm_ms": None,
                             "median_step_ms": None, "outlier_steps": None, "headline_text": None,
                             "step_numbers": None}}
    steps = (a.to_dict().get("steps") or {}) if getattr(a, "steps", None) is not None else {}  # the JSON summary's
    return {"findings": [finding_view(f) for f in a.findings], "issues": [issue_view(i) for i in a.issues],
            "headline": {"refused": False, "step_ms": a.aggregate.step_time_ms,
                         "memory_peak_max": a.aggregate.memory_peak_max,
                         "comm_ms": sum(r.comm_ms for r in a.ranks) / len(a.ranks) if a.ranks else None,
                         "median_step_ms": steps.get("median_ms"),
                         "outlier_steps": list(steps["outliers"]) if steps.get("outliers") is not None else None,
                         "step_numbers": [x.get("step") for x in steps.get("steps") or []] or None,
                         "headline_text": headline_text(a)}}


def headline_text(a) -> str | None:
    """The terminal's headline, unwrapped: what a user reads first (the report and summary say the same)."""
    try:
        from llmdiag.diagnose.cli import terminal
        tok = terminal.WIDTH.set(100_000)
        try:
            return " ".join(x.strip() for x in terminal._headline(a).splitlines())
        finally:
            terminal.WIDTH.reset(tok)
    except (ImportError, AttributeError):
        return None


def score_set(name: str, path: str, exp: dict) -> dict:
    out = run_llmdiag(path)
    res = judge(exp, out["findings"], out["issues"], out["headline"], truth_values(path))
    res.update(name=name, path=path, headline_values=out["headline"])
    return res


def real_sets() -> dict[str, str]:
    return {name: str(REAL / name) for name in REAL_EXP if (REAL / name).exists()}


def planted_sets(folder: str) -> dict[str, tuple[str, dict]]:
    out = {}
    for name, (knobs, exp) in planted_cases.scenarios().items():
        d = os.path.join(folder, name)
        planted.write(knobs, d)
        exp = dict(exp, claims=exp.get("claims", []) + planted_cases.PLANTED_COMMON)
        out[name] = (d, exp)
    return out


def totals(results: list[dict]) -> dict:
    right = sum(r["right"] for r in results)
    judged = sum(r["right"] + r["wrong"] + r["misleading"] for r in results)
    probs = [p for r in results for p in r["problems"]]
    sil = [s for r in results for s in r["silent"]]
    heads = [h for r in results for h in r["headline"]]
    return {"precision": right / judged if judged else None, "right": right, "judged": judged,
            "wrong": sum(r["wrong"] for r in results), "misleading": sum(r["misleading"] for r in results),
            "unverified": sum(r["unverified"] for r in results),
            "recall": sum(p["found"] for p in probs) / len(probs) if probs else None,
            "found": sum(p["found"] for p in probs), "problems": len(probs),
            "silent_kept": sum(s["kept"] for s in sil), "silent": len(sil),
            "headline_ok": sum(h["ok"] for h in heads), "headlines": len(heads)}


def _print(results: list[dict], title: str):
    print(f"\n=== {title} ===")
    for r in results:
        print(f"\n{r['name']}  (step {r['headline_values'].get('step_ms')})")
        for f in r["findings"]:
            mark = "" if f["scored"] else " (low: not scored)"
            print(f"  [{f['severity']}] {f['rule']}: {f['verdict'].upper()}{mark} - {f['why']}")
        for p in r["problems"]:
            print(f"  problem {p['id']}: {'FOUND by ' + p['by'] if p['found'] else 'MISSED'} - {p['what']}")
        for s in r["silent"]:
            print(f"  silent {s['id']}: {'kept' if s['kept'] else 'FIRED (' + s['fired'] + ')'} - {s['why']}")
        for h in r["headline"]:
            print(f"  headline {h['id']}: {'ok' if h['ok'] else 'OFF'} got {h['got']} want {h['want']} - {h['why']}")
    t = totals(results)
    p = "n/a" if t["precision"] is None else f"{t['precision']:.2f}"
    rc = "n/a" if t["recall"] is None else f"{t['recall']:.2f}"
    print(f"\n{title}: precision {p} ({t['right']} right of {t['judged']} judged high/medium; {t['wrong']} wrong, "
          f"{t['misleading']} misleading, {t['unverified']} unverified apart); recall {rc} ({t['found']}/"
          f"{t['problems']}); silent twins kept {t['silent_kept']}/{t['silent']}; headlines ok "
          f"{t['headline_ok']}/{t['headlines']}")


def case_status(res: dict) -> dict:
    """{case id: passes now} for one scored set, the ids test_expert_corpus.py parametrizes."""
    out = {p["id"]: p["found"] for p in res["problems"]}
    out.update({s["id"]: s["kept"] for s in res["silent"]})
    out.update({h["id"]: h["ok"] for h in res["headline"]})
    out["precision"] = not any(f["scored"] and f["verdict"] in ("wrong", "misleading") for f in res["findings"])
    return out


def xfail_report(report: dict, exps: dict) -> int:
    """Which cases pass now and which are pinned xfail: the xfails to remove (they XPASS) and the failures
    with no xfail (they FAIL). Prints one line per case: STATUS set:id [reason]. Returns the number of cases
    whose mark and status disagree."""
    bad = 0
    for k in ("real", "planted"):
        for res in report.get(k, []):
            xf = exps[res["name"]].get("xfail", {})
            status = case_status(res)
            for cid in sorted(set(xf) - set(status)):
                bad += 1
                print(f"{'STALE (xfail names no case: remove it)':44s} {res['name']}:{cid}  [{xf[cid]}]")
            for cid, ok in status.items():
                if ok and cid in xf:
                    tag, bad = "FLIP (xfail passes: remove it)", bad + 1
                elif not ok and cid not in xf:
                    tag, bad = "FAIL (no xfail: a regression or a new miss)", bad + 1
                else:
                    tag = "xfail" if cid in xf else "pass"
                print(f"{tag:44s} {res['name']}:{cid}" + (f"  [{xf[cid]}]" if cid in xf else ""))
    print(f"\n{bad} case(s) whose xfail mark disagrees with today's result", file=sys.stderr)
    return bad


def markdown(report: dict):
    """The closing-note table: every finding on every set with its verdict and reason, then the totals."""
    for k in ("real", "planted"):
        if k not in report:
            continue
        print(f"\n| {k} set | finding (severity) | verdict | why |\n|---|---|---|---|")
        for r in report[k]:
            rows = r["findings"] or [{"rule": "(none)", "severity": "", "verdict": "", "why": ""}]
            for f in rows:
                sev = f" ({f['severity']})" if f["severity"] else ""
                print(f"| {r['name']} | {f['rule']}{sev} | {f['verdict']} | {f['why']} |")
            missed = [p["id"] for p in r["problems"] if not p["found"]]
            fired = [s["id"] for s in r["silent"] if not s["kept"]]
            off = [h["id"] for h in r["headline"] if not h["ok"]]
            if missed or fired or off:
                print(f"| {r['name']} | missed: {', '.join(missed) or '-'}; twins fired: {', '.join(fired) or '-'};"
                      f" headlines off: {', '.join(off) or '-'} | | |")
    print("\n| corpus | precision | right / judged | wrong | misleading | unverified | recall | found / present |"
          " silent kept | headlines ok |\n|---|---|---|---|---|---|---|---|---|---|")
    for k, t in report["totals"].items():
        p = "n/a" if t["precision"] is None else f"{t['precision']:.2f}"
        rc = "n/a" if t["recall"] is None else f"{t['recall']:.2f}"
        print(f"| {k} | {p} | {t['right']} / {t['judged']} | {t['wrong']} | {t['misleading']} | {t['unverified']} |"
              f" {rc} | {t['found']} / {t['problems']} | {t['silent_kept']} / {t['silent']} |"
              f" {t['headline_ok']} / {t['headlines']} |")


def _use_llmdiag(argv: list[str]) -> list[str]:
    """`--llmdiag DIR` (or LLMDIAG_SRC=DIR): judge the llmdiag in DIR (another worktree) with this corpus. The
    corpus' own modules are imported already, so putting DIR first only decides where `diagnose` comes from."""
    src = os.environ.get("LLMDIAG_SRC")
    if "--llmdiag" in argv:
        i = argv.index("--llmdiag")
        src, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if src:
        sys.path.insert(0, os.path.abspath(src))
    return argv


def main(argv: list[str]) -> int:
    argv = _use_llmdiag(argv)
    import llmdiag

    print(f"llmdiag under judgement: {os.path.dirname(llmdiag.__file__)}", file=sys.stderr)
    as_json = "--json" in argv
    only = [a for a in argv if not a.startswith("--")]
    report = {}
    if "--planted-only" not in argv:
        if not REAL.is_dir():
            print(f"{REAL} not present: real sets skipped", file=sys.stderr)
        sets = real_sets()
        report["real"] = [score_set(n, p, REAL_EXP[n]) for n, p in sets.items() if not only or n in only]
    if "--real-only" not in argv:
        with tempfile.TemporaryDirectory() as tmp:
            report["planted"] = [score_set(n, p, e) for n, (p, e) in planted_sets(tmp).items()
                                 if not only or n in only]
    report["totals"] = {k: totals(v) for k, v in report.items()}
    report["totals"]["all"] = totals(report.get("real", []) + report.get("planted", []))
    if "--xfail-report" in argv:
        exps = dict(REAL_EXP, **{n: e for n, (_, e) in planted_cases.scenarios().items()})
        return 1 if xfail_report(report, exps) else 0
    if as_json:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
    elif "--markdown" in argv:
        markdown(report)
    else:
        for k in ("real", "planted"):
            if k in report:
                _print(report[k], k)
        _print(report.get("real", []) + report.get("planted", []), "overall")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
