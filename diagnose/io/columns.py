"""Event pieces -> numpy columns: the accumulator both the serial parse (loader.py) and the split parse
(split_parse.py) fill, so the two produce identical tables.

Per-key work is C-level (itemgetter / attrgetter / dict.get maps, dict-based interning of names, categories
and threads); a piece with malformed events takes a per-event path.
"""

from __future__ import annotations

import math
import re
from itertools import compress, repeat
from operator import eq, itemgetter

import numpy as np

from llmdiag.diagnose.io import fastjson

_EMPTY: dict = {}
_COMM_ARG_KEYS = fastjson.COMM_FIELDS  # the args kept for collectives (and gloo spans' Input Dims)


def intern(index: dict, keys: list) -> np.ndarray:
    """Ids of `keys` in `index` (insertion-ordered: list(index) are the values), adding new ones.

    The per-key work is C-level: dict.fromkeys finds the piece's distinct keys (hashing each once; str
    hashes are cached), only those are looked at in Python, then one dict lookup per key.
    """
    for k in dict.fromkeys(keys):
        if k not in index:
            index[k] = len(index)
    return np.fromiter(map(index.__getitem__, keys), np.int32, len(keys))


def _col(rows: list, key: str, default=None) -> list:
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        return [e.get(key, default) for e in rows]


def _num(v, default: float = math.nan) -> float:
    if isinstance(v, bool):
        return default
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return default
    return default


def _ints(vals: list) -> np.ndarray:
    try:
        a = np.array(vals, dtype=np.int64)
        if a.ndim == 1:  # lists of equal length would make a 2-D array
            return a
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([int(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**62 else -1 for v in vals],
                    np.int64)


def _floats(vals: list) -> np.ndarray:
    try:
        a = np.array(vals, dtype=np.float64)
        if a.ndim == 1:
            return a
    except (TypeError, ValueError):
        pass
    return np.array([_num(v) for v in vals], dtype=np.float64)


def _hashable(v):
    return v if isinstance(v, (int, str, float)) or v is None else str(v)


# GEMM host ops whose `Input type` gives the precision of the kernels they launch (metrics/rank/precision.py).
GEMM_OPS = frozenset(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                      "aten::_scaled_mm", "aten::addmv", "aten::mv", "aten::_addmm_activation", "aten::_grouped_mm",
                      "aten::_scaled_grouped_mm", "aten::_int_mm"))
# SDPA-family attention ops ([B, H, S, D] inputs): their Input Dims size the roofline view (metrics/rank/roofline.py).
ATTENTION_OPS = frozenset(("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                           "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_backward",
                           "aten::_scaled_dot_product_efficient_attention_backward",
                           "aten::_scaled_dot_product_cudnn_attention_backward"))


# gloo's all-to-all records its split sizes only in its Concrete Inputs (4th: output splits, 5th: input splits);
# NCCL's record_param_comms has them as `In split size` / `Out split size`. The loader files them under the NCCL
# keys, still as the trace's text, so one reader (metrics/rank/moe.py, which validates them) serves both backends.
GLOO_A2A = "c10d::alltoall_base_"


# ProfilerStep#N is a step annotation in every schema, but its category changed: `Operator` (2021 Kineto),
# `cpu_op` (torch 1.8-1.9), `user_annotation` (later). The op spellings are filed under `user_annotation`
# here, at the one place every parse goes through, so the step is found (metrics/rank/steps.py) and never counted
# as a host op (the idle under a step span is not "host op running").
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
STEP_OP_CATS = ("Operator", "cpu_op", "operator")
STEP_CAT = "user_annotation"
SYNC_CAT = "cuda_sync"
MEMCPY_CAT = "gpu_memcpy"
DTOH = re.compile(r"DtoH|Device -> (Pageable|Pinned)|DeviceToHost|D2H")  # device-to-host copy names


