"""Datasheet peaks for the roofline (issue 36: the B200 fixture, sm100, had none). The numbers are NVIDIA's
HGX B200 / GB200 NVL72 datasheets' per-GPU columns, sparse figures halved, written here from the datasheets."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmdiag.diagnose.model.devices import compute_peak

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"


@pytest.mark.parametrize("name,bf16,fp8,hbm", [("NVIDIA B200", 2250.0, 4500.0, 7700.0),
                                               ("NVIDIA GB200", 2500.0, 5000.0, 8000.0),
                                               ("NVIDIA H100 80GB HBM3", 989.5, 1979.0, 3350.0)])
def test_peaks(name, bf16, fp8, hbm):
    p = compute_peak(name)
    assert p is not None and p.tflops["bf16"] == bf16 and p.tflops["fp8"] == fp8 and p.hbm_gbps == hbm


@pytest.mark.real(REAL / "tracelens/b200_vllm_tp8_rank0.json.gz")
def test_b200_fixture_is_not_a_device_without_peak():
    from llmdiag.diagnose.analyze import analyze_path

    a = analyze_path(str(REAL / "tracelens/b200_vllm_tp8_rank0.json.gz"), jobs=1, rules=False)
    assert a.kernel_views is not None and "B200" not in " ".join(a.kernel_views.devices_without_peak)
