"""GEMM precision from evidence: host op Input type first, then a name parser that knows input vs
accumulator vs epilogue tokens; unknown stays unknown; fp32 never from an accumulator token."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.precision import host_precision, is_gemm_name, name_precision
from tests.gen import traces as gen_traces
from tests.gen.builder import TraceBuilder

NAMES = [
    # cuBLAS/cuBLASLt sm90/sm80 xmma: inputs, then output+accumulator, then epilogue
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "bf16"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize256x128x64_warpgroupsize2x1x1", "fp16"),
    ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3", "fp32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize256x64x32", "tf32"),
    ("sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cga2x1x1", "bf16"),
    # Ampere/Volta-era cuBLAS
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", "bf16"),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn", "fp16"),
    ("ampere_tf32_s1688gemm_tf32_128x128_16x3_nt", "tf32"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("volta_sgemm_128x64_nn", "fp32"),
    ("ampere_sgemm_128x128_tn", "fp32"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float)", "fp32"),
    # CUTLASS 2.x / 3.x
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)", "tf32"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8", "bf16"),
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)", "fp32"),
    ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnt_align16_warpspecialized", "fp8"),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8", "bf16"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::half_t, float>>(int)", "fp16"),
    # hipBLASLt / Tensile: the data-type token
    ("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0_APM1", "bf16"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN", "fp16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", "fp32"),
    ("Cijk_Alik_Bljk_F8SS_BH_MT256x256x64_MI16x16x1", "fp8"),
    # TRT-LLM / FlashInfer block-scaled GEMMs (B200 fixture): MXFP4 weights
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN", "mxfp4"),
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN", "mxfp4"),
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x128x128", "fp8"),
    ("bmm_MxE2m3_MxE2m3_Fp32_t128x128x128", "mxfp6"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x64x32_wt32x32x8", "bf16"),
    # names that do not state the input type: unknown, never guessed
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", None),
    ("triton_tem_fused_mm_0", None),
    ("void gemm_kernel<float>()", None),
]


@pytest.mark.parametrize("name,want", NAMES)
def test_name_precision(name, want):
    assert is_gemm_name(name)
    assert name_precision(name) == want


def test_accumulator_token_never_makes_fp32():
    for name, want in NAMES:
        if "_f32_" in name or "f32" in name.split("gemm")[-1]:
            assert want != "fp32" or name.startswith(("sm80_xmma_gemm_f32f32_f32", "ampere_sgemm")), name


@pytest.mark.parametrize("name", ["void fbgemm_gpu::permute_2D_data_kernel<true, int, int, float>(int)",
                                  "void at::native::elementwise_kernel<128, 4>()", "fmhaSm100aKernel_QkvE4m3"])
def test_not_gemms(name):
    assert not is_gemm_name(name) and name_precision(name) is None


@pytest.mark.parametrize("types,want", [(["c10::BFloat16", "c10::BFloat16"], "bf16"), (["float", "float"], "fp32"),
                                        (["c10::Half", ""], "fp16"), (["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"], "fp8"),
                                        (["", "c10::BFloat16"], "bf16"), ([], None), ("x", None), (["Scalar"], None)])
def test_host_precision(types, want):
    assert host_precision(types) == want


def _rank(tmp_path, b):
    d = tmp_path / "run"
    b.write(d / f"rank{b.rank}.json")
    (m,) = analyze_path(str(d), rules=False, jobs=1).ranks
    return m


def test_h100_bf16_gemm_is_not_fp32(tmp_path):
    """Issue #13: every bf16 cuBLAS GEMM on Hopper carries `_f32_`; it was called fp32 (autocast advised)."""
    b, _ = gen_traces.symm_mem_tp_rank(variant="multimem")
    m = _rank(tmp_path, b)
    assert m.hints.fp32_gemm_frac == 0.0
    assert set(m.hints.gemm_ms_by_precision) == {"bf16"}
    assert m.hints.gemm_ms_by_precision["bf16"] == pytest.approx(4 * 0.3)  # 4 GEMMs of 300 µs per step


def test_host_op_input_type_decides_over_an_unknown_name(tmp_path):
    """nvjet names say nothing; the aten::mm that launched them says float (fp32) or BFloat16."""
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 2000)
    b.cpu_op("aten::mm", 10, 20, args={"Input type": ["float", "float"], "Input Dims": [[8, 8], [8, 8]]})
    b.kernel(gen_traces.NVJET_GEMM, 100, 300, launch_at=15)
    b.cpu_op("aten::mm", 40, 20, args={"Input type": ["c10::BFloat16", "c10::BFloat16"], "Input Dims": [[8, 8], [8, 8]]})
    b.kernel(gen_traces.NVJET_GEMM, 400, 100, launch_at=45)
    b.kernel(gen_traces.NVJET_GEMM, 500, 100, launch_at=70)  # no host op: unknown
    b.kernel("void elementwise_kernel()", 600, 500, launch_at=71)
    m = _rank(tmp_path, b)
    assert m.hints.gemm_ms_by_precision == {"bf16": pytest.approx(0.1), "fp32": pytest.approx(0.3),
                                            "unknown": pytest.approx(0.1)}
    assert m.hints.fp32_gemm_frac == pytest.approx(0.3 / 1.0)


def test_unknown_stays_unknown(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    b.kernel(gen_traces.NVJET_GEMM, 100, 300)
    m = _rank(tmp_path, b)
    assert m.hints.fp32_gemm_frac is None and m.hints.gemm_ms_by_precision == {"unknown": pytest.approx(0.3)}


@pytest.mark.real
def test_b200_fixture_mxfp4_and_nothing_fp32():
    a = analyze_path("../shared/fixtures/real/tracelens/b200_vllm_tp8_rank0.json.gz", rules=False, jobs=1)
    (m,) = a.ranks
    p = m.hints.gemm_ms_by_precision
    assert p["mxfp4"] == pytest.approx(3.18 + 2.03, abs=0.02)  # the two bmm_*E2m1* GEMMs (ms, from the JSON)
    assert "fp32" not in p and m.hints.fp32_gemm_frac == 0.0


@pytest.mark.parametrize("parser", ["msgspec", "orjson"])
def test_gemm_input_type_kept_by_both_parsers(tmp_path, monkeypatch, parser):
    from llmdiag.diagnose.io import fastjson
    from llmdiag.diagnose.io.loader import load_trace

    if parser == "orjson":
        monkeypatch.setattr(fastjson, "_DECODER", None)
    else:  # msgspec is a declared dependency: its absence is a broken install, not a reason to skip
        assert fastjson._DECODER is not None
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    for k in range(3):
        b.cpu_op("aten::mm", 10 + 100 * k, 20, args={"Input type": ["c10::Half", "c10::Half"], "Input Dims": [[2, 2]]})
    b.cpu_op("aten::add", 400, 20, args={"Input type": ["float"], "Input Dims": [[2]]})  # not a GEMM op: not kept
    t = load_trace(b.write(tmp_path / "r.json"))
    kept = [(t.names[t.name[i]], a) for i, a in sorted(t.comm_args.items())]
    # with its Input Dims (the what-if's GEMM fit, diagnose.metrics.op_scaling)
    assert kept == [("aten::mm", {"Input type": ["c10::Half", "c10::Half"], "Input Dims": [[2, 2]]})] * 3
