"""What is known of a device from its name: the bus bandwidth a collective can reach inside one node.

Values are achievable intra-node all-reduce bus bandwidth (nccl-tests / rccl-tests `busbw`, GB/s), not the
link's marketing number: about 75-80 % of the per-direction peak of the GPU's fabric, the fraction NCCL
reaches on large messages. Each entry names its source. PCIe parts reach the PCIe link's rate at best
(host topology may make it less). A device not listed says unknown (None): rules and tables print
"unknown", never a guessed peak.
"""

from __future__ import annotations

import re

from llmdiag.diagnose.model.dc import dataclass


@dataclass(frozen=True)
class LinkPeak:
    """A device's achievable intra-node bus bandwidth, the link it is over, and where the number comes from."""

    busbw_gbps: float
    link: str
    source: str


# Checked in order: the first pattern found in the upper-cased device name wins (H100 PCIe before H100).
_PEAKS: tuple[tuple[str, LinkPeak], ...] = (
    (r"H100.{0,8}PCIE|H100 NVL", LinkPeak(48.0, "PCIe Gen5 x16 (64 GB/s per direction)",
                                          "NVIDIA H100 PCIe datasheet; NVLink bridge pairs only")),
    (r"A100.{0,12}PCIE", LinkPeak(24.0, "PCIe Gen4 x16 (32 GB/s per direction)", "NVIDIA A100 PCIe datasheet")),
    (r"GB200|B200|B100", LinkPeak(720.0, "NVLink 5, 18 links, 900 GB/s per direction",
                                  "NVIDIA Blackwell/HGX B200 datasheet (1.8 TB/s NVLink per GPU)")),
    (r"H800", LinkPeak(160.0, "NVLink 4 cut to 8 links, 200 GB/s per direction",
                       "NVIDIA H800 SXM datasheet (400 GB/s NVLink, China export SKU)")),
    (r"H200|H100|GH200", LinkPeak(360.0, "NVLink 4, 18 links, 450 GB/s per direction",
                                  "NVIDIA H100/H200 SXM datasheets (900 GB/s NVLink); nccl-tests all-reduce on HGX H100")),
    (r"A800", LinkPeak(160.0, "NVLink 3 cut to 8 links, 200 GB/s per direction", "NVIDIA A800 SXM datasheet")),
    (r"A100", LinkPeak(240.0, "NVLink 3, 12 links, 300 GB/s per direction",
                       "NVIDIA A100 SXM datasheet (600 GB/s NVLink); nccl-tests all-reduce on DGX A100")),
    (r"V100.{0,10}PCIE", LinkPeak(12.0, "PCIe Gen3 x16 (16 GB/s per direction)", "NVIDIA V100 PCIe datasheet")),
    (r"V100", LinkPeak(130.0, "NVLink 2, 6 links, 150 GB/s per direction",
                       "NVIDIA V100 SXM2 datasheet (300 GB/s NVLink); nccl-tests all-reduce on DGX-1V")),
    (r"L40|\bL4\b|L20\b", LinkPeak(24.0, "PCIe Gen4 x16 (32 GB/s per direction), no NVLink",
                                   "NVIDIA L40/L40S/L4 datasheets")),
    (r"MI325X|MI300X", LinkPeak(310.0, "Infinity Fabric, 7 links x 64 GB/s per direction",
                                "AMD Instinct MI300X/MI325X datasheets (896 GB/s peer aggregate); rccl-tests all-reduce on 8x MI300X")),
    (r"MI250X|MI250", LinkPeak(100.0, "Infinity Fabric, up to 8 links x 50 GB/s per direction between GCDs",
                               "AMD Instinct MI250X datasheet (800 GB/s peak aggregate); rccl-tests all-reduce, 8 GCDs")),
)


def link_peak(device_name: str | None) -> LinkPeak | None:
    name = (device_name or "").upper()[:200]
    # re.search compiles (and caches) a pattern when first tried: a lookup compiles those up to its match, not the
    # table (issue #30: the tables here cost every command ~1.5 ms compiled at import)
    return next((v for rx, v in _PEAKS if re.search(rx, name)), None)


def link_busbw_gbps(device_name: str | None) -> float | None:
    peak = link_peak(device_name)
    return peak.busbw_gbps if peak else None


# Accelerators that are not GPUs, as their runtimes name themselves (Meta MTIA, Intel Gaudi/HPU, Google TPU,
# AWS Trainium/Inferentia, Huawei Ascend NPU, Cerebras, Groq, SambaNova).
_NOT_GPU = re.compile(r"MTIA|GAUDI|\bHPU|\bTPU|TRAINIUM|INFERENTIA|NEURON|ASCEND|\bNPU|CEREBRAS|\bGROQ|SAMBANOVA")


def device_word(device_name: str | None, trace_kind: str | None = None) -> str:
    """What to call the device in user-facing text, the one helper every finding's wording goes through: "CPU"
    for CPU-only traces (gloo, no device events), "device" for an accelerator that is not a GPU (an MTIA, a
    Gaudi, a TPU), else "GPU" (CUDA and ROCm GPUs, and an unnamed device whose trace's CUDA/HIP kernels make it
    one)."""
    if trace_kind == "cpu":
        return "CPU"
    return "device" if device_name and _NOT_GPU.search(device_name.upper()[:200]) else "GPU"


