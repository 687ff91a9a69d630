"""A capture of cold steps only (branch coldstep, issue #34 recall: B7-P1), added to tests/expert/expectations.py's
REAL (imported at its end). Numbers from the events: tests/real/test_cold_capture_real.py reads them with plain
gzip/json.

hta amd_mi250_minitoy: ProfilerStep#1 (9.29 ms on the host) is the one iteration; ProfilerStep#2 (0.05 ms) holds no
event at all, the profiler's stop, so the steps are [1] and no step is an outlier (the truth, truth_B.md B7: "a stub,
not an iteration"); the headline's median is step 1's. Every other real set holds steady steps: cold_capture is
silent there."""

from __future__ import annotations

from tests.expert.expectations import REAL

MINITOY = "hta/amd_mi250_minitoy.json.gz"
COLD = {"where": "finding", "rules": ["cold_capture"]}


def _coldstep() -> None:
    b = REAL[MINITOY]
    b["problems"] = b["problems"] + [
        {"id": "cold_only_host_bound", "what": "one cold iteration: with the 6.5 ms first launch set aside, "
                                               "host-bound (GPU ~1.6 % busy); gain unknowable, capture steady steps",
         "any": [dict(COLD, text=r"holds 1 step \(ProfilerStep#1[\s\S]*`hipLaunchKernel` 6\.54 ms in step 1[\s\S]*"
                                 r"is 9\d\.\d% host[\s\S]*1\.[5-7]% of the whole step[\s\S]*14 kernels per step"
                                 r"[\s\S]*schedule\(wait=1, warmup=2, active=5\)[\s\S]*host-bound")]}]
    b["claims"] = [{"verdict": "right", "rules": ["cold_capture"], "text": r"host-bound",
                    "why": "the one step is cold (a 6.54 ms first hipLaunchKernel); the rest, ~2.4 ms, is host op "
                           "overhead with the GPU ~1.6 % busy; no gain claimed"}] + b["claims"]
    b["silent"] = b["silent"] + [{"id": "cold_no_gain", "why": "no steady step: no gain can be read",
                                  "match": dict(COLD, min_severity="medium")}]
    b["headline"] = [
        {"id": "step_median", "field": "median_step_ms", "value": 9.288, "tol": 0.1,
         "why": "the one iteration, ProfilerStep#1: 9.288 ms on the host (its device window 8.91 ms)"},
        {"id": "step_basis", "field": "headline_text", "regex": r"\bmean step time [\d.,]+ ?\w* over ranks and step 1\b",
         "why": "the headline says which step its number is over"},
        {"id": "no_outlier", "field": "outlier_steps", "equals": [],
         "why": "one step: nothing to be an outlier against (the stub is no step)"},
        {"id": "steps_listed", "field": "step_numbers", "equals": [1],
         "why": "ProfilerStep#2 holds no event: the profiler's stop, no step"}]
    for name, exp in REAL.items():
        if name != MINITOY:
            exp["silent"] = exp["silent"] + [{"id": "no_cold_capture", "match": COLD,
                                              "why": "the capture holds steady steps"}]


_coldstep()
