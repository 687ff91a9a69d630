"""Numeric precision of GEMM kernels, from evidence only.

Evidence, in order: (1) the `Input type` of the GEMM host op (aten::mm, addmm, bmm, _scaled_mm, ...)
that launched the kernel (recorded with `record_shapes`); a float input is fp32 unless the kernel's
name says tf32; (2) the kernel's name, read by a parser that knows which token is the input type, so the
accumulator and epilogue tokens never decide (`sm90_xmma_gemm_bf16bf16_bf16f32_f32_...` is bf16: its
`_f32_` is the accumulator and epilogue). Names known: cuBLAS/cuBLASLt (`<arch>_xmma_gemm_<A><B>_<C><acc>_
<epi>_...`, `ampere_bf16_s16816gemm_...`, `volta_h884gemm_...`, `*_sgemm_*`, gemv/gemmSN templates),
CUTLASS 2.x/3.x (`cutlass_80_tensorop_bf16_s16816gemm_...`, `cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_...`,
`cutlass::half_t` template arguments), hipBLASLt/Tensile (`Cijk_Alik_Bljk_BBS_BH_...`: the data-type
token), TRT-LLM/FlashInfer `bmm_<A>_<B>_<out>` (MXFP4 `E2m1`, MXFP6, FP8 `E4m3`/`E5m2`). nvjet and Triton
names carry no input type: their precision comes from the host op or stays unknown. Unknown stays
unknown: never guessed.

Convolutions whose multiply-accumulate tensor cores could do are counted with the GEMMs (conv_names.py): cuDNN's
`volta_scudnn_*` (fp32), `dgrad_engine<float>`, `wgrad_alg0_engine<float>`, ...; they are what an fp32 conv net
spends its device time in. "GEMM kernels" below means both; conv_time_by_precision gives the convolutions' part.
"""

from __future__ import annotations

import re
import weakref

import numpy as np

from llmdiag.diagnose.io.columns import GEMM_OPS
from llmdiag.diagnose.io.trace import COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.conv_names import conv_precision, is_layout_transform
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.metrics.rank.name_memo import per_name
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.model.dtypes import precision as dtype_precision
from llmdiag.diagnose.model.lazy_re import lazy_compile

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "mxfp6", "mxfp4", "fp4", "int8")
_HEAD = 1024  # characters of a kernel name read: the type tokens sit in its head
_GEMM_TOKENS = ("gemm", "gemv", "nvjet", "cijk_", "bmm_", "matmul", "triton_tem_fused_mm", "triton_tem_fused_addmm",
                "triton_tem_fused_bmm")

# type tokens of kernel names -> precision (lower case)
_TOKENS = {"bf16": "bf16", "bfloat16": "bf16", "f16": "fp16", "fp16": "fp16", "half": "fp16", "tf32": "tf32",
           "f32": "fp32", "fp32": "fp32", "f64": "fp64", "fp64": "fp64", "e4m3": "fp8", "e5m2": "fp8",
           "fp8": "fp8", "i8": "int8", "int8": "int8", "s8": "int8"}
_ARCH_GEMM = re.compile(r"(?:^|_)(bf16|fp16|f16|tf32|i8|int8)_([hsi])\d{3,6}gemm|(?:^|_)([hsi])(\d{3,6})gemm")
_CUTLASS3 = re.compile(r"gemm_(bf16|f16|tf32|f32|e4m3|e5m2|f64|s8|i8)_(bf16|f16|tf32|f32|e4m3|e5m2|f64|s8|i8)")
_CUTLASS_T = lazy_compile(r"cutlass::(bfloat16_t|half_t|tfloat32_t|float_e4m3_t|float_e5m2_t|float_e2m1_t|"
                        r"float_e2m3_t|float_e3m2_t)")
_CUTLASS_T_MAP = {"bfloat16_t": "bf16", "half_t": "fp16", "tfloat32_t": "tf32", "float_e4m3_t": "fp8",
                  "float_e5m2_t": "fp8", "float_e2m1_t": "mxfp4", "float_e2m3_t": "mxfp6", "float_e3m2_t": "mxfp6"}
_TEMPLATE_FIRST_FLOAT = lazy_compile(r"<(?:\s*(?:int|long|unsigned|bool|\d+)\s*,)*\s*(float|double|__half|half|"
                                   r"__nv_bfloat16|c10::bfloat16|c10::half)\s*[,>]")
