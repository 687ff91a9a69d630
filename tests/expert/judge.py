"""Judging llmdiag's output against the expectations (tests/expert/expectations.py, tests/expert/planted.py).

A matcher is a dict of conditions, all of which must hold:
  where      "finding" (default for claims), "issue", or "any"
  rules      the finding's rule id is one of these
  text       regex (case-insensitive) found in the finding's title + evidence + action + gain, or the issue
  not_text   regex that must NOT be found there
  rank       the finding names this rank (evidence ranks, or "rank R" in its text; an issue's rank)
  not_rank   it names none of these ranks
  ranks_beyond  its evidence ranks include one outside this list
  step       the finding names this step (evidence steps, or "#S" / "step S" in its text)
  min_severity  "high" / "medium" / "low" (findings only)
  gain_ms    [lo, hi]: the finding's gain per step lies inside (or outside, with gain_outside: true)
Claims are matchers with a verdict (right / wrong / misleading / unverified) and a why; the first claim that
matches a finding gives its verdict. A high/medium finding no claim matches is `wrong`: nothing in the
corpus says it is true. A problem is found by a matching issue or by a matching finding of any severity whose own
verdict is right (a problem matcher's min_severity is ignored; a wrong or misleading finding finds nothing).
Headlines: a fixed value, a value within a tolerance of the truth, a regex on the headline text (a `med` group
must equal the summary's median step), or the outlier steps (`outliers`: the truth's, each named in the text).
"""

from __future__ import annotations

import re

SEV = {"high": 0, "medium": 1, "low": 2}


def finding_view(f) -> dict:
    ev = f.evidence
    return {"kind": "finding", "id": f.id, "severity": f.severity, "ranks": list(ev.ranks or []),
            "steps": list(ev.steps or []), "gain_ms": f.gain_ms,
            "text": " | ".join([f.title, ev.text, f.action, f.expected_gain])}


def issue_view(i) -> dict:
    return {"kind": "issue", "id": "issue", "severity": i.severity, "ranks": [i.rank] if i.rank is not None else [],
            "steps": [], "gain_ms": None, "text": i.message}


def _names_rank(item, r: int) -> bool:
    return r in item["ranks"] or re.search(rf"\branks? {r}\b|\branks? [\d, ]*\b{r}\b", item["text"]) is not None


def _names_step(item, s: int) -> bool:
    return s in item["steps"] or re.search(rf"#{s}\b|\bsteps? {s}\b", item["text"]) is not None


def matches(m: dict, item: dict, default_where: str = "finding") -> bool:
    where = m.get("where", default_where)
    if where != "any" and item["kind"] != where:
        return False
    if "rules" in m and item["id"] not in m["rules"]:
        return False
    if "text" in m and not re.search(m["text"], item["text"], re.I):
        return False
    if "not_text" in m and re.search(m["not_text"], item["text"], re.I):
        return False
    if "rank" in m and not _names_rank(item, m["rank"]):
        return False
    if "not_rank" in m and any(_names_rank(item, r) for r in m["not_rank"]):
        return False
    if "ranks_beyond" in m and not set(item["ranks"]) - set(m["ranks_beyond"]):
        return False
    if "step" in m and not _names_step(item, m["step"]):
        return False
    if "min_severity" in m and item["kind"] == "finding" and SEV[item["severity"]] > SEV[m["min_severity"]]:
        return False
    if "gain_ms" in m:
        g = item["gain_ms"]
        inside = g is not None and m["gain_ms"][0] <= g <= m["gain_ms"][1]
        if inside == bool(m.get("gain_outside")):
            return False
    return True


def verdict(item: dict, claims: list[dict]) -> tuple[str, str]:
    for c in claims:
        if matches(c, item):
            return c["verdict"], c["why"]
    return "wrong", "no expectation in the corpus says this is true"


