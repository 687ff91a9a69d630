"""Collective args are trace strings' neighbours: numbers a writer can make anything. `In msg nelems` of 2^63
or more (orjson reads it as a Python int) overflowed the skew analysis' int64 columns and dropped the rank."""

from __future__ import annotations

import orjson
import pytest

from tests.adversarial.conftest import attack, check
from tests.gen.builder import gpu_rank


@pytest.mark.parametrize("value", [2**63, 2**64 - 1, -(2**63) - 1, [2**63, 2**63]])
def test_message_size_beyond_int64_keeps_the_rank(tmp_path, value):
    run = tmp_path / "run"
    for r in (0, 1):
        b = gpu_rank(r, world_size=2)
        for e in b.events:
            args = e.get("args")
            if r == 1 and isinstance(args, dict) and "In msg nelems" in args:
                if isinstance(value, list):
                    args["In split size"] = value
                else:
                    args["In msg nelems"] = value
        b.write(run / f"rank{r}.json")
    res = attack("analyze", run, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path)
    check(res, 0, one_line=False)
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert sorted(x["rank"] for x in s["ranks"]) == [0, 1] and not s["ranks_missing"]
    assert not [i for i in s["issues"] if i["severity"] == "error"]