_CUBLAS_TEMPLATES = ("gemv2t_kernel", "gemv2n_kernel", "gemvnsp_kernel", "gemmk1_kernel", "gemmsn_", "gemvx",
                     "cublas")  # cuBLAS's non-tensor-core kernels, typed by their first template argument
_TENSILE = {"S": "fp32", "SB": "fp32", "D": "fp64", "DB": "fp64", "H": "fp16", "HB": "fp16"}


@per_name
def is_gemm_name(name: str) -> bool:
    low = name[:_HEAD].lower().replace("fbgemm", "")  # FBGEMM-GPU's embedding/permute kernels are no GEMMs
    return any(tok in low for tok in _GEMM_TOKENS)


def _xmma_precision(low: str) -> str | None:
    """cuBLAS/cuDNN `sm80_xmma_<op>_gemm[_indexed]_<A><B>_<C><acc>_<epi>_...`: A and B are the inputs."""
    j = low.find("gemm_", low.find("xmma_"))
    rest = [tok for tok in low[j + 5:].split("_", 4)[:4] if tok != "indexed"]
    if len(rest) < 2:
        return None
    if "tf32" in rest[0] or "tf32" in rest[1]:
        return "tf32"
    for tok in ("bf16", "f16", "f32", "f64", "e4m3", "e5m2", "i8", "s8"):
        if rest[0].startswith(tok):
            return _TOKENS[tok]
    return None


def host_precision(input_type) -> str | None:
    """Precision of a GEMM host op from its `Input type` list (the first tensor's)."""
    if not isinstance(input_type, list):
        return None
    for v in input_type[:2]:
        if isinstance(v, str) and v:
            return dtype_precision(v)
    return None


def _bmm_precision(low: str) -> str | None:
    """TRT-LLM / FlashInfer `bmm_<A>_<B>_<out>_t...`: the lowest-precision input of A and B."""
    toks = low[4:].split("_")[:2]
    found = []
    for tok in toks:
        if "e2m1" in tok:
            found.append("mxfp4" if "mx" in tok else "fp4")
        elif "e2m3" in tok or "e3m2" in tok:
            found.append("mxfp6")
        elif "e4m3" in tok or "e5m2" in tok:
            found.append("fp8")
        elif tok in ("bfloat16", "bf16"):
            found.append("bf16")
        elif tok in ("fp16", "half"):
            found.append("fp16")
        elif tok in ("fp32", "float32"):
            found.append("fp32")
    order = ("mxfp4", "fp4", "mxfp6", "fp8", "fp16", "bf16", "fp32")
    return min(found, key=order.index) if found else None


@per_name
def name_precision(name: str) -> str | None:
    """Input precision a GEMM kernel's name states, or None (not a GEMM, or the name does not say)."""
    head = name[:_HEAD]
    low = head.lower()
    if not any(tok in low for tok in _GEMM_TOKENS):
        return None
    if head.startswith("Cijk_"):  # Tensile/hipBLASLt: Cijk_<A>_<B>_<types>_...
        parts = head.split("_")
        if len(parts) > 3:
            dt = parts[3]
            if "_XF32" in head or dt.startswith("X"):
                return "tf32"
            if dt.startswith(("BBS", "BSS", "BB")):
                return "bf16"
            if dt.startswith(("HHS", "HSS", "HH")):
                return "fp16"
            if dt.startswith(("F8", "B8")):
                return "fp8"
            if dt.startswith(("I8", "4xi8")):
                return "int8"
            return _TENSILE.get(dt)
        return None
    if low.startswith("bmm_"):
        return _bmm_precision(low)
    if "xmma_" in low and "gemm_" in low:
        return _xmma_precision(low)
    if low.startswith("igemm_"):  # MIOpen implicit-GEMM convolutions: igemm_<dir>_gtc..._<layout>_<type>_...
        return next((_TOKENS[tok] for tok in low.split("_")[:8] if tok in ("fp32", "fp16", "bf16", "int8")), None)
    if "tf32" in low.split("gemm")[0]:
        return "tf32"
    if (m := _CUTLASS3.search(low)) is not None:
        a, b = _TOKENS[m.group(1)], _TOKENS[m.group(2)]
        return a if a == b else min((a, b), key=PRECISIONS.index, default=None)
    if (m := _ARCH_GEMM.search(low)) is not None:
        if m.group(1):
            return _TOKENS[m.group(1)]
        acc = m.group(3)
        if acc == "h":
            return "fp16"
        if acc == "i":
            return "int8"
        if "tensorop" in low:  # CUTLASS tensor-op with fp32 operands and no type token: tf32 on the tensor cores
            return "tf32"
        return None
    if "sgemm" in low:
        return "fp32"
    if "dgemm" in low:
        return "fp64"
    if "hgemm" in low:
        return "fp16"
    if (m := _CUTLASS_T.search(head)) is not None:
        return _CUTLASS_T_MAP[m.group(1)]
    if low.removeprefix("void ").startswith(_CUBLAS_TEMPLATES) and (m := _TEMPLATE_FIRST_FLOAT.search(low)) is not None:
        t = m.group(1)
        return {"float": "fp32", "double": "fp64", "__half": "fp16", "half": "fp16", "c10::half": "fp16"}.get(t, "bf16")
    return None


