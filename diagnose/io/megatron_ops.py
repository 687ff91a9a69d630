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
from dataclasses import dataclass

import numpy as np

from diagnose.errors import LlmdiagError

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id", "gmc")
MAX_OPS = 50_000_000  # ~2 GB of columns: beyond this the table is not one job's trace


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


def find_op_table(path: str) -> str | None:
    """The op table a path names: a `.parquet` file, or the one `trace-*.parquet` of a folder (the artifact's
    layout; its timeline-*.json.gz are Chrome traces of ops, not Kineto ranks). None: not an op table."""
    if os.path.isfile(path):
        return path if path.endswith(".parquet") else None
    if not os.path.isdir(path):
        return None
    found = sorted(glob.glob(os.path.join(glob.escape(path), "trace-*.parquet")))
    if len(found) > 1:
        raise LlmdiagError(f"{len(found)} straggler-study op tables in one folder", path,
                           "analyze one: " + ", ".join(os.path.basename(f) for f in found[:4]))
    return found[0] if found else None


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


def read_op_table(path: str) -> OpTable:
    pq = _need("pyarrow.parquet")
    yaml = _need("yaml")
    meta_path = find_meta(path)
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise LlmdiagError(f"unreadable meta file ({str(e).splitlines()[0]})", meta_path) from None
    if not isinstance(meta, dict):
        raise LlmdiagError("meta file is not a mapping", meta_path)
    for k in ("dp_size", "pp_size"):
        if type(meta.get(k)) is not int or meta[k] < 1:
            raise LlmdiagError(f"meta file has no positive integer {k}", meta_path)
    try:
        t = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types (ArrowInvalid, OSError) for a broken file
        raise LlmdiagError(f"unreadable parquet file ({str(e).splitlines()[0][:200]})", path) from None
    missing = [c for c in COLUMNS if c not in t.column_names]
    if missing:
        raise LlmdiagError(f"not a straggler-study op table: no column {', '.join(missing)}", path)
    if t.num_rows == 0:
        raise LlmdiagError("the op table has no rows", path)
    if t.num_rows > MAX_OPS:
        raise LlmdiagError(f"{t.num_rows} ops: more than {MAX_OPS} in one table", path)
    cols = {}
    for c in COLUMNS:
        col = t.column(c)
        if col.null_count:
            raise LlmdiagError(f"column {c} has {col.null_count} empty values", path)
        cols[c] = col
    names = np.asarray(cols["optype"].to_numpy(zero_copy_only=False), dtype=object).astype(str)
    optypes, codes = np.unique(names, return_inverse=True)
    out = OpTable(path, meta, *(np.asarray(cols[c].to_numpy(), dtype=np.int64) for c in ("dp_rank", "stage", "rank", "step")),
                  codes.astype(np.int64), [str(o) for o in optypes],
                  np.asarray(cols["start_ts"].to_numpy(), dtype=np.float64),
                  np.asarray(cols["duration"].to_numpy(), dtype=np.float64),
                  np.asarray(cols["seq_id"].to_numpy(), dtype=np.int64), np.asarray(cols["mc"].to_numpy(), dtype=np.int64),
                  np.asarray(cols["gmc"].to_numpy(), dtype=np.int64))
    _check(out, meta_path)
    return out


def _check(t: OpTable, meta_path: str) -> None:
    dp, pp = t.meta["dp_size"], t.meta["pp_size"]
    if not (np.isfinite(t.start).all() and np.isfinite(t.duration).all()) or (t.duration < 0).any():
        raise LlmdiagError("start_ts/duration hold negative, NaN or infinite values", t.path)
    if t.dp_rank.min() < 0 or t.dp_rank.max() >= dp or t.stage.min() < 0 or t.stage.max() >= pp:
        raise LlmdiagError(f"dp_rank/stage outside the meta's dp_size {dp} × pp_size {pp}", t.path,
                           f"check {os.path.basename(meta_path)}")
