"""The one error type for a bad workload input (layout, option, fault spec, run folder).

workloads/ must not import diagnose/ (the ranks and the analyzer are separate halves), so it has its own
error; `llmdiag run` turns it into diagnose's LlmdiagError with the same text, which prints one line and
exits 2. `line()` is byte for byte what LlmdiagError.line() gives for an error without a path.
"""

from __future__ import annotations

import re

# Same set as diagnose.errors.printable (tests/unit/workloads/test_run_options.py checks the two agree): controls, bidi
# overrides and lone surrogates are written as escapes so the message stays one safe terminal line.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _printable(s: object) -> str:
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(s))


class WorkloadError(Exception):
    """A workload input `llmdiag run` cannot use, described in one line."""

    def __init__(self, what: str, hint: str | None = None):
        self.what = what
        self.hint = hint
        super().__init__(self.line())

    def line(self) -> str:
        hint = f" ({_printable(self.hint)})" if self.hint else ""
        return f"llmdiag: {_printable(self.what)}{hint}"