def _gloo_splits(args: dict) -> dict:
    """A gloo all-to-all's kept args with its splits under the NCCL keys; Concrete Inputs dropped."""
    ci = args.get("Concrete Inputs")
    out = {k: v for k, v in args.items() if k != "Concrete Inputs"}
    if isinstance(ci, list) and len(ci) >= 5:
        out["In split size"], out["Out split size"] = ci[4], ci[3]
    return out


def _is_comm_name(name) -> bool:
    """Names whose args are kept when they carry Input Dims: gloo/c10d spans (their message size)."""
    return isinstance(name, str) and (name.startswith("gloo:") or name.startswith("c10d::") or "nccl" in name)


class _DictView:
    """Column access over orjson's event dicts (fastjson.StructView does the same over msgspec structs)."""

    field = staticmethod(_col)
    PHASE = {"X": "X", "M": "M", "i": "i"}
    same = staticmethod(eq)

    @staticmethod
    def phases(rows: list) -> list:
        return _col(rows, "ph")

    @staticmethod
    def args(rows: list) -> list:
        args = _col(rows, "args", _EMPTY)
        return args if set(map(type, args)) <= {dict} else [a if type(a) is dict else _EMPTY for a in args]

    @staticmethod
    def arg(args: list, key: str) -> list:
        return list(map(dict.get, args, repeat(key), repeat(fastjson.ARG_FIELDS[key][1])))

    @staticmethod
    def has(args: list, key: str) -> list:
        return list(map(dict.__contains__, args, repeat(key)))

    @staticmethod
    def comm(a: dict) -> dict:
        return {k: a[k] for k in _COMM_ARG_KEYS if k in a}

    @staticmethod
    def gemm(a: dict) -> dict | None:
        it, dims = a.get("Input type"), a.get("Input Dims")
        if not isinstance(it, list):
            return None
        return {"Input type": it, "Input Dims": dims} if isinstance(dims, list) else {"Input type": it}

    @staticmethod
    def get(e: dict, key: str, default=None):
        return e.get(key, default)