def judge(exp: dict, findings: list[dict], issues: list[dict], headline: dict, truth: dict) -> dict:
    """One set: every finding with its verdict, problems found, silent twins kept, headline checks."""
    items = findings + issues
    rows = []
    for f in findings:
        v, why = verdict(f, exp.get("claims", []) + COMMON_CLAIMS)
        rows.append({"rule": f["id"], "severity": f["severity"], "verdict": v, "why": why,
                     "scored": f["severity"] in ("high", "medium"), "text": f["text"][:240]})
    # recall: a problem is found by an issue, or by a finding of ANY severity that states it correctly (its own
    # verdict is right): a finding judged wrong or misleading does not find the problem it gets wrong
    stating = issues + [f for f, r in zip(findings, rows) if r["verdict"] == "right"]
    problems = []
    for p in exp.get("problems", []):
        hit = next((it for it in stating for m in p["any"]
                    if matches({k: v for k, v in m.items() if k != "min_severity"}, it, "finding")), None)
        problems.append({"id": p["id"], "what": p["what"], "found": hit is not None,
                         "by": (hit["id"] if hit else None)})
    silent = []
    for s in exp.get("silent", []):
        hit = next((it for it in items if matches(s["match"], it, "finding")), None)
        silent.append({"id": s["id"], "kept": hit is None, "why": s["why"], "fired": hit["id"] if hit else None})
    heads = []
    for h in exp.get("headline", []):
        heads.append(_headline(h, headline, truth))
    scored = [r for r in rows if r["scored"]]
    return {"findings": rows, "problems": problems, "silent": silent, "headline": heads,
            "right": sum(r["verdict"] == "right" for r in scored),
            "wrong": sum(r["verdict"] == "wrong" for r in scored),
            "misleading": sum(r["verdict"] == "misleading" for r in scored),
            "unverified": sum(r["verdict"] == "unverified" for r in scored)}


def _headline(h: dict, headline: dict, truth: dict) -> dict:
    got = headline.get(h["field"])
    if "regex" in h:  # the headline's words: what its number is (mean or median) and over which steps
        m = re.search(h["regex"], got, re.I) if isinstance(got, str) else None
        ok = m is not None
        if ok and "med" in m.groupdict():  # the headline's median is the summary's (same number everywhere)
            med = headline.get("median_step_ms")
            ok = med is not None and abs(float(m["med"].replace(",", "")) - med) <= 0.01 * med + 0.01
        return {"id": h["id"], "ok": ok, "got": got, "want": f"/{h['regex']}/", "why": h["why"]}
    if h.get("outliers"):  # the outlier steps of some run in the folder, each named in the headline text
        runs = truth.get(h["truth"]) or [[]]
        text = headline.get("headline_text") or ""
        named = all(re.search(rf"outlier\b[^;]*\bstep {k}\b", text) for k in (got or []))
        ok = got is not None and named and any(sorted(got) == sorted(w) for w in runs)
        return {"id": h["id"], "ok": ok, "got": got, "want": runs, "why": h["why"]}
    if h.get("same_as_truth"):  # a list equal to the truth's for some run in the folder
        runs = truth.get(h["truth"]) or []
        ok = got is not None and any(list(got) == list(w) for w in runs)
        return {"id": h["id"], "ok": ok, "got": got, "want": runs, "why": h["why"]}
    if "equals" in h:
        ok = got == h["equals"]
        return {"id": h["id"], "ok": ok, "got": got, "want": h["equals"], "why": h["why"]}
    if "not_in" in h:
        ok = got not in h["not_in"]
        return {"id": h["id"], "ok": ok, "got": got, "want": f"not {h['not_in']}", "why": h["why"]}
    want = truth.get(h["truth"]) if "truth" in h else h["value"]
    wants = want if isinstance(want, list) else [want]
    ok = got is not None and any(w is not None and abs(got - w) <= h["tol"] * w for w in wants)
    return {"id": h["id"], "ok": ok, "got": got, "want": wants, "tol": h["tol"], "why": h["why"]}


COMMON_CLAIMS: list[dict] = []  # every set lists its own claims (planted sets add PLANTED_COMMON)
