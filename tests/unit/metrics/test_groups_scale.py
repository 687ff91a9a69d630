"""Per-rank group resolution does not grow with the world (issue #27's scale ladder).

PyTorch writes every process group's full rank list into every rank's `pg_config`: the default group lists
all W ranks and a DeviceMesh dp group W / tp of them. A per-rank step that walks those lists in Python (a
type check per member, `ranges` over the run per collective) made each rank of a 16,384-rank job cost
~1.9x what a rank of a 1,024-rank job does. Pinned here without timing: the Python calls a rank's whole
analysis makes are counted, and must be the same at 1,024 and at 16,384 ranks; the group keys are checked
against the text the test writes itself.
"""

from __future__ import annotations

import ast
import random
import sys
import zlib

import pytest

from llmdiag.diagnose.metrics.rank import layout
from llmdiag.diagnose.metrics.rank.groups import LONG, Group, parse_ranks
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.model.format import ranges
from tests.gen.builder import TraceBuilder

TP = 8


def _kineto_cut(ranks: list[int]) -> str:
    """`Process Group Ranks` as Kineto writes it: the first 30, then "..."."""
    return "[" + ", ".join(map(str, ranks[:30])) + (", ...]" if len(ranks) > 30 else "]")


def _rank0(world: int) -> TraceBuilder:
    """Rank 0 of a dp x tp(8) DeviceMesh job: one collective per group per step, on its own stream."""
    groups = [("0", "default_pg", list(range(world))), ("1", "mesh_dp", list(range(0, world, TP))),
              ("2", "mesh_tp", list(range(TP)))]
    b = TraceBuilder(rank=0, world_size=world, pg_config=[
        {"pg_name": n, "pg_desc": d, "backend_config": "cuda:nccl", "pg_size": len(r), "ranks": r} for n, d, r in groups])
    for k in range(3):
        k0 = k * 1000
        b.step(k + 1, k0, k0 + 1000)
        b.kernel("void gemm_kernel<float>()", k0 + 100, 500, stream=7, launch_at=k0 + 10)
        for j, (name, desc, ranks) in enumerate(groups):
            b.nccl("allreduce", k0 + 600 + 100 * j, 80, stream=20 + j, launch_at=k0 + 11 + j, nelems=1 << 20,
                   group_size=len(ranks), pg_name=name, pg_desc=desc, pg_ranks=_kineto_cut(ranks))  # type: ignore[arg-type]
    return b


def _python_calls(fn) -> int:
    """Python function calls (generator resumptions included) made while fn runs: C work is not counted."""
    n = 0

    def count(frame, event, arg):
        nonlocal n
        n += event == "call"

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def test_a_ranks_analysis_makes_as_many_python_calls_at_1024_as_at_16384_ranks(tmp_path):
    paths = {w: _rank0(w).write(tmp_path / f"w{w}" / "rank0.json") for w in (1024, 16384)}
    for p in paths.values():
        run_job(RankJob(p))  # imports and first-call caches out of the count
    calls, keys = {}, {}
    for w, p in paths.items():
        out: list = []
        calls[w] = _python_calls(lambda: out.append(run_job(RankJob(p))))
        assert out[0].error is None, out[0].error
        keys[w] = {pg for pg, _kind in out[0].collectives.keys}
    # the same work at both sizes, give or take a call a data-dependent branch takes (the old code: 5,679 vs 40,239)
    assert abs(calls[16384] - calls[1024]) <= 0.01 * calls[1024], calls
    for w in paths:  # the keys the cross-rank matching sees: written here from the layout, not by the code
        want = {f"default_pg[0-{w - 1}]", f"mesh_dp[0-{w - TP} step {TP}]", "mesh_tp[0, 1, 2, 3, 4, 5, 6, 7]"}
        assert keys[w] == want, keys[w]


def test_world_sized_groups_are_held_as_ranges():
    world = 16384
    dp = parse_ranks(list(range(3, world, TP)))
    assert isinstance(dp, range) and dp == range(3, world, TP) and Group("mesh_dp", dp).size == world // TP
    assert isinstance(parse_ranks(list(range(world))), range) and 16383 in parse_ranks(list(range(world)))  # type: ignore[operator]
    assert parse_ranks(list(range(TP))) == tuple(range(TP))  # short lists stay as written


def _old_parse(v):
    """The definition before the fast path: every member an int (not a bool) >= 0, in a list."""
    if isinstance(v, list) and v and all(type(x) is int and x >= 0 for x in v):
        return tuple(v)
    return None


def _old_key(label: str, ranks) -> str:
    if not ranks:
        return label
    if len(ranks) <= LONG:
        return f"{label}[{', '.join(map(str, ranks))}]"
    r = sorted(ranks)
    text = ranges(r)
    if text.endswith("more)"):
        text += f" #{zlib.crc32(','.join(map(str, r)).encode()):08x}"
    return f"{label}[{text}]"


def _lists(rng: random.Random):
    for n in (1, 2, 3, 29, 30, 31, 32, 100, 2048):
        for step in (1, 2, 8):
            start = rng.randrange(0, 5)
            base = list(range(start, start + n * step, step))
            yield base
            yield base[::-1]  # descending: not a run as written, one once sorted
            if n > 2:
                yield base[:-1] + [base[-1] + 1]  # the last member off the stride
                yield [base[0] - 10] + base[1:]  # a negative first member
                yield base[:n // 2] + [True] + base[n // 2 + 1:]  # a bool where an int was
                yield base[:n // 2] + [float(base[n // 2])] + base[n // 2 + 1:]  # a float equal to the int
                yield base[:n // 2] + [base[n // 2]] + base[n // 2:]  # a duplicate
                yield rng.sample(range(4 * n), n)


def test_parse_and_key_agree_with_the_member_by_member_definition():
    for v in _lists(random.Random(27)):
        got, want = parse_ranks(v), _old_parse(v)
        assert (got is None) == (want is None), v[:40]
        if want is not None:
            assert tuple(got) == want and Group("g", got).size == len(want)  # type: ignore[arg-type]
            assert Group("g", got).key == _old_key("g", want) == Group("g", want).key, v[:40]


@pytest.mark.parametrize("text", [repr([{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4096,
                                         "ranks": list(range(4096))}, {"pg_name": "1", "pg_desc": "pp", "pg_size": 2,
                                                                       "ranks": [0, 2048]}]), "[{'pg_name': "])
def test_a_pg_config_text_is_parsed_once_per_rank(monkeypatch, text):
    """Older traces write pg_config as a Python repr (megabytes at 16k ranks): a rank reads it three times."""
    parses = []
    real = layout._groups_of_text
    monkeypatch.setattr(layout, "_groups_of_text", lambda raw: parses.append(raw) or real(raw))
    monkeypatch.setattr(layout, "_LAST_TEXT", ["", []])
    dist = {"pg_config": text}
    cfgs = [layout.pg_config(dist), layout.slim_pg_config(dist), layout.pg_sizes(dist)]
    try:
        want = [g for g in ast.literal_eval(text) if isinstance(g, dict)]
    except SyntaxError:
        want = []
    assert len(parses) == 1 and cfgs[0] == want
    assert cfgs[2] == {k: v for g in want for k, v in ((g["pg_name"], g["pg_size"]), (g["pg_desc"], g["pg_size"]))}
    assert [g.get("ranks") for g in cfgs[1]] == [None, [0, 2048]][:len(want)]  # pipeline groups keep their ranks
    assert layout.pg_config({"pg_config": text + " "}) == want and len(parses) == 2  # another text, parsed anew
