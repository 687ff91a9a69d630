"""Progress of the per-rank jobs on stderr: files done / total, MB/s and ETA, on a terminal only.

Drawn with rich (its Progress computes the rate and the time left from the bytes done; one live line, redrawn
in place): imported only when stderr is a terminal, so pipes, CI logs and `-q` pay neither the import nor a
byte of output. The local pool and the Dask engine both report through `advance`, so the display is one.
"""

from __future__ import annotations

import sys


class Progress:
    """Counts what the engine finished; draws it only when `enabled` and stderr is a tty (or `console` given,
    for tests). The rate and ETA are of the traces' bytes on disk, known before any is read."""

    def __init__(self, total_files: int, total_bytes: int, *, enabled: bool, console=None):
        self.total_files, self.total_bytes = total_files, total_bytes
        self.files_done = self.bytes_done = 0
        self._bar = self._task = None
        if enabled and (console is not None or sys.stderr.isatty()):
            self._bar = _bar(console)
            self._task = self._bar.add_task("analysing traces", total=max(1, total_bytes), files=0,
                                            total_files=total_files)

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def describe(self, text: str) -> None:
        """What the engine is doing before the first trace is done (starting or reaching a Dask cluster)."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def advance(self, nbytes: int) -> None:
        """One more trace done (analysed or failed): `nbytes` is its size on disk."""
        self.files_done += 1
        self.bytes_done += nbytes
        if self._bar is not None:
            self._bar.update(self._task, advance=nbytes, files=self.files_done)


def _bar(console):
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.progress import Progress as Bar

    return Bar(TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.fields[files]}/{task.fields[total_files]} files"),
               TransferSpeedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               console=console or Console(stderr=True), transient=False)
