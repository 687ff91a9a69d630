"""The fp32 -> 16-bit GEMM speed-up assumed per device: what the precision rule's gain and the fp32 what-if on the
rank's dependency graph (metrics/rank/critical_path/simulate.py) both scale fp32 GEMMs by.

Assumed speed-ups: at most half the tensor-core peak ratio over the fp32 path, because training GEMMs reach a
smaller share of the tensor-core peak than of the fp32 one."""

from __future__ import annotations

import re

FP32_TO_BF16_SPEEDUP = 4.0  # conservative: tensor-core bf16 vs fp32 FMA peak is 8-16x on sm80+
CONSUMER_SPEEDUP = 1.5  # GeForce RTX 20xx-40xx: fp16/bf16 with fp32 accumulate is 2x the fp32 peak
AMD_SPEEDUP = 2.0  # MI250X: bf16 matrix 383 vs fp32 matrix 95.7 TFLOPS (4x); MI300X 8x
AMD_RE = re.compile(r"AMD|Instinct|Radeon|\bMI\d{3}", re.I)
_CONSUMER = re.compile(r"GEFORCE|\bRTX \d{4}\b|TITAN RTX", re.I)  # fp32-accumulate tensor rate halved


def gemm_speedup(device: str) -> tuple[float, str]:
    """(assumed fp32 → 16-bit GEMM speed-up, why) for a device."""
    if AMD_RE.search(device):
        return AMD_SPEEDUP, "half the bf16/fp32 matrix-core peak ratio of an MI250X (4×; 8× on MI300X)"
    if _CONSUMER.search(device) and not re.search(r"QUADRO|RTX A\d|ADA GENERATION", device, re.I):
        return CONSUMER_SPEEDUP, ("three quarters of a GeForce part's 2× tensor-core (fp32 accumulate) over "
                                  "fp32 peak ratio")
    return FP32_TO_BF16_SPEEDUP, "half or less of the 8-16× tensor-core over fp32 peak ratio (V100, T4, A100, H100)"
