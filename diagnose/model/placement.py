"""Where the run ran, read from one Analysis: its device, each rank's host, ranks per host. Apart from the
views (views.py re-exports them) because the rules read these three and nothing else there: a command that
prints no table does not build the tables' row types."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdiag.diagnose.model.analysis import Analysis


def device_name(a: Analysis) -> str:
    """The device the run used: the manifest's, else the first trace's `deviceProperties` name ("" unknown). The
    link peak of every output (bandwidth table, low_busbw, the report's note) is looked up from this one name."""
    return ((a.manifest.device.name if a.manifest and a.manifest.device else "")
            or next((r.device for r in a.ranks if r.device), ""))


def hosts(a: Analysis) -> dict[int, str]:
    """rank -> host, from the trace, else the manifest, else "unknown"."""
    man = a.manifest
    return {r.rank: r.host or (man.host_of(r.rank) if man else None) or "unknown" for r in a.ranks}


def ranks_per_host(a: Analysis) -> int | None:
    """Ranks per host from the manifest's rank map (or the traces' hosts), else the device count."""
    per = a.manifest.ranks_per_host() if a.manifest else None
    if per:
        return per
    hs = [r.host for r in a.ranks if r.host]
    if hs:
        return max(Counter(hs).values())
    dev = a.manifest.device if a.manifest else None
    return dev.count if dev and dev.count else None
