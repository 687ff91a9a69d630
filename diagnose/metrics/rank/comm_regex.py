"""The user's `--comm-regex` (which kernels are communication: classify.py), checked once before any work."""

from __future__ import annotations

import re

from llmdiag.diagnose.errors import LlmdiagError


def check_comm_regex(comm_regex: str | None) -> None:
    """A bad `comm_regex` is the caller's mistake, said once (exit 2 on the command line), not an internal error
    of every rank's worker."""
    if comm_regex:
        try:
            re.compile(comm_regex)
        except re.error as e:
            raise LlmdiagError(f"--comm-regex is not a valid regular expression ({e})") from None
