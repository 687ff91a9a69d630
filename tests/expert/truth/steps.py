"""Steps: the ProfilerStep#N annotations on the host (cpu_op or user_annotation), per rank."""

from __future__ import annotations

import re

import numpy as np

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def host_steps(t) -> list[tuple[int, float, float]]:
    """(step number, start us, duration us) of the host-side ProfilerStep annotations, deduplicated by number
    (a trace may carry the same step both as cpu_op and user_annotation: the host one kept)."""
    seen = {}
    for e in t.events:
        m = STEP.match(str(e.get("name", "")))
        if m and e.get("cat") in ("cpu_op", "user_annotation", "Trace", None):
            seen.setdefault(int(m.group(1)), (int(m.group(1)), e["ts"], e["dur"]))
    return [seen[k] for k in sorted(seen)]


def durations_ms(t) -> dict[int, float]:
    return {n: round(d / 1000, 3) for n, _, d in host_steps(t)}


def summary(traces) -> dict:
    """Per rank step durations, the job's per-step time (max over ranks: the step ends when the slowest rank
    ends it), mean and median over steps, and the outlier steps (> 1.5x the median of the others)."""
    per_rank = {t.rank: durations_ms(t) for t in traces}
    common = sorted(set.intersection(*(set(v) for v in per_rank.values()))) if per_rank else []
    job = {s: max(per_rank[r][s] for r in per_rank) for s in common}
    vals = np.array(list(job.values())) if job else np.array([])
    out = {"per_rank_ms": per_rank, "steps": common, "job_step_ms": job,
           "mean_ms": float(vals.mean()) if vals.size else None,
           "median_ms": float(np.median(vals)) if vals.size else None, "outliers": []}
    for s, v in job.items():
        others = [w for k, w in job.items() if k != s]
        if others and v > 1.5 * float(np.median(others)):
            out["outliers"].append(s)
    if out["outliers"]:
        rest = [v for s, v in job.items() if s not in out["outliers"]]
        out["mean_without_outliers_ms"] = float(np.mean(rest)) if rest else None
    return out


def device_period_ms(t) -> float | None:
    """The device's step period: each host ProfilerStep's device work is the device events launched (by
    correlation id) from runtime calls inside it; the median over steps of the gap between the first such events
    of consecutive steps. Where the host enqueues ahead of a busy device, the job cannot step faster than this,
    whatever the host's step spans say."""
    calls = sorted((e["ts"], e["args"]["correlation"]) for e in t.events
                   if e.get("cat") in ("cuda_runtime", "hip_runtime", "cuda_driver") and "correlation" in e.get("args", {}))
    dev = {}
    for e in t.events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {}):
            c = e["args"]["correlation"]
            dev[c] = min(dev.get(c, e["ts"]), e["ts"])
    firsts = []
    for _, t0, d in host_steps(t):
        starts = [dev[c] for ts, c in calls if t0 <= ts <= t0 + d and c in dev]
        if starts:
            firsts.append(min(starts))
    gaps = np.diff(firsts)
    return float(np.median(gaps)) / 1000 if len(gaps) else None
