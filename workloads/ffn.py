"""The SwiGLU feed-forward block: the dense layer of every Block, and each expert of an MoE layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from llmdiag.workloads.config import ModelConfig


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.w2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
