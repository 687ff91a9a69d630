"""The report's compiled templates, kept in the user's own cache folder so no run compiles them again.

Compiling the report's templates (Jinja's parse, its code generation, then Python's `compile` of ~115 kB of
generated code) cost 0.3-0.7 s per run, more than parsing a 40 MB trace; loading the compiled code back is
under 1 ms. Jinja's own default folder, `$TMPDIR/_jinja2-cache-<uid>`, is a name anyone can plant in a
shared temp folder (a link there made it chmod the link's target), so this cache lives only in
`$XDG_CACHE_HOME/llmdiag/templates` (else `~/.cache/llmdiag/templates`) and is used only when safe:

- every folder below the cache home is opened with O_NOFOLLOW relative to its parent's descriptor and must
  be owned by this user; the last one is created 0700 and must have no group or other permissions;
- entries are opened relative to that folder's descriptor with O_NOFOLLOW, must be regular files owned by
  this user, and are written to a random name (O_EXCL) and renamed, so a reader never sees half an entry;
- anything else (no home, a read-only home, a folder owned by someone else, a link) turns the cache off for
  the run: the templates then compile in memory as before, and nothing is written anywhere.

An entry is found by a key over the template's name and path, the Jinja version and every Environment
option that changes the generated code, and is used only if its checksum of the template's source matches
(Jinja's `Bucket`): an edited template, a new Jinja or new options compile once more, never load stale code.
"""

from __future__ import annotations

import hashlib
import os
import stat

import jinja2
from jinja2.bccache import Bucket, BytecodeCache

from llmdiag.diagnose.model.user_cache import cache_home, open_folder  # noqa: F401 (the safe folder; re-export)

# Environment attributes the generated code depends on (the lexer's syntax, whitespace handling, escaping).
_OPTIONS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
            "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
            "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized", "is_async")
_MAX_ENTRY = 16 << 20  # bytes; a bigger file is not one of ours


def fingerprint(env: jinja2.Environment) -> str:
    """What besides the source decides the compiled code: Jinja's version and the Environment's options."""
    opts = [repr(getattr(env, k, None)) for k in _OPTIONS]
    opts += [_name(env.autoescape), _name(env.finalize), _name(env.code_generator_class)]
    opts += sorted(env.extensions)
    return hashlib.sha256("\0".join([jinja2.__version__, *opts]).encode()).hexdigest()


def _name(x) -> str:
    return repr(x) if isinstance(x, (bool, type(None))) else f"{getattr(x, '__module__', '')}.{getattr(x, '__qualname__', x)}"


class TemplateCache(BytecodeCache):
    """Jinja's bytecode cache over one safe folder descriptor (opened on first use, once per process)."""

    def __init__(self, fingerprint: str, home: str | None = None) -> None:
        self.fingerprint = fingerprint
        self.home = home
        self._fd: int | None = None
        self._opened = False

    def folder(self) -> int | None:
        if not self._opened:
            self._opened = True
            self._fd = open_folder(self.home)
        return self._fd

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha256(f"{self.fingerprint}\0{name}\0{filename or ''}".encode()).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        fd = self.folder()
        if fd is None:
            return
        try:
            f = os.open(f"{bucket.key}.jinja", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return
        with os.fdopen(f, "rb") as fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_size <= _MAX_ENTRY:
                try:
                    bucket.load_bytecode(fh)  # a wrong magic or checksum leaves the bucket empty
                except Exception:  # a truncated or damaged entry (pickle and marshal raise several kinds)
                    bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        fd = self.folder()
        if fd is None:
            return
        tmp = f".{bucket.key}.{os.urandom(8).hex()}.tmp"
        try:
            f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            with os.fdopen(f, "wb") as fh:
                bucket.write_bytecode(fh)
            os.replace(tmp, f"{bucket.key}.jinja", src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:  # a full or read-only disk: the next run compiles again
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass

    def clear(self) -> None:
        fd = self.folder()
        if fd is None:
            return
        for name in os.listdir(fd):
            if name.endswith((".jinja", ".tmp")):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
