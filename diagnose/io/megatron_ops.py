"""Reads the op tables of the OSDI'25 straggler study's artifact (ByteDance-Seed/StragglerAnalysis):
`trace-<job>.parquet`, one row per op of a Megatron-LM job (worker, step, op type, start, duration,
microbatch), with `meta-<job>.yaml` beside it (dp/pp/tp/vpp sizes). Not Kineto: a trace kind of its own.

pyarrow reads the parquet (the format's reference implementation) and PyYAML the meta file; both are the
optional extra `whatif`. A missing column, an unknown op type or a meta that contradicts the table is one
line naming the file.
"""

from __future__ import annotations

import glob
import importlib
import os

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.files import read_bounded, special
from llmdiag.diagnose.model.dims import MAX_WORLD
from llmdiag.diagnose.io.op_table_path import ARTIFACT_JSON, find_op_table  # noqa: F401 (re-export)

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id", "gmc")
MAX_OPS = 50_000_000  # ~2 GB of columns: beyond this the table is not one job's trace (the footer says)
MAX_SECONDS = 1e9  # ~31 years: times in int64 ns stay far from overflow
META_BUDGET = 1 << 20  # the artifact's meta is ~100 bytes
SIZES = ("dp_size", "pp_size", "tp_size", "vpp_size", "dsp_size", "world_size")


@dataclass
class OpTable:
    """The ops of one job, one entry per op in every array (times in seconds, as the artifact writes them)."""

    path: str
    meta: dict  # dp_size, pp_size, tp_size, vpp_size, world_size, trial_name
    dp_rank: np.ndarray
    stage: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    optype: np.ndarray  # index into optypes
    optypes: list[str]
    start: np.ndarray
    duration: np.ndarray
    seq_id: np.ndarray
    mc: np.ndarray  # model chunk on the worker (−1 where none)
    gmc: np.ndarray  # model chunk in the whole model (−1 where none)

    @property
    def n(self) -> int:
        return len(self.start)


def _need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LlmdiagError(f"reading the straggler-study op tables needs {module}",
                           None, "pip install 'llmdiag[whatif]'") from None


def find_meta(path: str) -> str:
    """meta-<job>.yaml for trace-<job>.parquet, else the only meta-*.yaml beside it."""
    folder, base = os.path.split(os.path.abspath(path))
    job = base.removesuffix(".parquet").removeprefix("trace-")
    cand = os.path.join(folder, f"meta-{job}.yaml")
    if os.path.isfile(cand):
        return cand
    metas = sorted(glob.glob(os.path.join(glob.escape(folder), "meta-*.y*ml")))
    if len(metas) == 1:
        return metas[0]
    raise LlmdiagError("no meta-*.yaml beside the op table (dp/pp sizes are needed)", path,
                       f"expected {os.path.basename(cand)}")


def read_meta(meta_path: str) -> dict:
    """The meta yaml, read within META_BUDGET from a regular file only, parsed by a safe loader that refuses
    aliases (a 1 kB file of nested aliases expands to 9^9 references: "billion laughs"), its sizes checked:
    positive integers up to MAX_WORLD, trial_name a short scalar. Anything else: one line naming the file."""
    yaml = _need("yaml")
    raw = read_bounded(meta_path, META_BUDGET, "meta file", gunzip=False)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LlmdiagError(f"meta file is not UTF-8 text (byte {e.start})", meta_path) from None
    try:
        meta = yaml.load(text, Loader=_loader(yaml))
    except (yaml.YAMLError, RecursionError) as e:
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise LlmdiagError(f"unreadable meta file ({first})", meta_path) from None
    if not isinstance(meta, dict):
        raise LlmdiagError("meta file is not a mapping", meta_path)
    for k in SIZES:
        v = meta.get(k)
        if v is None and k not in ("dp_size", "pp_size"):
            continue
        if type(v) is not int or not 1 <= v <= MAX_WORLD:
            shown = "missing" if v is None else f"{str(v)[:40]!r}"
            raise LlmdiagError(f"meta file: {k} is not an integer from 1 to {MAX_WORLD} ({shown})", meta_path)
    name = meta.get("trial_name")
    if name is not None and (type(name) not in (str, int) or len(str(name)) > 256):
        raise LlmdiagError("meta file: trial_name is not a short name (a string or number of at most 256 "
                           "characters)", meta_path)
    return meta