def gemm_time_by_precision(t: RankTrace, compute: np.ndarray) -> dict[str, int]:
    """GEMM and convolution kernel time (ns) in the mask `compute`, by precision ("unknown" where no evidence
    says)."""
    idx, code, labels = _gemm_codes(t, compute)
    if not len(idx):
        return {}
    tot = np.bincount(code, weights=t.dur[idx], minlength=len(labels))
    return {labels[k]: int(v) for k, v in enumerate(tot.tolist()) if v > 0}


def conv_time_by_precision(t: RankTrace, compute: np.ndarray) -> dict[str, int]:
    """The convolutions' part of gemm_time_by_precision (ns by precision): kernels counted by their convolution
    name (conv_names.py), not by a GEMM name."""
    idx = np.flatnonzero(compute & (t.kind == COMPUTE) & (t.stream >= 0))
    if not len(idx):
        return {}
    conv_ids = t.name_ids(_conv_only, compute)
    if not len(conv_ids):
        return {}
    labels = list(PRECISIONS) + ["unknown"]
    code_of_name = np.zeros(len(t.names), np.int8)
    for i in conv_ids.tolist():
        code_of_name[i] = labels.index(conv_precision(t.names[i]) or "unknown")
    idx = idx[np.isin(t.name[idx], conv_ids)]
    tot = np.bincount(code_of_name[t.name[idx]], weights=t.dur[idx], minlength=len(labels))
    return {labels[k]: int(v) for k, v in enumerate(tot.tolist()) if v > 0}


def layout_transform_ns(t: RankTrace, compute: np.ndarray) -> int:
    """Time (ns) in the mask `compute` in cuDNN's NCHW <-> NHWC transform kernels (conv_names.is_layout_transform)."""
    idx = np.flatnonzero(compute & (t.kind == COMPUTE) & (t.stream >= 0))
    ids = t.name_ids(is_layout_transform, compute) if len(idx) else np.zeros(0, np.int32)
    return int(t.dur[idx[np.isin(t.name[idx], ids)]].sum()) if len(ids) else 0


def _conv_only(name: str) -> bool:
    """A counted convolution kernel that no GEMM name already counts."""
    return not is_gemm_name(name) and conv_precision(name) is not None


def fp32_on_path_frac(t: RankTrace, compute: np.ndarray) -> float | None:
    """The share of fp32 GEMM time in kernels that the device's next work waited for: the next device op on the
    kernel's stream was launched before the kernel ended (queued behind it), or the trace does not say. A kernel
    whose successor was launched only after it ended is off the path: the device then waits for the host, and a
    faster kernel only lengthens that wait. None without fp32 GEMMs."""
    idx, code, labels = _gemm_codes(t, compute)
    if not len(idx):
        return None
    f32 = idx[code == labels.index("fp32")]
    if not len(f32):
        return None
    dev = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
    launch = launch_calls(t, dev)
    on = np.ones(len(f32), bool)
    for s in distinct(t.stream[f32]).tolist():
        ds = dev[t.stream[dev] == s]
        ls = launch[t.stream[dev] == s]
        m = t.stream[f32] == s
        nxt = np.searchsorted(ds, f32[m], side="right")  # dev is in start order: the op after each kernel
        has = nxt < len(ds)
        nl = np.where(has, ls[np.minimum(nxt, len(ds) - 1)], -1)
        late = has & (nl >= 0)
        late[late] = t.ts[nl[late]] >= (t.ts[f32[m]] + t.dur[f32[m]])[late]
        on[np.flatnonzero(m)[late]] = False
    tot = float(t.dur[f32].sum())
    return float(t.dur[f32[on]].sum()) / tot if tot else None


