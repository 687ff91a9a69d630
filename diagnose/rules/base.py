"""What every recommendation rule shares: the one number format, process-group roles, per-summary facts.

`fmt` is the single rounding function of llmdiag's human-facing numbers: the rules' evidence and the HTML
report both print through it, so a number in a finding reads exactly as in the report's tables.
"""

from __future__ import annotations

import re
import statistics

from diagnose.metrics.classify import P2P_KINDS

# ---- number formats (shared with reports/) ------------------------------------------------------------
# unit -> (scale, decimals, suffix). One table so every printed number rounds the same way.
UNITS = {
    "ms": (1.0, 2, " ms"), "us": (1.0, 1, " µs"), "pct": (100.0, 1, "%"), "gib": (2.0**-30, 2, " GiB"),
    "gbps": (1.0, 1, " GB/s"), "int": (1.0, 0, ""), "tps": (1.0, 0, " tok/s"), "tflops": (1.0, 1, " TFLOP/s"),
    "num": (1.0, 3, ""), "avg": (1.0, 1, ""), "x": (1.0, 2, "×"),
}


def fmt(x, unit: str = "num", suffix: bool = True) -> str:
    """`x` in `unit`, rounded by the table above; "n/a" for None (never NaN in the summary)."""
    if x is None or isinstance(x, bool) or (isinstance(x, float) and x != x):
        return "n/a"
    scale, nd, suf = UNITS[unit]
    if not isinstance(x, (int, float)):
        return str(x)  # a value from a foreign summary that is not a number: shown as text
    if unit == "num" and isinstance(x, int):
        nd = 0  # counts stay counts
    s = f"{float(x) * scale:,.{nd}f}"
    return s + suf if suffix else s


# ---- shared facts -------------------------------------------------------------------------------------
SEVERITIES = ("high", "medium", "low")


def headline_order(findings: list[dict]) -> list[int]:
    """Indexes of `findings` as headlines show them (report cards, terminal): high severity first, then
    expected gain, then the findings' own order."""
    return sorted(range(len(findings)), key=lambda i: (
        SEVERITIES.index(findings[i]["severity"]), -(findings[i]["gain_ms"] or 0.0), i))
DP_KINDS = ("allreduce", "reducescatter", "allgather")
# Achievable intra-node NVLink bus bandwidth (nccl-tests all-reduce busbw), GB/s, by device-name substring.
# PCIe parts and unknown devices are absent on purpose: the low-bandwidth rule stays silent for them.
LINK_BUSBW_GBPS = {"H200": 360.0, "H100": 360.0, "A100": 240.0}
FP32_TO_BF16_SPEEDUP = 4.0  # conservative: tensor-core bf16 vs fp32 FMA peak is 8-16x on sm80+
_ROLE_TOKENS = {"tp": "tp", "tensor": "tp", "pp": "pp", "pipeline": "pp", "cp": "cp", "context": "cp",
                "ep": "ep", "expert": "ep", "dp": "dp", "fsdp": "dp", "shard": "dp", "replicate": "dp",
                "ddp": "dp", "hsdp": "dp"}


def severity_for(gain_ms: float | None, step_ms: float | None) -> str:
    """high ≥ 10 % of the step, medium ≥ 3 %, else low."""
    if not gain_ms or not step_ms:
        return "low"
    f = gain_ms / step_ms
    return "high" if f >= 0.10 else "medium" if f >= 0.03 else "low"


def pg_role(kind: str, pg: str, group_size: int | None, layout: dict | None) -> str:
    """Which parallel dimension a process group serves: dp, tp, pp, cp, ep or "?".

    DeviceMesh names groups `mesh_tp`, `mesh_dp_shard`, ...; otherwise (gloo spans carry no group) a
    collective of a layout with one non-pipeline dimension belongs to it, else the group size is matched
    against the layout; send/recv are pipeline traffic.
    """
    for tok in re.split(r"[^a-z0-9]+", (pg or "").lower()):
        if tok in _ROLE_TOKENS:
            return _ROLE_TOKENS[tok]
    if kind in P2P_KINDS:
        return "pp"
    lay = {k: int((layout or {}).get(k) or 1) for k in ("dp", "fsdp", "tp", "pp", "cp")}
    role = {"dp": "dp", "fsdp": "dp", "tp": "tp", "pp": "pp", "cp": "cp"}
    active = {role[k] for k, v in lay.items() if v > 1} - {"pp"}  # pipelines talk point-to-point only
    if len(active) == 1:
        return active.pop()
    if group_size and group_size > 1:
        hits = {role[k] for k, v in lay.items() if v == group_size} - {"pp"}
        if lay["dp"] * lay["fsdp"] == group_size:
            hits.add("dp")
        if len(hits) == 1:
            return hits.pop()
    return "dp" if kind in DP_KINDS and not active else "?"


