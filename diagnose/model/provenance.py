"""How an analysis was made: the command, its options, the input files with their sizes, version and time.

Written by `analyze` at the CLI edge and carried in the summary, so a report made with `--exclude-last-step`
says so, and `diff` can name an option that differs between its two sides.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class InputFile:
    """One input file of the analysis and its size when it was read."""

    path: str  # absolute
    bytes: int | None  # size on disk; None where it could not be read


@dataclass
class Provenance:
    """How `analyze` was run: the command, the options that change the result, the inputs, version and time."""

    command: list[str] = field(default_factory=list)  # argv as given (`llmdiag analyze RUN --exclude-last-step`)
    options: dict = field(default_factory=dict)  # option name -> value, only those that change the analysis
    inputs: list[InputFile] = field(default_factory=list)
    version: str = ""
    created_at: str = ""  # ISO 8601, UTC

    @classmethod
    def now(cls, command: list[str], options: dict, files: list[str], version: str) -> Provenance:
        def size(p):
            try:
                return os.path.getsize(p)
            except OSError:
                return None

        return cls(list(map(str, command)), {k: v for k, v in options.items() if v not in (None, False)},
                   [InputFile(os.path.abspath(p), size(p)) for p in files], version,
                   datetime.now(timezone.utc).isoformat(timespec="seconds"))
