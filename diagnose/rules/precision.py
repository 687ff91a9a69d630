"""Precision rule: fp32 GEMMs and convolutions on a GPU whose tensor (matrix) cores would run them several times
faster (the convolutions: cuDNN's fp32 kernels, metrics/rank/conv_names.py; same speed-up model and preconditions).

Which lower precision to advise depends on the architecture: compute capability 7.x (V100, T4, RTX 20xx) has
fp16 tensor cores and no bf16 ones, so the change is fp16 autocast with a GradScaler (fp16's range needs loss
scaling); 8.0 and later have bf16 tensor cores (bf16 autocast, no scaler) and TF32, which runs the same fp32
code on the tensor cores with one flag. Below 7.0 there are no tensor cores: silent. The compute capability is
the trace's (deviceProperties computeMajor/computeMinor), else the device name's (model/devices.py).
"""

from __future__ import annotations

import re

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.devices import compute_capability
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.gemm_speedup import AMD_RE, AMD_SPEEDUP, CONSUMER_SPEEDUP, gemm_speedup  # noqa: F401
import llmdiag.diagnose.rules.after_fix as after_fix  # not `from rules import`: the package imports every rule
from llmdiag.diagnose.rules.base import Ctx, host_sets_step, severity_for
from llmdiag.diagnose.model.lazy_re import lazy_compile

FP32_FLOOR = 0.10  # fp32 GEMMs below 10 % of compute kernel time get no finding: the gain would be a few %
_AMD_MATRIX = lazy_compile(r"\bMI(2\d\d|3\d\d)", re.I)  # CDNA2/3: bf16 matrix cores 4-8x their fp32 matrix rate


def _cc(c: Ctx, r: RankMetrics) -> float | None:
    return r.hints.compute_capability or compute_capability(r.device or c.device)


def _eligible(c: Ctx, r: RankMetrics) -> bool:
    if r.trace_kind != "gpu" or (r.hints.fp32_gemm_frac or 0) <= FP32_FLOOR:
        return False
    dev = r.device or c.device
    if AMD_RE.search(dev):  # ROCm reports gfx9 as computeMajor 9: not NVIDIA's; only CDNA2/3 are advised
        return bool(_AMD_MATRIX.search(dev))
    cc = _cc(c, r)
    return cc is not None and cc >= 7.0


def _on_path(r: RankMetrics) -> float:
    """The share of fp32 GEMM time on the path (Hints.fp32_on_path_frac); 1 where the summary lacks it."""
    f = r.hints.fp32_on_path_frac
    return 1.0 if f is None else f




def _saving(r: RankMetrics, speedup: float) -> float:
    """ms per step faster GEMMs take off the step: the fp32 GEMM time on the path × (1 − 1/speed-up), at most the
    host's waits for the device (Hints.host_wait_ms) where the device idles ≥ HOST_BOUND_IDLE of the step: a
    host that never waits for its device sets the step, and faster kernels then only lengthen the idle."""
    g = (r.hints.fp32_gemm_frac or 0.0) * r.compute_ms * _on_path(r) * (1 - 1 / speedup)
    return after_fix.now(r, g)


def _convs(r: RankMetrics) -> float:
    """fp32 convolution ms per step among the counted kernels (Hints.conv_ms_by_precision)."""
    return (r.hints.conv_ms_by_precision or {}).get("fp32", 0.0)


def _what(r: RankMetrics) -> tuple[str, str]:
    """(the kernels' words, the title's words): GEMMs, convolutions, or both, as the rank's fp32 time holds."""
    conv = _convs(r)
    gemm = (r.hints.fp32_gemm_frac or 0) * r.compute_ms - conv
    if conv > 0 and gemm > 0.01 * conv:
        return "GEMMs and convolutions", "matmuls and convolutions"
    return ("convolutions", "convolutions") if conv > 0 else ("GEMMs", "matmuls")


