"""The parallel dimensions and their bounds, apart from the manifest's dataclasses: the trace-only path (roles,
layout, the Megatron reader) reads these constants and never builds a Manifest, so it does not import one."""

from __future__ import annotations

DIMS = ("dp", "fsdp", "tp", "pp", "cp")
MAX_WORLD = 1 << 20  # as metrics/ranks.MAX_RANK: beyond the largest jobs; a larger size is not a real one


def layout_text(layout: dict[str, int] | None) -> str:
    """{"dp": 2, "tp": 2, "pp": 1} -> "dp=2 × tp=2" (dimensions of size 1 left out; "dp=1" for one rank)."""
    dims = [f"{k}={v}" for k, v in (layout or {}).items() if isinstance(v, int) and v > 1]
    return " × ".join(dims) or "dp=1"
