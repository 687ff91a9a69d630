"""The one error type for user-facing input problems.

Every problem with a user's input becomes one line `llmdiag: <file>: <what> (<hint>)`; the CLI prints it
and exits 2 (or records it as a per-rank warning and carries on with the good ranks).
"""

from __future__ import annotations

import re

# C0/C1 controls, DEL, the Unicode line/paragraph separators, bidi overrides, and lone surrogates (file names
# that are not UTF-8): they could break the one-line message, rewrite the terminal (ANSI escapes, U+202E) or
# fail to encode on stderr.
_UNPRINTABLE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"  # compiled on first use


def printable(s: object) -> str:
    """`s` with control characters written as escapes (`\\n`, `\\x1b`, `\\u202e`): safe on one terminal line."""
    text = str(s)
    if text.isprintable() or not re.search(_UNPRINTABLE, text):  # every character above is not isprintable()
        return text
    return re.sub(_UNPRINTABLE, lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class LlmdiagError(Exception):
    """A problem with the user's input, described in one line."""

    def __init__(self, what: str, path: str | None = None, hint: str | None = None):
        self.what = what
        self.path = path
        self.hint = hint
        super().__init__(self.line())

    def line(self) -> str:
        where = f"{printable(self.path)}: " if self.path else ""
        hint = f" ({printable(self.hint)})" if self.hint else ""
        return f"llmdiag: {where}{printable(self.what)}{hint}"


class TraceError(LlmdiagError):
    """A single trace file cannot be used; other ranks may still be fine."""
