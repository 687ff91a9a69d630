"""Model shapes and their arithmetic (parameter count, FLOPs), without torch.

Kept torch-free so `llmdiag run` can reject a bad layout (heads not divisible by tp, pp larger than the
layer count) before a single process starts, and so the manifest's FLOPs come from one formula.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from workloads.errors import WorkloadError


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-style decoder: RMSNorm, RoPE, SwiGLU, causal attention with optional GQA."""

    size: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    batch: int  # default global batch in sequences
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params(self) -> int:
        """Every parameter, embeddings and output head included (they are not tied)."""
        h, hd = self.hidden, self.head_dim
        attn = h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h
        layer = attn + 3 * h * self.ffn + 2 * h
        return 2 * self.vocab * h + self.layers * layer + h

    def flop_params(self) -> int:
        """Parameters that take part in matmuls: all but the input embedding, which is a lookup."""
        return self.params() - self.vocab * self.hidden

    def flops_per_token(self) -> float:
        """6·N + 12·layers·hidden·seq_len: forward + backward, causal attention counted in full (PaLM MFU)."""
        return 6.0 * self.flop_params() + 12.0 * self.layers * self.hidden * self.seq_len

    def manifest(self) -> dict:
        d = asdict(self)
        d.pop("batch")
        d["params"] = self.params()
        return d


# Named sizes. `tiny` is the CPU default (~0.85 M parameters, 3.4 MB in fp32); 8 heads and 4 kv heads so
# that tp2/tp4 work. The others follow public shapes: 125m (GPT-3 small / OPT-125m with SwiGLU), 1b (Llama 3.2
# 1B), 8b (Llama 3 8B).
SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", layers=4, hidden=128, heads=8, kv_heads=4, ffn=384, vocab=256, seq_len=64, batch=8),
    "125m": ModelConfig("125m", layers=12, hidden=768, heads=12, kv_heads=12, ffn=2048, vocab=32000, seq_len=1024,
                        batch=8),
    "1b": ModelConfig("1b", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, seq_len=2048,
                      batch=8, rope_theta=500000.0),
    "8b": ModelConfig("8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq_len=8192,
                      batch=8, rope_theta=500000.0),
}


def model_config(size: str, *, layers: int | None = None, hidden: int | None = None,
                 seq_len: int | None = None, batch: int | None = None) -> ModelConfig:
    """The named size with overrides. A new hidden size rescales the SwiGLU width to ~8/3·hidden (multiple of 64)."""
    if size not in SIZES:
        raise WorkloadError(f"unknown model size {size!r}", hint="one of " + ", ".join(SIZES))
    cfg = SIZES[size]
    for name, value in (("--layers", layers), ("--hidden", hidden), ("--seq-len", seq_len), ("--batch", batch)):
        if value is not None and value < 1:
            raise WorkloadError(f"{name} must be >= 1, got {value}")
    if hidden is not None and hidden != cfg.hidden:
        cfg = replace(cfg, hidden=hidden, ffn=-(-int(8 * hidden / 3) // 64) * 64)
    if layers is not None:
        cfg = replace(cfg, layers=layers)
    if seq_len is not None:
        cfg = replace(cfg, seq_len=seq_len)
    if batch is not None:
        cfg = replace(cfg, batch=batch)
    if cfg.hidden % cfg.heads or cfg.head_dim % 2:
        raise WorkloadError(f"hidden {cfg.hidden} must split into {cfg.heads} heads of even size")
    return cfg
