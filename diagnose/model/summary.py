"""Summary files and manifests on disk: read, checked, slimmed. JSON exists only at this edge.

`Analysis.from_dict` / `Analysis.to_dict` convert; this module adds the files around them.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import orjson

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.depth import fits_writer
from llmdiag.diagnose.model.files import SUMMARY_BUDGET, read_bounded
from llmdiag.diagnose.model.step_cap import cap_steps
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.codec import JSON_OPTIONS, Invalid, as_dict, build, no_gc, to_json_dict
from llmdiag.diagnose.model.pack import PACK_ABOVE_RANKS, pack, should_pack

if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest

_WHAT = "a run folder, a trace folder, a trace file, or a summary JSON from `llmdiag analyze --json`"


def manifest_from_dict(data: dict, where: str) -> Manifest:
    from llmdiag.diagnose.model.manifest import Manifest  # a trace folder has none: not imported for it

    try:
        man = build(Manifest, data)
    except Invalid as e:
        raise LlmdiagError(f"invalid manifest: {e}", where) from None
    if bad := man.problems():
        raise LlmdiagError(f"invalid manifest: {bad[0]}", where, f"{len(bad)} such values" if len(bad) > 1 else None)
    return man


def slim(a: Analysis) -> dict:
    """The summary without its bulky timelines (memory curves, pipeline actions): what a baseline needs."""
    d = a.to_dict()
    for r in d["ranks"]:
        for m in r["memory"]:
            m["timeline"] = []
        r["pipeline_actions"] = []
    return d


def summary_bytes(summary: dict) -> bytes:
    """The summary file's bytes: indented schema 2 for a job people read by eye, packed schema 3 (no
    indentation, columns, kernel names once: model/pack.py) above PACK_ABOVE_RANKS ranks, so that a
    16,384-rank summary stays well under 64 MB."""
    opt = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    with no_gc():
        packed = pack(summary) if should_pack(summary) else None
    if packed is not None:
        return orjson.dumps(packed, option=opt)
    return orjson.dumps(summary, option=opt | orjson.OPT_INDENT_2)


def analysis_bytes(a: Analysis) -> tuple[bytes, Analysis]:
    """The summary file of `a` (the bytes `summary_bytes(a.to_dict())` gives), and the analysis it holds: `a`
    itself, or, where a string cannot be written as UTF-8 (lone surrogates from non-UTF-8 file names) or an
    int exceeds 64 bits, the mended copy read back, so that the report shows what the summary says.

    Written straight from the dataclasses (model/pack_write.py above PACK_ABOVE_RANKS ranks, orjson's own
    walk below), without the intermediate tree of dicts; orjson refuses what needs mending, and only then
    is the summary built the general way (codec.to_json_dict mends it)."""
    if len(a.ranks) <= PACK_ABOVE_RANKS:
        try:
            return orjson.dumps(a, default=as_dict, option=JSON_OPTIONS | orjson.OPT_INDENT_2), a
        except TypeError:  # orjson refused a value (JSONEncodeError is a TypeError): the general path writes it
            pass
    else:
        from llmdiag.diagnose.model.pack_write import Fallback, pack_analysis  # packed: many ranks only

        try:
            with no_gc():
                packed = pack_analysis(a)
                return orjson.dumps(packed, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS), a
        except (TypeError, Fallback):  # orjson refused a value, or a shape only the general path writes exactly
            pass
    summary, mended = to_json_dict(a)
    return summary_bytes(summary), (Analysis.from_dict(summary) if mended else a)


def settle() -> None:
    """The objects alive now (a summary just read: ~1.5 * 10^6 at 16,384 ranks, built with the collector off)
    moved to the oldest generation without a collector pass, and without counting toward the next full
    collection: otherwise the first allocation after would scan them all as young objects, and a full collection
    soon after would scan them again (~40 % of `check` at 16,384 ranks). `gc.freeze` then `gc.unfreeze` does
    that; they stay collectable. Left alone inside a frozen block (whose freeze unfreeze would undo)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def read_summary(path: str) -> Analysis:
    """A summary written by `analyze --json` (plain or gzipped), read within a byte budget (a regular file
    only: a FIFO or /dev/zero is refused in one line)."""
    raw = read_bounded(path, SUMMARY_BUDGET, "summary")
    with no_gc():  # a 16k-rank summary is ~10^6 acyclic objects: no collector passes over them while built
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise LlmdiagError(f"not valid JSON: {e}", path, f"expected {_WHAT}") from None
        if not fits_writer(data):  # read back, it is written again (diff, the report): never a RecursionError
            raise LlmdiagError("invalid summary: it nests deeper than JSON writers go (254 levels)", path,
                               f"expected {_WHAT}")
        a = Analysis.from_dict(data, path)
        del data
        settle()
    cap_steps(a)  # a summary of 10^6 steps (from elsewhere) renders the rows any analysis keeps
    return a
