"""Files in and out at the edge, safely: regular files only, reads within a byte budget, atomic writes.

Every input llmdiag reads whole (summaries, baselines, configs, manifests) goes through `read_bounded`: a
FIFO, socket or device is refused in one line before anything blocks on it (opened non-blocking, checked
with fstat on the opened descriptor, so a swap after the check does not help), and a file or its gzip
content larger than the budget is refused instead of filling memory (a gzip bomb given as `--baseline`,
`/dev/zero`). Every output goes through `open_atomic` (or `write_atomic`, on it): a regular file or nothing at the target
(a link, FIFO, socket or device is refused, `/dev/null` written through), never a file this command read,
then a fresh file in the target folder (`mkstemp`: O_EXCL, never a symlink followed, unpredictable name),
fsync'ed and renamed over the target, removed on every error path, so a failed write leaves neither a
half-written file nor a temp file, and errors are one line.
It lives in the model stage so the summary reader there, io, gate and the CLI can all use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import zlib

from llmdiag.diagnose.errors import LlmdiagError

MiB = 1 << 20
SUMMARY_BUDGET = 256 * MiB  # a 1,024-rank summary with memory timelines is ~20 MB
CONFIG_BUDGET = 1 * MiB  # gates.toml
MANIFEST_BUDGET = 64 * MiB


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def special(path: str) -> str | None:
    """Why `path` (links followed) is not a regular file, or None (also None when it cannot be stat'ed)."""
    try:
        return _kind(os.stat(path).st_mode)
    except OSError:
        return None


def read_bounded(path: str, budget: int, what: str = "file", gunzip: bool = True) -> bytes:
    """The bytes of `path` (gunzipped when it is gzip), or LlmdiagError in one line: not a regular file,
    unreadable, or more than `budget` bytes (on disk or decompressed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise LlmdiagError(f"no such {what}", path) from None
        raise LlmdiagError(f"cannot read {what}: {e.strerror or e}", path) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise LlmdiagError(f"{what} is not a regular file ({kind})", path, f"give a {what} on disk")
        os.set_blocking(fd, True)
        _INPUTS.add((st.st_dev, st.st_ino))
        chunks, n = [], 0
        while n <= budget:
            b = os.read(fd, min(1 << 20, budget + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
    except OSError as e:
        raise LlmdiagError(f"cannot read {what}: {e.strerror or e}", path) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > budget:
        raise LlmdiagError(f"{what} is larger than its {_size(budget)} budget; left unread", path)
    if gunzip and raw[:2] == b"\x1f\x8b":
        raw = gunzip_bounded(raw, budget, path, what)
    return raw


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n} byte" + ("s" if n != 1 else "")


def gunzip_bounded(raw: bytes, budget: int, path: str, what: str) -> bytes:
    """Every gzip member of `raw`, at most `budget` bytes in all, inflated 1 MiB at a time (a bomb stops at
    the budget instead of allocating its whole size)."""
    out = bytearray()
    while raw:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = raw
        try:
            while data and not d.eof:
                out += d.decompress(data, 1 << 20)
                data = d.unconsumed_tail
                if len(out) > budget:
                    raise LlmdiagError(f"{what} decompresses to more than its {_size(budget)} budget; left unread",
                                       path)
        except zlib.error as e:
            raise LlmdiagError(f"{what} is not valid gzip ({e})", path) from None
        if not d.eof:
            raise LlmdiagError(f"{what} is a truncated gzip file", path)
        raw = d.unused_data
    return bytes(out)


def write_atomic(path: str, data: bytes | str, mode: int = 0o644) -> None:
    """Write `data` to `path` through a fresh temp file in the same folder, renamed over it; on any error
    nothing is left behind and LlmdiagError says why in one line."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    write_atomic_with(path, lambda f: f.write(data), mode)


def write_atomic_with(path: str, write, mode: int = 0o644) -> None:
    """`write(binary file)` into a fresh temp file beside `path`, renamed over it (write_atomic for writers
    that stream, such as pyarrow's): readers never see a half-written file."""
    with open_atomic(path, mode) as f:
        write(f)


# Inputs this process read (device, inode): an output that names one is refused (`--json rank1.json` would
# replace the trace it analysed). Filled by read_bounded and by io/discover for the traces it finds.
_INPUTS: set[tuple[int, int]] = set()


def guard_input(path: str) -> None:
    """Remember `path` as an input of this command: open_atomic refuses to write over it."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        _INPUTS.add((st.st_dev, st.st_ino))


def check_target(path: str) -> os.stat_result | None:
    """What is at an output path now (lstat, or None), or LlmdiagError in one line naming it: only a regular
    file that is no input of this command may be replaced, and only a character device (`/dev/null`) is
    written through (docs/robustness.md, "Outputs"). A link, FIFO, socket, block device or directory at the
    target is refused: replacing one turned `/dev/null` into a regular file for every process on the machine.
    Called by open_atomic, and by the CLI before any work so a bad output costs no analysis."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LlmdiagError(f"cannot write: {e.strerror or e}", path) from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise LlmdiagError("cannot write: a symbolic link is there (outputs are regular files; a link is never "
                           "written through or replaced)", path, "remove the link or name another file")
    if stat.S_ISDIR(mode):
        raise LlmdiagError("cannot write: is a directory", path)
    if stat.S_ISREG(mode):
        if (st.st_dev, st.st_ino) in _INPUTS:
            raise LlmdiagError("cannot write: it is an input of this command (it would replace what was read)",
                               path, "name another file")
        return st
    if stat.S_ISCHR(mode):
        return st
    raise LlmdiagError(f"cannot write: not a regular file ({_kind(mode)}); outputs never replace one", path,
                       "name a file")


@contextlib.contextmanager
def open_atomic(path: str, mode: int = 0o644, sync: bool = True):
    """A binary file to write `path` through: `with open_atomic(p) as f: f.write(...)` (or gzip.GzipFile(
    fileobj=f), or a streaming JSON writer). The one writer of every output (summary, report, timeline,
    tables, JUnit, verdict, diff): the target is checked first (`check_target`: regular files only, never an
    input); the file is a `mkstemp` file in the target folder (O_CREAT|O_EXCL|O_NOFOLLOW, a random name:
    nothing planted there is followed or overwritten), fsync'ed and renamed over `path` when the block ends;
    an exception in the block or an OSError removes it. A character device named directly (`--json
    /dev/null`) is written through, never replaced. OSError becomes LlmdiagError `cannot write: <reason>`."""
    target = os.path.abspath(path)
    folder, base = os.path.split(target)
    tmp = None
    try:
        st = check_target(path)
        if st is not None and stat.S_ISCHR(st.st_mode):
            with _device(target, st) as f:
                yield f
            return
        os.makedirs(folder, exist_ok=True)
        fd, tmp = mkstemp(folder, f".{base[:64]}.", ".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode & ~_umask())
            yield f
            if sync:  # on disk before the rename (a cache entry, cheap to lose, skips it)
                f.flush()
                os.fsync(f.fileno())
        check_target(path)  # again: something swapped in while the block ran is not replaced either
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise LlmdiagError(f"cannot write: {e.strerror or e}", path) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _device(target: str, st: os.stat_result):
    """The character device at `target`, opened for writing without following a link or taking it as the
    controlling terminal; it must still be the device lstat saw."""
    fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    now = os.fstat(fd)
    if not stat.S_ISCHR(now.st_mode) or now.st_rdev != st.st_rdev:
        os.close(fd)
        raise LlmdiagError("cannot write: the device changed while it was opened", target)
    return os.fdopen(fd, "wb")


def mkstemp(folder: str, prefix: str, suffix: str) -> tuple[int, str]:
    """(descriptor, path) of a new private file in `folder`: tempfile.mkstemp, imported on the first write (it
    pulls shutil and three compression modules, which a command that writes nothing does not need)."""
    import tempfile

    return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m