def fp32_gemm_kernels(t: RankTrace) -> np.ndarray:
    """Indices of the device's GEMM and convolution kernels evidenced to run in fp32 (what fp32_gemm_frac counts),
    in index order: the edges the fp32 what-if shortens (critical_path/simulate.py)."""
    idx, code, labels = _gemm_codes(t, (t.kind == COMPUTE) & (t.stream >= 0))
    return idx[code == labels.index("fp32")]


# The last answer of _gemm_codes: metrics/rank/kernels.py asks gemm_time_by_precision and then fp32_on_path_frac
# about the same trace and mask (~5 ms of a trace with fp32 GEMMs each time; issue 37).
_LAST: dict = {"trace": None, "kind": None, "mask": None, "got": None}


def _gemm_codes(t: RankTrace, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(GEMM and counted convolution kernel indices in `compute`, their precision codes, the code labels); the
    same trace, kinds and mask asked again: copies of the last answer."""
    last = _LAST
    ref = last["trace"]
    mask = np.asarray(compute, bool).tobytes()
    if ref is not None and ref() is t and last["kind"] is t.kind and last["mask"] == mask:
        idx, code, labels = last["got"]
        return idx.copy(), code.copy(), list(labels)
    got = _gemm_codes_of(t, compute)
    try:
        last.update(trace=weakref.ref(t), kind=t.kind, mask=mask, got=got)
    except TypeError:  # a stand-in with no weak references (tests): nothing kept
        last.update(trace=None, got=None)
        return got
    idx, code, labels = got
    return idx.copy(), code.copy(), list(labels)


def _gemm_codes_of(t: RankTrace, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    labels = list(PRECISIONS) + ["unknown"]
    idx = np.flatnonzero(compute & (t.kind == COMPUTE) & (t.stream >= 0))
    gemm_ids = t.name_ids(is_gemm_name, compute) if len(idx) else np.zeros(0, np.int32)
    conv_ids = t.name_ids(_conv_only, compute) if len(idx) else np.zeros(0, np.int32)
    ids = np.concatenate([gemm_ids, conv_ids])
    idx = idx[np.isin(t.name[idx], ids)] if len(ids) else idx[:0]
    if not len(idx):
        return idx, np.zeros(0, np.int8), labels
    code_of_name = np.full(len(t.names), labels.index("unknown"), np.int8)
    for i in gemm_ids.tolist():
        p = name_precision(t.names[i])
        if p is not None:
            code_of_name[i] = labels.index(p)
    for i in conv_ids.tolist():
        code_of_name[i] = labels.index(conv_precision(t.names[i]) or "unknown")
    code = code_of_name[t.name[idx]]
    host_idx, host_code = _host_evidence(t, idx)
    if len(host_idx):  # host evidence wins, but a float input run as tf32 (the name says so) is tf32
        pos = np.searchsorted(idx, host_idx)
        tf32 = (host_code == labels.index("fp32")) & (code[pos] == labels.index("tf32"))
        code[pos] = np.where(tf32, code[pos], host_code)
    return idx, code, labels


def _host_evidence(t: RankTrace, kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kernel indices among `kernels`, precision codes) from the `Input type` of the GEMM op that launched
    each (sorted by index)."""
    empty = np.zeros(0, np.int64), np.zeros(0, np.int8)
    gemm_name_ids = [i for i, n in enumerate(t.names) if n in GEMM_OPS]
    if not gemm_name_ids or t.kind is None:
        return empty
    ops = np.flatnonzero(np.isin(t.name, gemm_name_ids) & (t.stream < 0) & (t.kind == CPU_OP))
    ops = ops[[("Input type" in t.comm_args.get(int(o), ())) for o in ops.tolist()]] if len(ops) else ops
    if not len(ops):
        return empty
    labels = list(PRECISIONS) + ["unknown"]
    memo: dict[int, int] = {}  # id of the (shared) args dict -> code
    out_i, out_c = [], []
    wanted = set(kernels.tolist())
    for d, o in host_ops.launching_ops(t, ops, t.kind).items():
        if d not in wanted:
            continue
        a = t.comm_args[o]
        c = memo.get(id(a))
        if c is None:
            p = host_precision(a.get("Input type"))
            c = memo[id(a)] = -1 if p is None else labels.index(p)
        if c >= 0:
            out_i.append(d)
            out_c.append(c)
    if not out_i:
        return empty
    ii, cc = np.array(out_i, np.int64), np.array(out_c, np.int8)
    order = np.argsort(ii)
    return ii[order], cc[order]
