"""Gate thresholds from a TOML file and from command-line flags.

```toml
strict = false          # optional: n/a gates fail
agg = "worst"           # optional: default aggregation over ranks
[overlap_ratio]
max_drop = 0.05         # against the baseline, in ratio points
min = 0.5               # absolute, no baseline needed
agg = "min"
[step_time]
max_rise = "10%"        # relative to the baseline value
[path_comm]   # the job critical path's share (gate/path.py)
max_rise = "0.05+1σ"    # 5 points beyond the steps' own spread
```
Unknown keys are errors, not ignored: a typo in a CI config must not turn a gate off silently.
"""

from __future__ import annotations

import difflib

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.files import CONFIG_BUDGET, read_bounded
from llmdiag.diagnose.gate.inputs import ALLOW_NAMES
from llmdiag.diagnose.gate.verdict import AGGS, ALIASES, GATED, RULES, Gate, metric_named, parse_limit

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None

# flag name (click's python name) -> (metric, rule)
FLAG_GATES = {
    "max_overlap_drop": ("overlap_ratio", "max_drop"),
    "max_exposed_comm_rise": ("exposed_comm", "max_rise"),
    "max_bubble_rise": ("bubble", "max_rise"),
    "max_step_time_rise": ("step_time", "max_rise"),
    "max_memory_rise": ("memory_peak", "max_rise"),
    "min_overlap": ("overlap_ratio", "min"),
    "max_exposed_comm": ("exposed_comm", "max"),
    "max_bubble": ("bubble", "max"),
    "max_step_time_ms": ("step_time", "max"),
    "max_memory": ("memory_peak", "max"),
    # the job's critical path (gate/path.py); its other shares and each rank's path: config sections
    "max_path_rise": ("path_length", "max_rise"),
    "max_path_compute_drop": ("path_compute", "max_drop"),
    "max_path_comm_rise": ("path_comm", "max_rise"),
    "max_path_cpu_rise": ("path_cpu", "max_rise"),
}


def _hint(key: str, valid) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1)
    return f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(valid)}"


def _agg(value, where: str) -> str:
    if value not in AGGS:
        raise LlmdiagError(f"bad agg {value!r}", where, f"use one of {', '.join(AGGS)}")
    return value


def read_toml(path: str) -> dict:
    if _toml is None:
        raise LlmdiagError("reading TOML needs Python 3.11+ or the tomli package", path, "pip install tomli")
    raw = read_bounded(path, CONFIG_BUDGET, "config file", gunzip=False)
    try:
        return _toml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise LlmdiagError(f"config is not UTF-8 text (byte {e.start})", path, "a TOML file, see docs/ci.md") from None
    except _toml.TOMLDecodeError as e:
        raise LlmdiagError(f"invalid TOML: {e}", path) from None
    except ValueError as e:  # an integer over Python's 4,300-digit conversion limit: not a TOMLDecodeError
        raise LlmdiagError(f"invalid TOML: {str(e)[:120]}", path, "limits are numbers of a few digits") from None


def parse_config(data: dict, where: str, default_agg: str | None = None) -> tuple[list[Gate], dict]:
    """Gates and options ({"strict", "agg"}) from a parsed TOML document."""
    opts: dict = {}
    if "agg" in data:
        opts["agg"] = _agg(data["agg"], where)
    if "strict" in data:
        if not isinstance(data["strict"], bool):
            raise LlmdiagError("strict must be true or false", where)
        opts["strict"] = data["strict"]
    if "allow" in data:  # opt-outs of the fail-closed input checks, as the --allow-* flags
        allow = data["allow"]
        ok = (*ALLOW_NAMES, *(f"undefined:{m}" for m in GATED))
        if not isinstance(allow, list) or any(a not in ok for a in allow):
            raise LlmdiagError(f"bad allow = {allow!r}", where, f"a list of {', '.join(ALLOW_NAMES)}, or "
                                                                "\"undefined:<metric>\" for one metric")
        opts["allow"] = list(allow)
    agg_default = default_agg or opts.get("agg", "worst")
    gates: list[Gate] = []
    seen: dict[str, str] = {}  # metric -> the section that named it: [overlap] and [overlap_ratio] are one metric
    for key, table in data.items():
        if key in ("agg", "strict", "allow"):
            continue
        if key not in GATED and key not in ALIASES:
            raise LlmdiagError(f"unknown section [{key}]", where, _hint(key, [*GATED, "agg", "strict", "allow"]))
        if not isinstance(table, dict):
            raise LlmdiagError(f"[{key}] must be a table of limits", where, "e.g. [overlap_ratio] max_drop = 0.05")
        m = metric_named(key, where)
        if m.name in seen:  # one would silently replace the other's limits
            raise LlmdiagError(f"[{seen[m.name]}] and [{key}] both set {m.name}", where,
                               "keep one section per metric")
        seen[m.name] = key
        agg = _agg(table["agg"], where) if "agg" in table else agg_default
        for rule, raw in table.items():
            if rule == "agg":
                continue
            if rule not in RULES:
                raise LlmdiagError(f"unknown key {rule!r} in [{key}]", where, _hint(rule, [*RULES, "agg"]))
            gates.append(Gate(m.name, rule, parse_limit(raw, m, rule, where), agg, "config"))
    return gates, opts


def build_gates(config: str | None, flags: dict, agg: str | None) -> tuple[list[Gate], dict]:
    """Config gates, then flag gates replacing any config gate with the same metric and rule.

    `agg` (the --agg flag) applies to flag gates and to config gates that do not name their own.
    """
    gates: list[Gate] = []
    opts: dict = {}
    if config:
        gates, opts = parse_config(read_toml(config), config, agg)
    flag_agg = agg or opts.get("agg", "worst")
    by_key = {(g.metric, g.rule): g for g in gates}
    for name, raw in flags.items():
        if raw is None:
            continue
        metric, rule = FLAG_GATES[name]
        m = GATED[metric]
        where = "--" + name.replace("_", "-")
        by_key[(metric, rule)] = Gate(metric, rule, parse_limit(raw, m, rule, where), flag_agg, "flag")
    return list(by_key.values()), opts
