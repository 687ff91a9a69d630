"""Outlier steps and iterations (branch outlier, issue #34 recall B8-P2). Imported at the end of expectations.py;
adds to its REAL. Numbers from the events (python + gzip/json, independent of llmdiag).

hta/cpu_only_rank-34 (rank 34 of 300, gloo, CPU only): `gloo:all_reduce` [[2082411]] on thread 3554 starts at 31.1,
243.2, 458.1, 898.1 and 1097.5 ms into the capture and takes 170.5, 175.4, 380.6, 156.7, 177.5 ms; the one on thread
3553 ([[321271]]) starts 6-11 ms before each and takes 173.2, 180.3, 380.2, 162.8, 178.3 ms. ProfilerStep#551
(4.3-214.4 ms) holds only the first pair. Read each call as an iteration: thread 3554's periods are 212.1, 214.9,
440.0, 199.4 ms, the typical ones' median 212.1 ms, so the third iteration runs 227.9 ms longer, 45.6 ms spread
over the 5; the calls after the first have a median of 176.5 ms against 380.6 (2.16x). One rank of 300 traced:
a late peer and a slow link look the same (the expert: "a straggler elsewhere among the 300 ranks or network
congestion; needs other ranks").
"""

from __future__ import annotations

from tests.expert.expectations import REAL

_B8 = REAL["hta/cpu_only_rank-34.pt.trace.json.gz"]
_B8["problems"] = _B8["problems"] + [
    {"id": "outlier_iteration", "what": "the third of five iterations runs 440 ms against ~212 (both all-reduces "
                                        "~380 ms against ~176-179), outside ProfilerStep#551: a late peer or the "
                                        "network, which other ranks' traces would tell",
     "any": [{"where": "finding", "rules": ["outlier_steps"], "gain_ms": [45.5, 45.7],
              "text": r"380\.58 ms[\s\S]*440\.05 ms[\s\S]*outside the analysed steps[\s\S]*late peer"}]}]
_B8["claims"] = [
    {"verdict": "wrong", "rules": ["outlier_steps"], "gain_ms": [45.5, 45.7], "gain_outside": True,
     "why": "the third iteration runs 227.9 ms above the typical median (212.1 ms), 45.6 ms over 5 iterations"},
    {"verdict": "misleading", "rules": ["outlier_steps"], "not_text": r"late peer",
     "why": "one rank of 300 traced: a late peer and a slow link look the same"},
    {"verdict": "right", "rules": ["outlier_steps"], "why": "the 2x iteration with its 380 ms all-reduces"},
] + _B8["claims"]