class Ctx:
    """Facts several rules need, computed once per summary."""

    def __init__(self, s: dict):
        self.s = s
        self.ranks = s.get("ranks") or []
        self.man = s.get("manifest") or {}
        self.opts = self.man.get("options") or {}
        self.layout = s.get("layout") or self.man.get("layout") or {}
        agg = s.get("aggregate") or {}
        times = [r["step_time_ms"] for r in self.ranks if r.get("step_time_ms")]
        self.step_ms = agg.get("step_time_ms") or (statistics.median(times) if times else None)
        self.device = str((self.man.get("device") or {}).get("name") or "")
        self.gpu = any(r.get("trace_kind") == "gpu" for r in self.ranks)

    @staticmethod
    def nsteps(r: dict) -> int:
        return max(1, len(r.get("steps") or []))

    def role(self, c: dict) -> str:
        return pg_role(c["kind"], c.get("pg") or "", c.get("group_size"), self.layout)

    def comm_of(self, r: dict, roles: tuple) -> tuple[float, float, list[dict]]:
        """(per-step op time, per-step exposed op time, the stats) of one rank's comm in these roles."""
        cs = [c for c in r.get("comm_by_kind") or [] if self.role(c) in roles]
        n = self.nsteps(r)
        tot = sum(c["total_ms"] for c in cs) / n
        exp = sum(c["total_ms"] - c["overlapped_ms"] for c in cs) / n
        return tot, min(exp, r.get("exposed_comm_ms") or 0.0), cs

    def local_batch(self) -> int | None:
        """Sequences per data-parallel replica per step (bounds the microbatch count)."""
        lb = (self.man.get("batch") or {}).get("local_batch")
        if lb:
            return int(lb)
        gb = self.opts.get("global_batch") or (self.man.get("batch") or {}).get("global_batch")
        if not gb:
            return None
        return max(1, int(gb) // max(1, int(self.layout.get("dp") or 1) * int(self.layout.get("fsdp") or 1)))

    def host(self, rank: int) -> str:
        for r in self.ranks:
            if r["rank"] == rank:
                return r.get("host") or "unknown"
        return str(((self.man.get("ranks") or {}).get(str(rank)) or {}).get("host") or "unknown")

    def gpus_per_host(self) -> int | None:
        """Ranks per host from the manifest's rank map (or the traces' hosts), else the device count."""
        hosts = [str(v.get("host")) for v in (self.man.get("ranks") or {}).values() if v.get("host")] or \
            [r["host"] for r in self.ranks if r.get("host")]
        if hosts:
            return max(hosts.count(h) for h in set(hosts))
        n = (self.man.get("device") or {}).get("count")
        return int(n) if n else None


def finding(id, severity, title, evidence, ranks, steps, action, expected_gain, gain_ms, metric) -> dict:
    return {"id": id, "severity": severity, "title": title, "evidence": evidence,
            "ranks": sorted({int(r) for r in ranks}), "steps": sorted({int(s) for s in steps}), "action": action,
            "expected_gain": expected_gain, "gain_ms": None if gain_ms is None else round(float(gain_ms), 6),
            "metric": metric}


def steps_where(ranks: list[dict], pred=lambda st: True) -> list[int]:
    out = {st["step"] for r in ranks for st in r.get("steps") or [] if st.get("time_ms") and pred(st)}
    return sorted(out) or sorted({st["step"] for r in ranks for st in r.get("steps") or []})


def gain_text(gain_ms: float, step_ms: float | None, how: str) -> str:
    frac = f" ({fmt(gain_ms / step_ms, 'pct')} of the step)" if step_ms else ""
    return f"≈ {fmt(gain_ms, 'ms')} per step{frac}: {how}"
