"""The one error type for user-facing input problems.

Every problem with a user's input becomes one line `llmdiag: <file>: <what> (<hint>)`; the CLI prints it
and exits 2 (or records it as a per-rank warning and carries on with the good ranks).
"""

from __future__ import annotations


class LlmdiagError(Exception):
    """A problem with the user's input, described in one line."""

    def __init__(self, what: str, path: str | None = None, hint: str | None = None):
        self.what = what
        self.path = path
        self.hint = hint
        super().__init__(self.line())

    def line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"llmdiag: {where}{self.what}{hint}"


class TraceError(LlmdiagError):
    """A single trace file cannot be used; other ranks may still be fine."""
