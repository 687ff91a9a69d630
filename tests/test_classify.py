"""Kernel semantics: what each device event is (host op first, family table next, name heuristics last)."""

from __future__ import annotations

import pytest

from diagnose.io import fastjson
from diagnose.io.loader import load_trace
from tests.builder import TraceBuilder

A2A_IN = [3, 1, 4, 1]
A2A_OUT = [2, 7, 1, 8]


def _a2a_trace(tmp_path, name="a2a.json"):
    b = TraceBuilder(rank=0, world_size=4)
    b.step(1, 0, 1000)
    b.kernel("ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 100, 300, stream=20,
             args={"Collective name": "all_to_all", "In msg nelems": 9, "Out msg nelems": 18, "dtype": "BFloat16",
                   "Group size": 4, "In split size": A2A_IN, "Out split size": A2A_OUT,
                   "Process Group Name": "3", "Process Group Description": "ep"})
    return b.write(tmp_path / name)


@pytest.mark.parametrize("parser", ["msgspec", "orjson"])
def test_all_to_all_split_sizes_kept(tmp_path, monkeypatch, parser):
    """Engineer D's MoE analysis reads the per-peer split sizes of all_to_all from the loader."""
    if parser == "orjson":
        monkeypatch.setattr(fastjson, "_DECODER", None)
    elif fastjson._DECODER is None:
        pytest.skip("msgspec not installed")
    t = load_trace(_a2a_trace(tmp_path))
    (args,) = [a for a in t.comm_args.values() if a.get("Collective name") == "all_to_all"]
    assert args["In split size"] == A2A_IN
    assert args["Out split size"] == A2A_OUT
