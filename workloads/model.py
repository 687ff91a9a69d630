"""A Llama-style decoder (RMSNorm, RoPE, SwiGLU, causal SDPA, GQA), written to be split and sharded.

Layers live in an `nn.ModuleDict` keyed "0".."L-1", so a pipeline stage that keeps layers 2..3 still names
them `layers.2`, `layers.3`; the embedding, final norm and output head are optional so a stage holds only
its own pieces. Attention reshapes with -1 heads, so the same code runs on the local heads of a TP shard.
Weights are initialised per parameter from a seed and the parameter's full name, so every layout starts
from exactly the single-process weights, whatever it keeps and however it shards them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from llmdiag.workloads.config import ModelConfig
from llmdiag.workloads.ffn import FeedForward


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


_ROPE_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def rope_tables(seq: int, offset: int, head_dim: int, theta: float, device, dtype):
    """cos/sin of shape [seq, head_dim] for positions offset..offset+seq (offset = cp rank x local seq)."""
    key = (seq, offset, head_dim, theta, str(device), dtype)
    if key not in _ROPE_CACHE:
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
        pos = torch.arange(offset, offset + seq, dtype=torch.float32, device=device)
        ang = torch.outer(pos, inv).repeat(1, 2)
        _ROPE_CACHE[key] = (ang.cos().to(dtype), ang.sin().to(dtype))
    return _ROPE_CACHE[key]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on [B, S, H, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        self.wq = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)
        # Set by workloads.parallel.cp: the context-parallel group and this rank's place in it.
        self.cp_group = None
        self.cp_rank = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        cos, sin = rope_tables(s, self.cp_rank * s, self.head_dim, self.theta, q.device, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
        if self.cp_group is not None:
            from llmdiag.workloads.parallel.cp import ring_attention

            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            out = ring_attention(q, k, v, self.cp_group)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0, expert_ids: list[int] | None = None):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        if cfg.is_moe_layer(layer):
            from llmdiag.workloads.moe import MoE

            self.feed_forward = MoE(cfg, expert_ids)
        else:
            self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """The whole model (defaults) or one pipeline stage: the given layers, plus embedding / head if first / last."""

    def __init__(self, cfg: ModelConfig, layer_ids: Iterable[int] | None = None, first: bool = True,
                 last: bool = True, expert_ids: list[int] | None = None):
        super().__init__()
        self.cfg = cfg
        ids = range(cfg.layers) if layer_ids is None else layer_ids
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.hidden) if first else None
        self.layers = nn.ModuleDict({str(i): Block(cfg, i, expert_ids) for i in ids})
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps) if last else None
        self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h)) if self.output is not None else h

    def pieces(self) -> list[tuple[str, nn.Module]]:
        """Top-level parts in model order: what is materialised, TP-sharded and FSDP-wrapped one at a time."""
        out = [("tok_embeddings", self.tok_embeddings)] if self.tok_embeddings is not None else []
        out += [(f"layers.{k}", m) for k, m in self.layers.items()]
        if self.output is not None:
            out += [("norm", self.norm), ("output", self.output)]
        return out


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def build(cfg: ModelConfig, layer_ids=None, first=True, last=True, expert_ids=None) -> Transformer:
    """Construct on the meta device: no memory until `materialize`. `expert_ids`: the experts this rank holds."""
    with torch.device("meta"):
        return Transformer(cfg, layer_ids, first, last, expert_ids)


@torch.no_grad()
def materialize(piece: nn.Module, prefix: str, cfg: ModelConfig, device: torch.device, dtype: torch.dtype,
                seed: int) -> None:
    """Allocate one piece on `device` and fill it deterministically.

    Each parameter draws from its own CPU generator seeded by (seed, full name), so values depend on neither
    the layout nor the device. Linear/embedding weights ~ N(0, 0.02); residual projections (wo, w2) are scaled
    by 1/sqrt(2·layers) as in GPT-2; norms start at 1.
    """
    piece.to_empty(device=device)
    for name, p in piece.named_parameters():
        full = f"{prefix}.{name}"
        if name.endswith("norm.weight") or full == "norm.weight":
            p.fill_(1.0)
            continue
        std = 0.02 / (2 * cfg.layers) ** 0.5 if full.endswith(("wo.weight", "w2.weight")) else 0.02
        gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(full.encode()))
        p.copy_(torch.empty(p.shape, dtype=torch.float32).normal_(0.0, std, generator=gen).to(dtype))
    piece.to(dtype)


def reference_model(cfg: ModelConfig, seed: int = 0, dtype=torch.float32) -> Transformer:
    """The whole model on CPU, as one process would train it: the baseline every layout is checked against."""
    model = build(cfg)
    for prefix, piece in model.pieces():
        materialize(piece, prefix, cfg, torch.device("cpu"), dtype, seed)
    return model
