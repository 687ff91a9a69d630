"""The user's own cache folders (`$XDG_CACHE_HOME/llmdiag/<leaf>`, else `~/.cache/llmdiag/<leaf>`), opened only
where safe: what is kept there is code a later run executes (the report's compiled templates,
reports/template_cache.py; the dataclasses' generated functions, model/code_cache.py).

- every folder below the cache home is opened with O_NOFOLLOW relative to its parent's descriptor and must be
  owned by this user; the last one is created 0700 and must have no group or other permissions;
- anything else (no home, a read-only home, a folder owned by someone else, a link) gives None: the caller then
  works without a cache, and nothing is written anywhere.
A temp folder's name (Jinja's own default, `$TMPDIR/_jinja2-cache-<uid>`) is one anyone can plant.
"""

from __future__ import annotations

import os
import stat


def cache_home() -> str | None:
    """$XDG_CACHE_HOME when set to an absolute path (the XDG rule), else ~/.cache; None without a home."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return xdg
    home = os.path.expanduser("~")
    return os.path.join(home, ".cache") if os.path.isabs(home) else None


def _subdir(parent_fd: int, name: str) -> int:
    """`name` in the folder `parent_fd`, created 0700 if missing, opened without following a link, ours."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    if os.fstat(fd).st_uid != os.getuid():
        os.close(fd)
        raise PermissionError(f"{name} is not owned by this user")
    return fd


def open_folder(home: str | None = None, leaf: str = "templates") -> int | None:
    """A descriptor of `<cache home>/llmdiag/<leaf>`, or None where no safe folder can be had."""
    home = home or cache_home()
    if not home or not hasattr(os, "O_NOFOLLOW") or not hasattr(os, "getuid"):
        return None
    fds: list[int] = []
    try:
        try:
            os.mkdir(home, 0o700)  # the XDG cache home itself, where missing (its parent must exist)
        except FileExistsError:
            pass
        fds.append(os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        if os.fstat(fds[-1]).st_uid != os.getuid():
            return None
        for name in ("llmdiag", leaf):
            fds.append(_subdir(fds[-1], name))
        if stat.S_IMODE(os.fstat(fds[-1]).st_mode) & 0o077:
            return None
        return fds.pop()
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def read_entry(folder: int, name: str, limit: int) -> bytes | None:
    """The bytes of the regular file `name` in `folder`, owned by this user and at most `limit` bytes, opened
    without following a link; None for anything else."""
    try:
        f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    with os.fdopen(f, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > limit:
            return None
        try:
            return fh.read(limit + 1)[:limit]
        except OSError:
            return None


def write_entry(folder: int, name: str, data: bytes) -> None:
    """`data` as `name` in `folder`: written to a random name (O_EXCL, 0600) and renamed, so a reader never sees
    half an entry; a full or read-only disk leaves the old entry (the next run computes again)."""
    tmp = f".{name}.{os.urandom(8).hex()}.tmp"
    try:
        f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        with os.fdopen(f, "wb") as fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
