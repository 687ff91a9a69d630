"""Which inputs `llmdiag analyze` parses ahead of its imports (io/ahead.py), and starting that parse.

Only an input the local engine would run in this process or one forked child (pool.py `workers` is 1): a pool's
workers parse in parallel anyway, and their start-up is small beside many ranks. Only where the command opted in
to forking (`EngineSpec.meanwhile`) with a second worker allowed (`--jobs 1` forks nothing), and at most
AHEAD_MAX_BYTES on disk: the parsed columns travel back through a pipe, ~2x the JSON's compressed size, held
twice while they do; that is also below the size at which a lone rank's parse is split across the cores
(loader.SPLIT_MIN_BYTES), which a parse here would not be. Nothing here imports numpy: the child does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.engine.pool import workers
from llmdiag.diagnose.engine.work import default_workers
from llmdiag.diagnose.io import ahead
from llmdiag.diagnose.io.discover import Source, discover, file_size
from llmdiag.diagnose.io.op_table_path import find_op_table

if TYPE_CHECKING:
    from llmdiag.diagnose.engine import EngineSpec

AHEAD_MAX_BYTES = 8 << 20  # on disk: ~100 MB of JSON, ~16 MB of columns sent back (~15 ms each way)


def start(target: str | list[str], spec: EngineSpec) -> tuple[Source | None, ahead.Ahead | None]:
    """(the input discovered, the child parsing its traces where worth it): the analysis then discovers nothing
    again. An op table is left to the analysis (None, None). A user's mistake (no such file, no trace in a folder)
    raises here as it would there, the same line."""
    if isinstance(target, str) and find_op_table(target):
        return None, None
    src = discover(target)
    return src, parse_ahead(src.files, spec)


def parse_ahead(files: list[str], spec: EngineSpec) -> ahead.Ahead | None:
    """The child parsing `files` while this process goes on, where worth it (above); else None."""
    allowed = spec.jobs or default_workers()
    if spec.is_dask or spec.meanwhile is None or allowed < 2:
        return None
    sizes = [file_size(f) for f in files]
    if sum(sizes) > AHEAD_MAX_BYTES or workers(sizes, allowed) > 1:
        return None
    return ahead.start(files, _parse)


def _parse(path: str):
    """(identity, RankTrace) of one file, in the child: numpy (one BLAS thread) and the parser imported there."""
    from llmdiag.diagnose.engine.blas import load_numpy_single_threaded

    load_numpy_single_threaded()
    from llmdiag.diagnose.io.loader import load_identified

    return load_identified(path)