class Columns:
    """Accumulates columns over event pieces."""

    def __init__(self):
        self.names: dict = {}
        self.cats: dict = {}
        self.threads: dict = {}
        self.comm_name: list[bool] = []  # per name id: a name a gloo/c10d span with Input Dims may carry
        self.gemm_name: list[bool] = []  # per name id: a GEMM op whose Input type gives its kernels' precision
        self.step_name: list[bool] = []  # per name id: ProfilerStep#N (its op-category spellings re-filed)
        self.dtoh_name: list[bool] = []  # per name id: a device-to-host copy's name (its bytes kept: _read_bytes)
        self.has_step = False
        # (and its Input Dims its shape: diagnose.metrics.op_scaling)
        self.thread_names: dict = {}
        self.parts: list[dict] = []
        self.mem_parts: list[dict] = []
        self.comm_args: dict[int, dict] = {}
        self.n = 0
        self.bad = 0

    def add(self, events: list) -> None:
        v = fastjson.StructView if fastjson.is_struct_list(events) else _DictView
        try:
            ph = v.phases(events)
        except (KeyError, TypeError, AttributeError):
            self.bad += sum(1 for e in events if type(e) is not dict)
            ph = [e.get("ph") if type(e) is dict else None for e in events]
        phase, same = v.PHASE, v.same  # the phase as the view holds it ("X", or the struct type) and its test
        # list.count is one C pass (with ==, as eq): the phases a piece lacks cost no filtering pass
        for e in compress(events, map(same, ph, repeat(phase["M"]))) if ph.count(phase["M"]) else ():
            if v.get(e, "name") == "thread_name":
                a = v.args([e])[0]
                self.thread_names[(_hashable(v.get(e, "pid")), _hashable(v.get(e, "tid")))] = str(v.arg([a], "name")[0])
        instants = list(compress(events, map(same, ph, repeat(phase["i"])))) if ph.count(phase["i"]) else []
        if instants:
            mem = list(compress(instants, map(eq, v.field(instants, "name", ""), repeat("[memory]"))))
            if mem:
                self._add_memory(mem, v)
        X = events if ph.count(phase["X"]) == len(ph) else list(compress(events, map(same, ph, repeat(phase["X"]))))
        del events, ph
        if X:
            self._add_complete(X, v)

    def _add_complete(self, X: list, v) -> None:
        args = v.args(X)
        names = v.field(X, "name", "")
        try:
            name_ids = intern(self.names, names)
        except TypeError:  # unhashable name: hostile or broken trace
            name_ids = intern(self.names, [n if isinstance(n, str) else str(n) for n in names])
        del names
        cats = v.field(X, "cat", "")
        try:
            cat_ids = intern(self.cats, cats)
        except TypeError:
            cat_ids = intern(self.cats, [c if isinstance(c, str) else str(c) for c in cats])
        del cats
        self._steps_as_annotations(name_ids, cat_ids)
        self._sync_waits(cat_ids, args, v)
        self._read_bytes(cat_ids, name_ids, args, v)
        thread_ids = self._thread_ids(X, v)
        self.parts.append({
            "ts": _floats(v.field(X, "ts", None)),
            "dur": _floats(v.field(X, "dur", math.nan)),
            "name": name_ids,
            "cat": cat_ids,
            "thread": thread_ids,
            "stream": _ints(v.arg(args, "stream")),
            "corr": _ints(v.arg(args, "correlation")),
            "ext": _ints(v.arg(args, "External id")),
        })
        if len(self.comm_name) < len(self.names):
            self.comm_name += [_is_comm_name(n) for n in list(self.names)[len(self.comm_name):]]
        comm = set(compress(range(len(X)), v.has(args, "Collective name")))
        a2a: set[int] = set()
        if any(self.comm_name):  # gloo / c10d spans: their Input Dims size the message
            gloo = np.flatnonzero(np.array(self.comm_name, bool)[name_ids]).tolist()
            comm.update(i for i, h in zip(gloo, v.has([args[i] for i in gloo], "Input Dims")) if h)
            a2a_id = self.names.get(GLOO_A2A)
            a2a = {i for i in gloo if name_ids[i] == a2a_id} if a2a_id is not None else set()
            comm |= a2a
        for i in sorted(comm):
            d = v.comm(args[i])
            if "Concrete Inputs" in d:  # kept for gloo all-to-alls' splits only
                d = _gloo_splits(d) if i in a2a else {k: x for k, x in d.items() if k != "Concrete Inputs"}
            self.comm_args[self.n + i] = d
        if len(self.gemm_name) < len(self.names):
            self.gemm_name += [n in GEMM_OPS or n in ATTENTION_OPS for n in list(self.names)[len(self.gemm_name):]]
        if any(self.gemm_name):  # GEMM ops: only their Input type, shared between equal ones
            for i in np.flatnonzero(np.array(self.gemm_name, bool)[name_ids]).tolist():
                if i not in comm and (g := v.gemm(args[i])) is not None:
                    self.comm_args[self.n + i] = g
        self.n += len(X)

    def _sync_waits(self, cat_ids: np.ndarray, args: list, v) -> None:
        """A `cuda_sync` event's wait target (`wait_on_stream`, `wait_on_cuda_event_record_corr_id`), kept in
        comm_args under those keys: what a stream-event wait or event synchronize waits on (HTA's sync edges)."""
        c = self.cats.get(SYNC_CAT)
        rows = np.flatnonzero(cat_ids == c).tolist() if c is not None else []
        if not rows:
            return
        sub = [args[i] for i in rows]
        for i, ws, wc in zip(rows, v.arg(sub, "wait_on_stream"), v.arg(sub, "wait_on_cuda_event_record_corr_id")):
            if type(ws) is int and type(wc) is int and wc >= 0 and abs(ws) < 2**62 and wc < 2**62:
                self.comm_args[self.n + i] = {"wait_on_stream": ws, "wait_on_cuda_event_record_corr_id": wc}

    def _read_bytes(self, cat_ids: np.ndarray, name_ids: np.ndarray, args: list, v) -> None:
        """A device-to-host copy's `bytes`, kept in comm_args under that key: the size of a host read
        (metrics/rank/held_reads.py). Device-to-host copies only: a step holds few of them."""
        c = self.cats.get(MEMCPY_CAT)
        rows = np.flatnonzero(cat_ids == c).tolist() if c is not None else []
        if not rows:
            return
        if len(self.dtoh_name) < len(self.names):  # per name id, grown as names come (one regex per name)
            self.dtoh_name += [DTOH.search(str(n)[:200]) is not None for n in list(self.names)[len(self.dtoh_name):]]
        dtoh = self.dtoh_name
        rows = [i for i in rows if dtoh[name_ids[i]]]
        if not rows:
            return
        for i, nb in zip(rows, v.arg([args[i] for i in rows], "bytes")):
            if type(nb) is int and 0 <= nb < 2**62:
                self.comm_args[self.n + i] = {"bytes": nb}

    def _steps_as_annotations(self, name_ids: np.ndarray, cat_ids: np.ndarray) -> None:
        """ProfilerStep#N spans under an op category (`Operator`, `cpu_op`) get `user_annotation`, in place."""
        if len(self.step_name) < len(self.names):
            new = [isinstance(n, str) and len(n) < 40 and STEP_NAME.match(n) is not None
                   for n in list(self.names)[len(self.step_name):]]
            self.step_name += new
            self.has_step = self.has_step or any(new)
        if not self.has_step:
            return
        rows = np.flatnonzero(np.array(self.step_name, bool)[name_ids])
        op_cats = [self.cats[c] for c in STEP_OP_CATS if c in self.cats]
        rows = rows[np.isin(cat_ids[rows], op_cats)] if op_cats else rows[:0]
        if len(rows):
            cat_ids[rows] = intern(self.cats, [STEP_CAT])[0]

    def _thread_ids(self, rows: list, v) -> np.ndarray:
        pids, tids = v.field(rows, "pid", None), v.field(rows, "tid", None)
        try:
            p, t = np.array(pids), np.array(tids)
        except (ValueError, OverflowError):  # ragged lists: the per-key path below
            p = t = np.zeros(0)
        if p.dtype.kind == t.dtype.kind == "i" and p.ndim == t.ndim == 1 and len(p) and p.min() >= 0 and t.min() >= 0 \
                and p.max() < 2**31 and t.max() < 2**32:  # the usual int pid/tid: distinct pairs found by numpy
            u, first, inv = np.unique((p << 32) | t, return_index=True, return_inverse=True)
            o = np.argsort(first)  # ids in order of first appearance, as the per-key path gives them
            ids = np.empty(len(u), np.int32)
            ids[o] = intern(self.threads, [(k >> 32, k & 0xFFFFFFFF) for k in u[o].tolist()])
            return ids[inv.reshape(-1)]
        keys = list(zip(pids, tids))
        try:
            return intern(self.threads, keys)
        except TypeError:  # unhashable pid/tid
            return intern(self.threads, [(_hashable(p), _hashable(t)) for p, t in keys])

    def _add_memory(self, mem: list, v) -> None:
        args = v.args(mem)
        self.mem_parts.append({
            "ts": _floats(v.field(mem, "ts", None)),
            "device_type": _ints(v.arg(args, "Device Type")),
            "device_id": _ints(v.arg(args, "Device Id")),
            "allocated": _ints(v.arg(args, "Total Allocated")),
            "reserved": _ints(v.arg(args, "Total Reserved")),
            "bytes": _ints(v.arg(args, "Bytes")),
            "thread": self._thread_ids(mem, v),
        })


def concat(parts: list[dict], key: str, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return np.concatenate([p.pop(key) for p in parts]).astype(dtype, copy=False)
