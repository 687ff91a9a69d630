"""Model shapes and their arithmetic (parameter count, FLOPs), without torch.

Kept torch-free so `llmdiag run` can reject a bad layout (heads not divisible by tp, pp larger than the
layer count) before a single process starts, and so the manifest's FLOPs come from one formula.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from llmdiag.workloads.errors import WorkloadError


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
    # Mixture of experts (0 experts: dense). Every `moe_every`-th layer (1, 1+k, ...) swaps SwiGLU for a
    # router + `moe_experts` SwiGLU experts of width `ffn`, `moe_topk` experts per token.
    moe_experts: int = 0
    moe_topk: int = 2
    moe_every: int = 1
    moe_capacity: float = 0.0  # capacity factor per source rank (0: no token dropped)
    moe_route_skew: float = 0.0  # planted routing: this share of tokens goes to expert 0 first (0: the router)
    moe_aux_weight: float = 0.01  # weight of the per-sequence load-balancing loss

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe_experts > 0 and layer % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params(self) -> int:
        """Every parameter, embeddings and output head included (they are not tied)."""
        h, hd = self.hidden, self.head_dim
        attn = h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h
        layer = attn + 3 * h * self.ffn + 2 * h
        moe_extra = self.moe_layers * (h * self.moe_experts + 3 * h * self.ffn * (self.moe_experts - 1))
        return 2 * self.vocab * h + self.layers * layer + h + moe_extra

    def active_params(self) -> int:
        """Parameters one token passes through: with MoE only top-k experts' (and the router's)."""
        inactive = self.moe_layers * 3 * self.hidden * self.ffn * (self.moe_experts - self.moe_topk)
        return self.params() - inactive

    def flop_params(self) -> int:
        """Parameters that take part in matmuls: all but the input embedding, which is a lookup."""
        return self.active_params() - self.vocab * self.hidden

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
                 seq_len: int | None = None, batch: int | None = None, moe_experts: int = 0, moe_topk: int = 2,
                 moe_every: int = 1, moe_capacity: float = 0.0, moe_route_skew: float = 0.0,
                 moe_aux_weight: float = 0.01) -> ModelConfig:
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
    if moe_experts:
        if moe_topk < 1 or moe_every < 1:
            raise WorkloadError(f"--moe-topk {moe_topk} and --moe-every {moe_every} must be >= 1")
        if moe_topk > moe_experts:
            raise WorkloadError(f"--moe-topk {moe_topk} is more than --moe-experts {moe_experts}")
        if moe_capacity < 0 or not 0 <= moe_route_skew <= 1 or moe_aux_weight < 0:
            raise WorkloadError("--moe-capacity and --moe-aux-weight must be >= 0, --moe-route-skew in [0, 1]")
        cfg = replace(cfg, moe_experts=moe_experts, moe_topk=moe_topk, moe_every=moe_every,
                      moe_capacity=moe_capacity, moe_route_skew=moe_route_skew, moe_aux_weight=moe_aux_weight)
    elif moe_experts < 0:
        raise WorkloadError(f"--moe-experts must be >= 0, got {moe_experts}")
    elif moe_route_skew or moe_capacity:
        raise WorkloadError("--moe-route-skew/--moe-capacity need --moe-experts")
    if cfg.hidden % cfg.heads or cfg.head_dim % 2:
        raise WorkloadError(f"hidden {cfg.hidden} must split into {cfg.heads} heads of even size")
    return cfg
