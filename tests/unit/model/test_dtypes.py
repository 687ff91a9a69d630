"""One dtype table: every spelling either former table knew (collective/roofline bytes in overlap.py, GEMM
host-op precision in precision.py) resolves as it did, and now in both columns."""

import pytest

from llmdiag.diagnose.model.dtypes import element_bytes, lookup, precision

# the two tables as they stood before they were merged: the independent answer
OLD_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "short int": 2, "int16": 2,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "long int": 8, "c10::complex<float>": 8,
    "byte": 1, "char": 1, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "signed char": 1, "unsigned char": 1, "c10::half": 2, "c10::bfloat16": 2,
}
OLD_PRECISION = {"float": "fp32", "double": "fp64", "c10::bfloat16": "bf16", "c10::half": "fp16",
                 "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8",
                 "c10::float8_e5m2fnuz": "fp8", "c10::float8_e8m0fnu": "fp8", "c10::float4_e2m1fn_x2": "fp4",
                 "signed char": "int8", "char": "int8"}


@pytest.mark.parametrize("name,want", sorted(OLD_BYTES.items()))
def test_bytes_as_before(name, want):
    assert element_bytes(name) == want


@pytest.mark.parametrize("name,want", sorted(OLD_PRECISION.items()))
def test_precision_as_before(name, want):
    assert precision(name) == want


@pytest.mark.parametrize("name", sorted(set(OLD_BYTES) | set(OLD_PRECISION)))
def test_every_spelling_in_both_columns(name):
    """A name one table knew the other now knows: the c10:: and bare spellings, Kineto's capitalised ones
    (`c10::Float8_e4m3fn`, NCCL's `BFloat16`) and torch's (`torch.float8_e4m3fn`) are one type."""
    d = lookup(name)
    assert d is not None
    bare = name.removeprefix("c10::")
    for spelling in (bare, "c10::" + bare, "torch." + bare, bare.upper(), bare.title()):
        assert lookup(spelling) == d, spelling


@pytest.mark.parametrize("name,nbytes,prec", [("c10::Float8_e4m3fn", 1, "fp8"), ("float8_e4m3fn", 1, "fp8"),
                                              ("BFloat16", 2, "bf16"), ("torch.float16", 2, "fp16"),
                                              ("long int", 8, None), ("c10::Float4_e2m1fn_x2", 1, "fp4")])
def test_known_spellings(name, nbytes, prec):
    assert (element_bytes(name), precision(name)) == (nbytes, prec)


@pytest.mark.parametrize("name", ["", "Scalar", "TensorList", "c10::", "float8"])
def test_unknown_stays_unknown(name):
    assert lookup(name) is None and element_bytes(name) is None and precision(name) is None
