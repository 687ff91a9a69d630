"""Element types as traces spell them: bytes per element and the precision class a GEMM on them runs at.

One table for every reader (collective message sizes, roofline bytes, GEMM precision), so a type one reader
knows the other knows too. Names arrive in several spellings: Kineto's `Input type` (`c10::BFloat16`,
`long int`, `signed char`), NCCL records' `dtype` (ScalarType names: `BFloat16`, `Char`, `Float8_e4m3fn`),
torch's (`torch.bfloat16`, `float8_e4m3fn`); `lookup` folds case and the `c10::`/`torch.` prefixes.
Precision is None for types no GEMM precision class names (integers wider than 8 bits, bool, complex).
"""

from __future__ import annotations

from typing import NamedTuple


class DType(NamedTuple):
    bytes: int
    precision: str | None


_F64, _F32, _BF16, _F16 = DType(8, "fp64"), DType(4, "fp32"), DType(2, "bf16"), DType(2, "fp16")
_FP8, _I8 = DType(1, "fp8"), DType(1, "int8")

_TABLE: dict[str, DType] = {
    "double": _F64, "float64": _F64,
    "float": _F32, "float32": _F32,
    "bfloat16": _BF16,
    "half": _F16, "float16": _F16,
    "float8_e4m3fn": _FP8, "float8_e5m2": _FP8, "float8_e4m3fnuz": _FP8, "float8_e5m2fnuz": _FP8,
    "float8_e8m0fnu": _FP8,
    "float4_e2m1fn_x2": DType(1, "fp4"),  # two fp4 values packed in one byte: torch's element is the pair
    "signed char": _I8, "char": _I8, "int8": _I8,
    "byte": DType(1, None), "unsigned char": DType(1, None), "uint8": DType(1, None), "bool": DType(1, None),
    "short": DType(2, None), "short int": DType(2, None), "int16": DType(2, None),
    "int": DType(4, None), "int32": DType(4, None), "uint32": DType(4, None),
    "long": DType(8, None), "long int": DType(8, None), "int64": DType(8, None),
    "complex<float>": DType(8, None),
}
_PREFIXES = ("c10::", "torch.", "at::")


def lookup(name: object) -> DType | None:
    """The type a trace's spelling names, or None when it names no known element type."""
    key = str(name).strip().lower()
    for p in _PREFIXES:
        key = key.removeprefix(p)
    return _TABLE.get(key)


def element_bytes(name: object) -> int | None:
    d = lookup(name)
    return None if d is None else d.bytes


def precision(name: object) -> str | None:
    d = lookup(name)
    return None if d is None else d.precision
