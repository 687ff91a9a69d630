"""One escaping function per output sink, for strings that come from traces, manifests and file names.

Such strings are untrusted: a workload name in a manifest can hold a newline followed by `::error::` (a GitHub
workflow command), an OSC 52 escape (writes the reader's clipboard), a control byte that makes JUnit XML
ill-formed, or `<img src=...>` for a Markdown page. Each sink has its own syntax, so each has its own function;
`analyze`, `check` and `diff` call these and nothing else. HTML is escaped by the report's Jinja autoescape.
"""

from __future__ import annotations

import re

from llmdiag.diagnose.errors import printable

# terminal (and any one-line log): C0/C1 controls, DEL, line/paragraph separators, bidi overrides, lone
# surrogates written as `\n`, `\x1b`, `\u202e`. The implementation lives in diagnose/errors.py, which is below
# the model in the layering, so that error lines use the very same function.
terminal = printable


def github_data(s: object) -> str:
    """The message of a GitHub workflow command (`::error title=...::MESSAGE`): controls escaped as on the
    terminal (no newline can start a new command line), then GitHub's own escapes for `%`, CR and LF."""
    return terminal(s).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(s: object) -> str:
    """A property value of a workflow command (`title=VALUE`): also `:` and `,`, which end a property."""
    return github_data(s).replace(":", "%3A").replace(",", "%2C")


# what starts or ends a construct in the middle of a line (a line start never holds data: newlines are escaped)
# (an underscore inside a word, as in `overlap_ratio`, emphasises nothing in GitHub's Markdown: left as is)
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~>]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")


def markdown(s: object) -> str:
    """Text for a Markdown page or table cell (GitHub's job summary): controls escaped as on the terminal, `&`
    and `<` as entities (no raw HTML: an `<img>` would load from anywhere), Markdown punctuation backslashed
    (no link, emphasis, heading or table cell boundary comes from the data)."""
    text = terminal(s).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


# XML 1.0 Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; the C1 controls and
# bidi overrides are valid XML but rewrite a terminal showing the CI log, so they go too
_XML_BAD = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
                      "|[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def junit_xml(s: object, multiline: bool = False) -> str:
    """Text for a JUnit XML attribute or element (ElementTree escapes `&<>"` itself): characters XML 1.0 cannot
    hold even as a character reference (NUL, other C0 controls, lone surrogates, U+FFFE/U+FFFF), C1 controls
    and bidi overrides written as `\\x1b`-style escapes, so the file stays well-formed. An attribute (a message,
    a property: shown on one line by CI tools) escapes tab, CR and LF too; an element's text (`multiline`, the
    failure details we write line by line) keeps them."""
    text = str(s)
    if not multiline:
        return terminal(text) if _XML_BAD.search(text) is None else _XML_BAD.sub(_escaped, terminal(text))
    if not _XML_BAD.search(text):
        return text
    return _XML_BAD.sub(_escaped, text)


def _escaped(m: re.Match) -> str:
    return m.group().encode("unicode_escape").decode("ascii")