def _loader(yaml):
    class NoAliases(yaml.SafeLoader):
        """SafeLoader that refuses `*alias` references: the meta needs none, and they are what expands."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(None, None, "aliases are not allowed in a meta file",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)

    return NoAliases


def read_op_table(path: str) -> OpTable:
    pq = _need("pyarrow.parquet")
    meta_path = find_meta(path)
    meta = read_meta(meta_path)
    if kind := special(path):
        raise LlmdiagError(f"op table is not a regular file ({kind})", path)
    try:
        pf = pq.ParquetFile(path)
        names, rows = pf.schema_arrow.names, pf.metadata.num_rows  # the footer: nothing read yet
    except Exception as e:  # pyarrow raises several types (ArrowInvalid, OSError) for a broken file
        raise LlmdiagError(f"unreadable parquet file ({str(e).splitlines()[0][:200]})", path) from None
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise LlmdiagError(f"not a straggler-study op table: no column {', '.join(missing)}", path)
    if rows == 0:
        raise LlmdiagError("the op table has no rows", path)
    if rows > MAX_OPS:
        raise LlmdiagError(f"{rows} ops: more than {MAX_OPS} in one table", path)
    for c in COLUMNS:
        tp = pf.schema_arrow.field(c).type
        if not _fits(c, tp):
            raise LlmdiagError(f"column {c} holds {tp}, not {'text' if c == 'optype' else 'numbers'}", path)
    try:
        t = pf.read(columns=list(COLUMNS))  # the needed columns only
    except Exception as e:
        raise LlmdiagError(f"unreadable parquet file ({str(e).splitlines()[0][:200]})", path) from None
    cols = {}
    for c in COLUMNS:
        col = t.column(c)
        if col.null_count:
            raise LlmdiagError(f"column {c} has {col.null_count} empty values", path)
        cols[c] = col
    names = np.asarray(cols["optype"].to_numpy(zero_copy_only=False), dtype=object).astype(str)
    optypes, codes = np.unique(names, return_inverse=True)
    ints = {c: _ints(cols[c], c, path) for c in ("dp_rank", "stage", "rank", "step", "seq_id", "mc", "gmc")}
    out = OpTable(path, meta, *(ints[c] for c in ("dp_rank", "stage", "rank", "step")),
                  codes.astype(np.int64), [str(o) for o in optypes],
                  np.asarray(cols["start_ts"].to_numpy(), dtype=np.float64),
                  np.asarray(cols["duration"].to_numpy(), dtype=np.float64),
                  ints["seq_id"], ints["mc"], ints["gmc"])
    _check(out, meta_path)
    return out


def _fits(column: str, tp) -> bool:
    import pyarrow as pa

    if column == "optype":
        return pa.types.is_string(tp) or pa.types.is_large_string(tp) or (
            pa.types.is_dictionary(tp) and (pa.types.is_string(tp.value_type) or pa.types.is_large_string(tp.value_type)))
    if column in ("start_ts", "duration"):
        return pa.types.is_integer(tp) or pa.types.is_floating(tp)
    return pa.types.is_integer(tp)


def _ints(col, c: str, path: str) -> np.ndarray:
    a = col.to_numpy()
    if a.dtype == np.uint64 and len(a) and a.max() >= 2**63:
        raise LlmdiagError(f"column {c} holds values beyond int64", path)
    return np.asarray(a, dtype=np.int64)


def _check(t: OpTable, meta_path: str) -> None:
    dp, pp = t.meta["dp_size"], t.meta["pp_size"]
    if not (np.isfinite(t.start).all() and np.isfinite(t.duration).all()) or (t.duration < 0).any():
        raise LlmdiagError("start_ts/duration hold negative, NaN or infinite values", t.path)
    if np.abs(t.start).max() > MAX_SECONDS or t.duration.max() > MAX_SECONDS:  # int64 ns would overflow
        raise LlmdiagError(f"start_ts/duration beyond {MAX_SECONDS:.0e} s (not seconds of one job)", t.path)
    if t.dp_rank.min() < 0 or t.dp_rank.max() >= dp or t.stage.min() < 0 or t.stage.max() >= pp:
        raise LlmdiagError(f"dp_rank/stage outside the meta's dp_size {dp} × pp_size {pp}", t.path,
                           f"check {os.path.basename(meta_path)}")
    world = t.meta.get("world_size") or dp * pp * (t.meta.get("tp_size") or 1)
    if t.rank.min() < 0 or t.rank.max() >= world:
        raise LlmdiagError(f"rank outside the meta's world of {world} workers (ranks {int(t.rank.min())} to "
                           f"{int(t.rank.max())})", t.path, f"check {os.path.basename(meta_path)}")
