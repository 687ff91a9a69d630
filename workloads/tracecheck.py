"""What the launcher checks of the files a run leaves, and how it opens its logs. Torch-free.

A rank's result record says `ok` when its training loop ended; whether its trace reached the disk whole is
another matter (a full disk, RLIMIT_FSIZE: 40-byte traces while every record said ok). `incomplete_trace`
reads the gzip to its end in bounded memory: the stream must end where the file ends and hold one JSON object
(first and last non-blank bytes `{` and `}`). `fresh_file` creates a log that no planted link can redirect.
"""

from __future__ import annotations

import os
import stat
import zlib

MIN_BYTES = 64  # a gzip header and an empty JSON object are less than this; no real trace is
CHUNK = 1 << 20


def incomplete_trace(path: str) -> str | None:
    """Why the gzipped trace at `path` is not whole, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return f"cannot open it ({e.strerror or e})"
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        if size < MIN_BYTES:
            return f"{size} bytes"
        d, head, tail = zlib.decompressobj(16 + zlib.MAX_WBITS), b"", b""
        try:
            while chunk := f.read(CHUNK):
                while chunk and not d.eof:
                    out = d.decompress(chunk, CHUNK)
                    chunk = d.unconsumed_tail
                    head = head or out.lstrip()[:1]
                    tail = (tail + out)[-256:]
                if d.eof and (chunk or d.unused_data):
                    return "bytes after the end of the gzip stream"
        except zlib.error as e:
            return f"corrupt gzip ({e})"
    if not d.eof:
        return f"the gzip stream is cut off ({size} bytes)"
    if head != b"{" or not tail.rstrip().endswith(b"}"):
        return "the JSON inside is cut off"
    return None


def fresh_file(path: str, mode: int = 0o644) -> int:
    """A new, empty regular file at `path` (whatever was there, a link included, is removed, not followed),
    opened for writing: O_CREAT|O_EXCL|O_NOFOLLOW."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