def _channels_last(r: RankMetrics) -> str:
    """The channels_last clause for fp32 convolutions: from the NCHW <-> NHWC transform kernels the trace shows,
    else said as an assumption."""
    lay = r.hints.layout_transform_ms
    mf = "`model.to(memory_format=torch.channels_last)` (and the inputs)"
    if lay:
        return (f"; for the convolutions also {mf}: the trace already spends {fmt(lay, 'ms')} per step in cuDNN's "
                "NCHW↔NHWC transform kernels (`nchwToNhwcKernel`/`nhwcToNchwKernel`), and its tensor-core "
                "convolutions read NHWC")
    return (f"; for the convolutions probably also {mf}, an assumption: cuDNN's tensor-core convolutions read NHWC, "
            "and this trace shows no NCHW↔NHWC transform kernel to confirm the model's layout")


def _simulated(r: RankMetrics, speedup: float) -> float | None:
    """ms per step the rank's steps shorten with its fp32 GEMM kernels `speedup` times faster, re-timed on its
    dependency graph (RankMetrics.simulated_gain_ms); None where the summary has no such simulation.

    It can exceed `_saving`'s bound: the on-path share reads a kernel whose next op on its stream was launched
    after it ended as off the path, but where the host waited for that kernel in a synchronize (or a synchronous
    copy) it held the host, and the simulation follows that sync edge: the host returns, and launches, earlier."""
    return r.simulated_gain_ms.get(f"fp32_gemm/{speedup:g}")


