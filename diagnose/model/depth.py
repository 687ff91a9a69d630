"""How deep a JSON value nests, bounded the same way at every edge.

The JSON parsers accept ~1,000 levels (orjson reads up to 1,024), but the writers did not: orjson writes at
most 254 and the fallbacks (the stdlib encoder, the summary codec) recurse in Python, so a 1,000-level
`args` value or `distributedInfo` in a trace, or a key nested so in a manifest or a summary, was a
RecursionError traceback at write time after the analysis accepted it. Inputs that llmdiag keeps and writes
back (a manifest, a summary) are refused above MAX_DEPTH, in one line; values that only pass through (a
trace's own events into `--timeline`) are cut there, with a marker string in place of the deeper part.
"""

from __future__ import annotations

import orjson

MAX_DEPTH = 200  # levels of arrays/objects: far above any real manifest, summary or trace arg (< 20)
CUT = f"(nested deeper than {MAX_DEPTH} levels: cut by llmdiag)"


def too_deep(value, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests more than `limit` levels: an explicit stack, so the check itself never recurses
    (for small inputs such as a manifest; a whole summary goes through `fits_writer`)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if type(v) is dict:
            v = list(v.values())
        elif type(v) is not list:
            continue
        if d >= limit:
            return True
        stack.extend((x, d + 1) for x in v if type(x) in (dict, list))
    return False


def fits_writer(value) -> bool:
    """Whether orjson can write `value` as far as nesting goes (its limit is 254 levels); C speed, for whole
    summaries of 10^6 objects."""
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError as e:
        return "ecursion" not in str(e)
    return True


def clip(value, limit: int = MAX_DEPTH, depth: int = 0):
    """`value` with every array or object below `limit` levels replaced by CUT (recursion bounded by limit)."""
    if type(value) is dict:
        return CUT if depth >= limit else {k: clip(v, limit, depth + 1) for k, v in value.items()}
    if type(value) is list:
        return CUT if depth >= limit else [clip(v, limit, depth + 1) for v in value]
    return value
