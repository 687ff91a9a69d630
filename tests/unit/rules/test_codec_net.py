"""The codec rule's pieces: wire bits from the range's precision, forward op <-> gradient node names, and the
byte-bound pairing of an exchange with its backward (answers written out by hand)."""

from __future__ import annotations

from types import SimpleNamespace

from llmdiag.diagnose.metrics.rank.comm_codec import _base, _paired
from llmdiag.diagnose.rules.codecs import wire_bits


def test_wire_bits_one_known_precision_only():
    assert wire_bits("fp16") == 16 and wire_bits("bf16") == 16 and wire_bits("fp8") == 8 and wire_bits("int8") == 8
    assert wire_bits("fp16, bf16") == 16  # both 16-bit: one ratio
    assert wire_bits("fp16, fp8") is None  # two ratios: no single estimate
    assert wire_bits("mx4") is None and wire_bits("") is None


def test_forward_op_and_its_gradient_node_compare():
    assert _base("aten::_to_copy") == _base("ToCopyBackward0") == "tocopy"
    assert _base("aten::clamp") == _base("ClampBackward1") == "clamp"
    assert _base("aten::mul") == _base("MulBackward0") != _base("aten::mm")
    assert _base("_AlltoAllSingleBackward") == "alltoallsingle"


def test_exchange_and_its_backward_count_at_the_shorter_of_the_two():
    w = [SimpleNamespace(host_start=0, host_end=100), SimpleNamespace(host_start=100, host_end=200)]
    # window 1: forwards 6 then 2 (ns), backwards in time order 9 (of the 2) then 5 (of the 6): 2·min(6,5) + 2·min(2,9)
    fwd = [(10, 6), (20, 2), (110, 7)]
    bwd = [(50, 9), (60, 5)]  # window 2 has a forward without its backward: each at its own time
    assert _paired(fwd, bwd, w) == 2 * 5 + 2 * 2 + 7
