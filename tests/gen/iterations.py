"""Captures without ProfilerStep or `Optimizer.step#...` ops, for the iteration detector (metrics/rank/iterations.py).

Every op sits at a hand-placed offset (µs) in its iteration, so each iteration's host span is known here:
iteration i of a loop with period P starts at `first + i·P`. Kernels are launched by the ops that do GPU work
(a convolution, a matmul, a backward node), one each, on stream 7, 5 µs after the op begins.
"""

from __future__ import annotations

from tests.gen.builder import MAIN_TID, TraceBuilder

AUTOGRAD_TID = 101  # the autograd engine's thread (CUDA backward runs there)
P = 1000  # training period, µs
# (name, offset, duration) of the main thread's ops in one training iteration: zero_grad, forward, loss, update
FORWARD = [("aten::zeros", 0, 10), ("aten::conv2d", 20, 100), ("aten::relu_", 130, 20), ("aten::linear", 160, 80),
           ("aten::mse_loss", 250, 30), ("aten::ones_like", 290, 10)]
BACKWARD = [("autograd::engine::evaluate_function: MseLossBackward0", 320, 40),
            ("autograd::engine::evaluate_function: AddmmBackward0", 370, 120),
            ("autograd::engine::evaluate_function: ReluBackward0", 500, 30),
            ("autograd::engine::evaluate_function: ConvolutionBackward0", 540, 200)]
UPDATE = [("aten::add_", 760, 20), ("aten::add_", 790, 20), ("aten::item", 820, 30)]
LAST_END = 850  # the end of an iteration's last op (aten::item)
BACKWARD_END = 740  # the end of an iteration's backward
WARMUP_EXTRA = 500  # µs the warm-up iteration's extra op (cuDNN's algorithm search) adds after the convolution
GPU_OPS = ("aten::conv2d", "aten::linear", "Backward0")


def _op(b: TraceBuilder, name: str, start: int, dur: int, tid: int = MAIN_TID, gpu: bool = True) -> None:
    b.cpu_op(name, start, dur, tid=tid)
    if gpu and any(g in name for g in GPU_OPS):
        b.kernel(f"void kernel_for_{name.split(':')[-1].strip().replace(' ', '_')}()", start + 5, max(dur - 10, 1),
                 stream=7, launch_at=start + 1, tid=tid)


def training(k: int, warmup: bool = False, varying: bool = False, cpu: bool = False) -> TraceBuilder:
    """k iterations of FORWARD (main thread), BACKWARD (autograd thread), UPDATE (main thread), every P µs from 0.
    `warmup`: iteration 0 also runs `aten::_cudnn_find` (WARMUP_EXTRA µs) after its convolution, so it lasts
    P + WARMUP_EXTRA and the loop's iterations follow from there. `varying`: iteration i also runs counts[i % 8]
    `aten::nonzero` ops (data-dependent work) inside its forward, at fixed offsets, so no two consecutive
    iterations run the same op sequence, while each still takes P. `cpu`: a CPU-only run, no kernels, its
    backward on the main thread (the autograd engine runs on the calling thread without a GPU)."""
    counts = [1, 3, 2, 2, 1, 3, 1, 2]
    b = TraceBuilder(rank=0, world_size=1)
    s = 0
    for i in range(k):
        extra = WARMUP_EXTRA if warmup and i == 0 else 0
        for name, off, dur in FORWARD:
            _op(b, name, s + off + (extra if off > 20 else 0), dur, gpu=not cpu)
        if extra:
            b.cpu_op("aten::_cudnn_find", s + 125, extra - 10)
        if varying:
            for j in range(counts[i % len(counts)]):
                b.cpu_op("aten::nonzero", s + 302 + 5 * j, 3)
        for name, off, dur in BACKWARD:
            _op(b, name, s + off + extra, dur, tid=MAIN_TID if cpu else AUTOGRAD_TID, gpu=not cpu)
        for name, off, dur in UPDATE:
            _op(b, name, s + off + extra, dur, gpu=not cpu)
        s += P + extra
    return b


INFER_P = 500
INFERENCE = [("aten::to", 0, 30), ("aten::linear", 40, 100), ("aten::gelu", 150, 20), ("aten::linear", 180, 100),
             ("aten::softmax", 290, 20), ("aten::argmax", 320, 20), ("aten::item", 350, 40)]
INFER_END = 390


def inference(k: int) -> TraceBuilder:
    """A forward-only inference loop: k iterations of INFERENCE every INFER_P µs from 0, no backward, no optimizer."""
    b = TraceBuilder(rank=0, world_size=1)
    for i in range(k):
        for name, off, dur in INFERENCE:
            _op(b, name, i * INFER_P + off, dur)
    return b


LAYER = [("aten::layer_norm", 0, 20), ("aten::linear", 30, 100), ("aten::gelu", 140, 20), ("aten::linear", 170, 100),
         ("aten::add", 280, 10)]


def one_shot_forward(layers: int = 6, norm_first: bool = False) -> TraceBuilder:
    """One inference call of a model of identical layers: its embedding, `layers` × LAYER every 300 µs, then the
    final norm and head. The layers repeat; nothing says they are iterations. `norm_first`: the call begins with
    an op each layer runs too (an input norm, then a slice and copy of the input) instead of the embedding."""
    b = TraceBuilder(rank=0, world_size=1)
    pre = [("aten::layer_norm", 0, 10), ("aten::slice", 15, 5), ("aten::copy_", 25, 20)] if norm_first else \
        [("aten::embedding", 0, 40)]
    for name, off, dur in pre:
        _op(b, name, off, dur)
    for i in range(layers):
        for name, off, dur in LAYER:
            _op(b, name, 50 + 300 * i + off, dur)
    end = 50 + 300 * layers
    for name, off, dur in [("aten::layer_norm", 0, 20), ("aten::linear", 30, 200), ("aten::argmax", 240, 20),
                           ("aten::item", 270, 30)]:
        _op(b, name, end + off, dur)
    return b


def distinct_ops(n: int = 12) -> TraceBuilder:
    """One pass of n ops that all differ (no op repeats)."""
    b = TraceBuilder(rank=0, world_size=1)
    for i in range(n):
        _op(b, f"aten::linear_{i}" if i % 2 else f"aten::op_{i}", 100 * i, 80)
    return b


def single_op(dur: int = 10_000) -> TraceBuilder:
    """One long op with one kernel."""
    b = TraceBuilder(rank=0, world_size=1)
    _op(b, "aten::conv2d", 0, dur)
    return b


def burst_then_long(k: int = 5, long_us: int = 20_000) -> TraceBuilder:
    """k repeats of two tiny ops (20 µs each repeat), then one op of `long_us`: the repeats hold the ops, not the time."""
    b = TraceBuilder(rank=0, world_size=1)
    for i in range(k):
        b.cpu_op("aten::empty", 20 * i, 5)
        b.cpu_op("aten::fill_", 20 * i + 10, 5)
    _op(b, "aten::conv2d", 20 * k + 10, long_us)
    return b


def with_profiler_steps(k: int) -> TraceBuilder:
    """training(k) with each iteration inside ProfilerStep#(i+1) = [i·P, (i+1)·P]."""
    b = training(k)
    for i in range(k):
        b.step(i + 1, i * P, (i + 1) * P)
    return b
