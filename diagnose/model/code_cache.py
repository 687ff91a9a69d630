"""The compiled code of the functions `dataclasses` writes for each class, kept between runs.

`dataclasses` writes each class's `__init__` (and a frozen class's `__setattr__`/`__delattr__`) as source text and
compiles it with `exec`: ~0.15 ms a function, ~15 ms of every `llmdiag analyze` process for the ~80 classes it
imports before a byte is read (docs/benchmarks.md, "Fifth pass"), the same text compiled again by every run. Here
`model/dc.py` runs the standard decorator with its `exec` going through `cached_exec`: the code of a text already
compiled by an earlier run is loaded back (marshal: ~1 ms for all of them), any other text is compiled exactly as
`exec` would (`compile(text, "<string>", "exec")`, no inherited future flags) and saved when the process exits.

- An entry is found by its whole source text (no digest, so no collision to argue about), in one file per
  Python build and optimisation level (`sys.hexversion`, the cache tag, `-O`): marshal's code is the build's own.
- The file lives in the user's cache folder `llmdiag/code` (model/user_cache.py: 0700, owned, no links followed),
  is a regular file of this user's, and is replaced atomically; anything unexpected (a damaged or foreign file, no
  safe folder, a value that is not code) is ignored and the text compiled, as without the cache.
- The file holds the entries of the runs that wrote it, up to `MAX_ENTRIES`; past that (sources edited many
  times) a run keeps only the entries it used.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import sys
from types import CodeType

from llmdiag.diagnose.model import user_cache

MAX_ENTRIES = 1024  # ~1.4 MB, ~2 ms to load; an analyze run uses ~100, all the commands together ~300
MAX_BYTES = 16 << 20
# The build whose code objects the file holds: marshal's format and the bytecode are the interpreter's own.
BUILD = (sys.implementation.cache_tag, sys.hexversion, sys.flags.optimize)
FILE = f"dataclasses-{BUILD[0]}-{BUILD[1]:x}-O{BUILD[2]}.marshal"
_MISSING = object()


class _State:
    """One process's view of the cache file: loaded on the first class, saved at exit if it compiled any."""

    def __init__(self, home: str | None = None) -> None:
        self.home = home
        self.folder: int | None = None
        self.code: dict[str, CodeType] | None = None
        self.used: set[str] = set()
        self.fresh = 0

    def load(self) -> dict[str, CodeType]:
        if self.code is None:
            self.code = {}
            self.folder = user_cache.open_folder(self.home, "code")
            data = user_cache.read_entry(self.folder, FILE, MAX_BYTES) if self.folder is not None else None
            if data:
                try:
                    build, code = marshal.loads(data)
                except Exception:  # a truncated or damaged file (marshal raises several kinds)
                    build, code = None, None
                if build == BUILD and isinstance(code, dict):
                    self.code = code
        return self.code

    def get(self, src: str) -> CodeType:
        code = self.load().get(src)
        if type(code) is not CodeType:
            code = compile(src, "<string>", "exec", dont_inherit=True)  # as exec(src) in dataclasses compiles it
            self.code[src] = code  # type: ignore[index]
            self.fresh += 1
            if self.fresh == 1 and self.folder is not None:
                atexit.register(self.save)
        self.used.add(src)
        return code

    def save(self) -> None:
        if not self.fresh or self.folder is None or self.code is None:
            return
        code = self.code if len(self.code) <= MAX_ENTRIES else {k: self.code[k] for k in self.used}
        user_cache.write_entry(self.folder, FILE, marshal.dumps((BUILD, code)))
        self.fresh = 0


_STATE = _State()


def _exec(src, globals=None, locals=None):
    """`exec` as dataclasses calls it, a source text's code taken from the cache."""
    if isinstance(src, str):
        src = _STATE.get(src)
    return builtins.exec(src, globals, locals)


@contextlib.contextmanager
def cached_exec():
    """dataclasses' `exec` (a module global it looks up at each call) goes through the cache while the block runs.
    Two threads decorating at once may leave it set after both blocks: harmless, it computes what exec does."""
    had = dataclasses.__dict__.get("exec", _MISSING)
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if had is _MISSING:
            dataclasses.__dict__.pop("exec", None)
        else:
            dataclasses.exec = had  # type: ignore[attr-defined]
