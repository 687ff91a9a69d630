"""Context parallelism: each cp rank holds a contiguous chunk of the sequence; attention runs as a ring.

Why by hand: torch's own `context_parallel` dispatches on the CUDA SDPA kernels (flash / efficient / cudnn);
on CPU, SDPA runs `_scaled_dot_product_flash_attention_for_cpu`, which it does not intercept, so it cannot
run on gloo. This is picotron's ring attention: K/V blocks travel around the ring with `batch_isend_irecv`
(the next block is in flight while the current one is computed), partial outputs are merged with the online
softmax (log-sum-exp) rule, and the backward sends dK/dV accumulators around the ring with their blocks so
they arrive home after `cp` hops. Causal masking with contiguous chunks: rank r attends fully to the chunks of
ranks < r, causally to its own, not at all to later ones (no load balancing: later ranks do more work, which
the analyzer sees as skew).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def apply_cp(module: nn.Module, cp_group: dist.ProcessGroup) -> None:
    """Point every attention at the cp group; RoPE then offsets positions by cp_rank x local length."""
    rank = dist.get_rank(cp_group)
    for m in module.modules():
        if hasattr(m, "cp_group") and hasattr(m, "cp_rank"):
            m.cp_group, m.cp_rank = cp_group, rank


class _Ring:
    """Shift tensors one hop: send to cp rank r+1, receive from r-1."""

    def __init__(self, group: dist.ProcessGroup):
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.size)

    def start(self, tensors: list[torch.Tensor], tag: int) -> tuple[list, list[torch.Tensor]]:
        send = [t.contiguous() for t in tensors]  # referenced by `ops` until the works are waited on
        recv = [torch.empty_like(t) for t in send]
        ops = []
        for i, (t, r) in enumerate(zip(send, recv)):
            ops.append(dist.P2POp(dist.isend, t, self.next, self.group, tag=tag + i))
            ops.append(dist.P2POp(dist.irecv, r, self.prev, self.group, tag=tag + i))
        return (dist.batch_isend_irecv(ops), ops), recv

    @staticmethod
    def wait(pending: tuple) -> None:
        for w in pending[0]:
            w.wait()


def _scores(q, k, scale, causal):
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group):
        ring = _Ring(group)
        scale = q.shape[-1] ** -0.5
        dtype = q.dtype
        acc = torch.promote_types(dtype, torch.float32)  # bf16 inputs accumulate in fp32
        qf, kf, vf = (t.to(acc).contiguous() for t in (q, k, v))
        out = lse = None
        cur_k, cur_v = kf, vf
        for step in range(ring.size):
            if step + 1 < ring.size:
                works, (nk, nv) = ring.start([cur_k, cur_v], tag=0)
            if step <= ring.rank:  # the block came from rank (r - step): earlier in the sequence, or our own
                s = _scores(qf, cur_k, scale, causal=step == 0)
                b_lse = torch.logsumexp(s, dim=-1, keepdim=True)
                b_out = torch.matmul(torch.exp(s - b_lse), cur_v)
                if out is None:
                    out, lse = b_out, b_lse
                else:
                    new_lse = torch.logaddexp(lse, b_lse)
                    out = torch.exp(lse - new_lse) * out + torch.exp(b_lse - new_lse) * b_out
                    lse = new_lse
            if step + 1 < ring.size:
                ring.wait(works)
                cur_k, cur_v = nk, nv
        ctx.save_for_backward(qf, kf, vf, out, lse)
        ctx.group, ctx.dtype = group, dtype
        return out.to(dtype)

    @staticmethod
    def backward(ctx, dout):
        qf, kf, vf, out, lse = ctx.saved_tensors
        ring = _Ring(ctx.group)
        scale = qf.shape[-1] ** -0.5
        dout = dout.to(qf.dtype)
        delta = (dout * out).sum(-1, keepdim=True)
        dq = torch.zeros_like(qf)
        dk, dv = torch.zeros_like(kf), torch.zeros_like(vf)  # accumulators travelling with their K/V block
        cur_k, cur_v = kf, vf
        for step in range(ring.size):
            if step + 1 < ring.size:
                kv_works, (nk, nv) = ring.start([cur_k, cur_v], tag=0)
            if step <= ring.rank:
                p = torch.exp(_scores(qf, cur_k, scale, causal=step == 0) - lse)
                dv = dv + torch.matmul(p.transpose(-2, -1), dout)
                ds = p * (torch.matmul(dout, cur_v.transpose(-2, -1)) - delta)
                dq += torch.matmul(ds, cur_k) * scale
                dk = dk + torch.matmul(ds.transpose(-2, -1), qf) * scale
            if ring.size > 1:  # after `size` hops each accumulator is back with its owner
                d_works, (dk, dv) = ring.start([dk, dv], tag=2)
                ring.wait(d_works)
            if step + 1 < ring.size:
                ring.wait(kv_works)
                cur_k, cur_v = nk, nv
        return dq.to(ctx.dtype), dk.to(ctx.dtype), dv.to(ctx.dtype), None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Causal attention over the full sequence, each rank holding its chunk. [B, H, S_local, D] in and out."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        return _RingAttention.apply(q, k, v, group)