def cpu_only_words(backends) -> str:
    """What a CPU-only analysis is, from its traces' distributedInfo backends: "CPU-only (gloo)" only where the
    traces say gloo; a trace of an nccl (or other accelerator) job with no device events is a capture that
    recorded no GPU activity (CUDA activities off), not a CPU run, and is called so (issue 36)."""
    seen = sorted({b for b in backends if b})
    if not seen:
        return "CPU-only (backend not recorded)"
    if seen == ["gloo"]:
        return "CPU-only (gloo)"
    acc = [b for b in seen if b not in ("gloo", "mpi")]
    if acc:
        return (f"CPU-only though the backend is {', '.join(acc)}: the capture recorded no GPU activity (profiler "
                "activities without CUDA), so this is not a CPU run")
    return f"CPU-only ({', '.join(seen)})"


HOST_BACKENDS = ("gloo", "mpi", "")  # backends whose collectives run on the host ("": not recorded)


def host_backends(backends) -> bool:
    """Do the traces' backends move data on the host (gloo, MPI, or unrecorded)? False where one names an
    accelerator's library (nccl, rccl, hccl, xccl): that job ran on devices even if its capture shows none."""
    return all((b or "") in HOST_BACKENDS for b in backends)


# Kineto's activity categories that only one accelerator's runtime writes (libkineto ActivityType names).
_CATEGORY_DEVICES = (("mtia_", "MTIA"), ("hpu_", "Gaudi (HPU)"))


def device_from_categories(cats) -> str:
    """The accelerator a trace's event categories name when its `deviceProperties` name none (an MTIA trace
    writes `mtia_runtime` / `mtia_ccp_events`, a Gaudi one `hpu_op`): "" when they name none."""
    for c in cats:
        for prefix, name in _CATEGORY_DEVICES:
            if str(c).startswith(prefix):
                return name
    return ""


# Compute capability by device name, for traces whose deviceProperties lack computeMajor/computeMinor (the
# trace's own numbers win: kernels.py reads them). NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus);
# checked in order, the first pattern found in the upper-cased name wins. AMD/Intel parts are absent: their
# runtimes report no NVIDIA compute capability.
_CC: tuple[tuple[str, float], ...] = (
    (r"GB200|B200|B100|\bB40\b", 10.0), (r"RTX PRO \d{4} BLACKWELL|RTX 50\d0", 12.0),
    (r"H100|H200|H800|H20\b|GH200", 9.0),
    (r"L40|\bL4\b|\bL20\b|RTX 40\d0|RTX \d{4} ADA|RTX 6000 ADA", 8.9),
    (r"A100|A800|\bA30\b", 8.0),
    (r"\bA10G?\b|\bA16\b|\bA2\b|\bA40\b|RTX 30\d0|RTX A\d{4}|\bA\d{4}\b", 8.6),
    (r"\bT4\b|RTX 20\d0|TITAN RTX|QUADRO RTX|GTX 16\d0", 7.5),
    (r"V100|TITAN V\b", 7.0),
    (r"P100", 6.0), (r"P40|\bP4\b|GTX 10\d0|TITAN XP", 6.1), (r"K80", 3.7),
)


def compute_capability(device_name: str | None) -> float | None:
    """NVIDIA compute capability of a device by its name (`Tesla V100-SXM2-16GB` → 7.0), or None (unknown, or
    not an NVIDIA GPU)."""
    name = (device_name or "").upper()[:200]
    if not name or _NOT_GPU.search(name) or re.search(r"AMD|INSTINCT|RADEON|\bMI\d{3}", name):
        return None
    return next((v for rx, v in _CC if re.search(rx, name)), None)
# ---- compute and memory peaks, for the roofline view (diagnose.metrics.roofline) ------------------------------
@dataclass(frozen=True)
class ComputePeak:
    """Dense (no sparsity) peak TFLOP/s per input precision and HBM bandwidth, as the vendor's datasheet states."""

    tflops: dict  # precision (fp32, tf32, bf16, fp16, fp8) -> dense peak TFLOP/s
    hbm_gbps: float  # peak memory bandwidth, GB/s
    source: str

    def ridge(self, precision: str) -> float | None:
        """FLOPs per byte above which an op of this precision is compute-bound (peak FLOP/s / peak bytes/s)."""
        p = self.tflops.get(precision)
        return p * 1e12 / (self.hbm_gbps * 1e9) if p else None


# Datasheet numbers with sparsity are halved to dense. First match in the upper-cased name wins.
_COMPUTE: tuple[tuple[str, ComputePeak], ...] = (
    (r"GB200", ComputePeak({"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0}, 8000.0,
                           "NVIDIA GB200 NVL72 datasheet, per-GPU column (sparse figures halved)")),
    (r"B200", ComputePeak({"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}, 7700.0,
                          "NVIDIA HGX B200 datasheet, per-GPU column (sparse figures halved; sm100)")),
    (r"H100.{0,8}PCIE", ComputePeak({"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}, 2000.0,
                                    "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (sparse figures halved)")),
    (r"H200", ComputePeak({"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}, 4800.0,
                          "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (sparse figures halved)")),
    (r"H100", ComputePeak({"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}, 3350.0,
                          "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (sparse figures halved)")),
    (r"A100.{0,20}80GB", ComputePeak({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 2039.0,
                                     "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column")),
    (r"A100", ComputePeak({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 1555.0,
                          "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB column")),
    (r"V100", ComputePeak({"fp32": 15.7, "fp16": 125.0}, 900.0, "NVIDIA V100 datasheet, V100 SXM2 column")),
    (r"MI300X", ComputePeak({"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, 5300.0,
                            "AMD Instinct MI300X datasheet (dense matrix figures)")),
)


def compute_peak(device_name: str | None) -> ComputePeak | None:
    """The device's datasheet peaks, None for a device not listed (the roofline then names no class)."""
    name = (device_name or "").upper()[:200]
    return next((v for rx, v in _COMPUTE if re.search(rx, name)), None) if name else None
