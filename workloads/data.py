"""Synthetic token batches: fixed seed, learnable, identical wherever a layout needs them identical.

Each sequence is an arithmetic progression modulo the vocabulary (random start and stride 1..8), so the
loss falls quickly once the model picks up the stride in context: a visible sign that training works. The
global batch of step k is a pure function of (seed, k); every rank draws the same batch and keeps its slice:
rows by data-parallel replica (dp x fsdp), columns by cp rank. TP and PP peers therefore see the same rows.
"""

from __future__ import annotations

import torch


def global_batch(step: int, batch: int, seq_len: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """[batch, seq_len + 1] int64 tokens for optimizer step `step`."""
    gen = torch.Generator().manual_seed(seed * 7919 + step)
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 9, (batch, 1), generator=gen)
    return (start + stride * torch.arange(seq_len + 1)) % vocab


def local_batch(step: int, *, batch: int, seq_len: int, vocab: int, seed: int, replica: int, replicas: int,
                cp_rank: int = 0, cp: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of one rank: its replica's rows, its cp chunk of the sequence."""
    tokens = global_batch(step, batch, seq_len, vocab, seed)
    rows = tokens.chunk(replicas, dim=0)[replica]
    inputs, targets = rows[:, :-1], rows[:, 1:]
    chunk = seq_len // cp
    cols = slice(cp_rank * chunk, (cp_rank + 1) * chunk)
    return inputs[:, cols].contiguous(), targets[:, cols].contiguous()