def fp32_gemm(c: Ctx) -> list[Finding]:
    """fp32 GEMMs and convolutions above FP32_FLOOR of compute on a GPU with tensor cores. The gain is simulated where every such
    rank's summary holds the what-if (`_simulated`: its fp32 GEMM kernels faster by the speed-up assumed from the
    device's peak ratio, `gemm_speedup`, re-timed on its dependency graph); else an estimate (`_saving`)."""
    bad = [r for r in c.ranks if _eligible(c, r)]
    if not bad:
        return []
    w = max(bad, key=lambda r: r.hints.fp32_gemm_frac or 0.0)
    dev = w.device or c.device
    amd = bool(AMD_RE.search(dev))
    cc = None if amd else _cc(c, w)
    speedup, why = gemm_speedup(dev)
    sims = [_simulated(r, speedup) for r in bad]
    simulated = all(x is not None for x in sims)
    gain = statistics.fmean([x for x in sims if x is not None] if simulated else [_saving(r, speedup) for r in bad])
    where = f"{dev or 'the GPU'}" + (f", compute capability {fmt(cc, 'avg')}" if cc else "")
    kinds, in_title = _what(w)
    ev = (f"rank {w.rank}: {fmt(w.hints.fp32_gemm_frac, 'pct')} of {fmt(w.compute_ms, 'ms')} compute per step in "
          f"fp32 {kinds} on {where} ({plural(len(bad), 'rank')} above {fmt(FP32_FLOOR, 'pct')})")
    if _convs(w) > 0:
        ev += (f"; {fmt(_convs(w), 'ms')} per step of it in fp32 convolution kernels (cuDNN `scudnn`, `dgrad`/`wgrad` "
               "engines on `float`; those cuDNN runs as `sgemm` kernels are among the GEMMs), counted with the GEMMs "
               "at the same assumed speed-up")
    h = w.hints
    frac, host_wait = h.fp32_gemm_frac or 0.0, h.host_wait_ms or 0.0
    if simulated:
        sim, own = _simulated(w, speedup) or 0.0, frac * w.compute_ms * (1 - 1 / speedup)
        ev += (f"; simulated on the rank's dependency graph with those kernels {speedup:g}× faster, every later op "
               f"as early as its own dependencies allow: rank {w.rank}'s steps shorten by {fmt(sim, 'ms')}")
        if sim < 0.9 * own:  # most of what the kernels lose does not reach the step: say what holds it
            ev += (f" of the {fmt(own, 'ms')} the kernels themselves lose: " + (
                f"the host sets the step (the {c.dev} idles {fmt(h.device_idle_frac, 'pct')} of it), so finished "
                f"earlier the {c.dev} waits longer for its next launch" if host_sets_step(w) else
                "the step then waits on other work (another stream's, or the host's)"))
    elif _on_path(w) < 0.9:  # a few % off the path is within how the path is read: not worth a sentence
        ev += (f"; only {fmt(_on_path(w), 'pct')} of that time is on the step's path (the {c.dev}'s next "
               f"work was already queued behind it): after the rest the {c.dev} waits for the host's next launch"
               f" ({fmt(w.hints.device_idle_frac, 'pct')} of the step idle), so faster kernels there only add idle")
    if not simulated and host_sets_step(w) and _saving(w, speedup) < frac * w.compute_ms * _on_path(w) * (1 - 1 / speedup):
        waits = (f"{fmt(h.host_wait_ms, 'ms')} per step (in synchronize calls and synchronous copies, and in copies "
                 "that held the host while queued kernels ran before them, e.g. from pageable memory)")
        if host_wait < 0.05 * w.step_time_ms:
            ev += (f"; but the host waits for the {c.dev} only {waits} while the {c.dev} idles "
                   f"{fmt(h.device_idle_frac, 'pct')} of the step: the host sets the step, so faster kernels take at "
                   "most that off it now (worth it once the host is faster)")
        else:
            ev += (f"; as the {c.dev} idles {fmt(h.device_idle_frac, 'pct')} of the step, faster kernels take at most "
                   f"the host's waits for it off the step: {waits}")
    # GradScaler scales a loss for backward: advised only where the capture shows a backward op (or an own run)
    training = c.man is not None or any(r.training is not None and r.training.backward_ops > 0 for r in c.ranks)
    if cc is not None and cc < 8.0:
        act = ("`torch.autocast(\"cuda\", dtype=torch.float16)` around forward and loss"
               + (" with a `torch.amp.GradScaler(\"cuda\")` scaling the loss (fp16's range needs it)"
                  if training else "")
               + f": compute capability {fmt(cc, 'avg')} has fp16 tensor cores but no bf16 ones, so bf16 and "
               "TF32 do not apply")
        title = f"fp32 {in_title} on a GPU with fp16 tensor cores"
    else:
        act = "`torch.autocast(\"cuda\", dtype=torch.bfloat16)` around forward and loss (no GradScaler needed)"
        # TF32 convolutions are PyTorch's default (cudnn.allow_tf32): only a GEMM in TF32 says the matmul flag is on
        tf32 = (w.hints.gemm_ms_by_precision or {}).get("tf32", 0) - (w.hints.conv_ms_by_precision or {}).get(
            "tf32", 0) > 1e-9
        if not amd and not tf32 and kinds != "convolutions":  # no GEMM in TF32: the flag is off; one line to set
            act += ("; or at least TF32 for the fp32 matmuls, with no dtype change: "
                    "`torch.backends.cuda.matmul.allow_tf32 = True` / `torch.set_float32_matmul_precision(\"high\")`")
        title = f"fp32 {in_title} on a tensor-core GPU"
    if _convs(w) > 0:
        act += _channels_last(w)
    label = {"GEMMs": "GEMM", "convolutions": "convolution", "GEMMs and convolutions": "GEMM and convolution"}[kinds]
    # the gain once a removable bound (DataLoader, allocator) no longer sets the step (rules/after_fix.py)
    rows, key, what = bad, f"fp32_gemm/{speedup:g}", f"the fp32 {label} kernels {speedup:g}× faster"
    ev += after_fix.clause(rows, key, what)
    post = after_fix.clause(rows, key, what, short=True)
    if simulated:
        eg = c.gain_text(gain, f"simulated on the rank's dependency graph with the fp32 {label} kernels at "
                         f"1/{speedup:g} of their time, an assumed {speedup:g}× speed-up: {why}; mean over the ranks" + post)
    else:
        eg = c.gain_text(gain, f"estimate, not simulated: fp32 {label} time on the path × (1 − 1/{speedup:g}), an "
                         f"assumed {speedup:g}× speed-up: {why}; at most the host's waits for the {c.dev} where "
                         "it idles" + post)
    return [c.finding("fp32_gemm", severity_for(gain, c.step_ms), title, ev,
                      [r.rank for r in bad], [], act, eg, gain, "ranks[].hints.fp32_gemm_frac",
                      gain_kind="simulated" if simulated else "estimate",
                      events=["fp32 GEMM kernels (sgemm, simt; GEMM ops' Input type float)",
                              "fp32 convolution kernels (cuDNN scudnn, dgrad/wgrad engines on float)",
                              "NCHW<->NHWC transform kernels (nchwToNhwcKernel)",
                              "deviceProperties.computeMajor / device name"])]
