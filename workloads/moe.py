"""Mixture-of-experts FFN (Mixtral/DeepSeek style): router, top-k SwiGLU experts, dispatch/combine over EP.

Router: softmax over `E` logits, top-k, gates renormalised over the chosen k (Mixtral). Balance: DeepSeek-V3's
*sequence-wise* auxiliary loss E·Σ_e f_e·P_e per sequence, averaged over sequences: it is linear in the batch
rows, so data-parallel ranks averaging their gradients reproduce the single-process gradient exactly. The aux
loss reaches the router through `_AuxGrad` (Megatron's MoEAuxLossAutoScaler): its gradient is injected in
backward, so no training loop, pipeline schedule or loss function needs to know about it.

Experts live in an `nn.ModuleDict` keyed by *global* expert id, so a rank holding experts 2..3 names them
`experts.2`, `experts.3` and `model.materialize` draws exactly the single-process weights for them. With an
EP group, token copies travel to the rank owning their expert by `all_to_all_single` with uneven splits
(the counts are exchanged first, one all-to-all of E numbers) and come back the same way (combine).

`--moe-route-skew s` replaces the router's choice (not its gates) by a planted one: the first round(s·T)
tokens of each rank pick experts 0..k-1, token j of the others picks (j + c) mod E for its c-th choice; see
`planted_experts`. The token counts per expert are then known in advance (tests compare the analyzer with them).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from llmdiag.workloads.config import ModelConfig
from llmdiag.workloads.ffn import FeedForward  # an expert is the dense SwiGLU FFN


def planted_experts(tokens: int, experts: int, topk: int, skew: float) -> torch.Tensor:
    """[tokens, topk] expert ids of the planted routing (distinct per token)."""
    j = torch.arange(tokens)[:, None]
    c = torch.arange(topk)[None, :]
    hot = j < round(skew * tokens)
    return torch.where(hot, c, (j + c) % experts)


class _AuxGrad(torch.autograd.Function):
    """Identity on `x`; in backward the auxiliary loss receives gradient `scale` (d(total)/d(aux))."""

    @staticmethod
    def forward(ctx, x, aux, scale: float):
        ctx.scale = scale
        ctx.save_for_backward(aux)
        return x

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """Differentiable all_to_all_single with uneven splits (backward sends the gradients back the same way)."""
    from torch.distributed.nn.functional import all_to_all_single

    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
    return all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)


class MoE(nn.Module):
    """Router + experts. `ep_group`/`ep_rank`/`ep_size` are set by workloads.parallel.ep (None: all local)."""

    def __init__(self, cfg: ModelConfig, expert_ids: list[int] | None = None):
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.hidden, cfg.moe_experts, bias=False)
        ids = range(cfg.moe_experts) if expert_ids is None else expert_ids
        self.experts = nn.ModuleDict({str(e): FeedForward(cfg) for e in ids})
        self.ep_group = None
        self.ep_size = 1
        self.aux_scale = 1.0  # 1/grad_accum under gradient accumulation, set by the trainer
        self.last_counts: torch.Tensor | None = None  # tokens per expert routed by this rank, last forward

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(expert ids [T,k], gates [T,k], per-sequence aux loss) for x [B,S,h]."""
        cfg = self.cfg
        b, s, _ = x.shape
        probs = F.softmax(self.router(x).float(), dim=-1)  # [B,S,E]
        flat = probs.flatten(0, 1)
        if cfg.moe_route_skew > 0:
            idx = planted_experts(b * s, cfg.moe_experts, cfg.moe_topk, cfg.moe_route_skew).to(x.device)
            top = flat.gather(1, idx)
        else:
            top, idx = flat.topk(cfg.moe_topk, dim=-1)
        gates = top / top.sum(-1, keepdim=True)
        onehot = F.one_hot(idx.view(b, s * cfg.moe_topk), cfg.moe_experts).float()  # [B, S*k, E]
        f = onehot.mean(1) * cfg.moe_experts  # [B,E]: share of the sequence's picks, x E
        aux = (f * probs.mean(1)).sum(-1).mean()
        return idx, gates.to(x.dtype), aux

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        b, s, h = x.shape
        idx, gates, aux = self.route(x)
        if self.training and cfg.moe_aux_weight > 0:
            x = _AuxGrad.apply(x, aux, cfg.moe_aux_weight * self.aux_scale)
        tokens = x.reshape(b * s, h)
        k, e_all = cfg.moe_topk, cfg.moe_experts
        slot_expert = idx.reshape(-1)  # slot = token * k + choice
        keep = self._capacity_mask(slot_expert, b * s)
        order = torch.argsort(slot_expert * 2 + (~keep).long(), stable=True)  # by expert, dropped last
        order = order[keep[order]]
        sorted_expert = slot_expert[order]
        counts = torch.bincount(sorted_expert, minlength=e_all)
        self.last_counts = counts.detach().cpu()
        with record_function("llmdiag/moe/dispatch"):
            send = tokens[order // k]
            recv, recv_counts = self._dispatch(send, counts)
        with record_function("llmdiag/moe/experts"):
            out = self._run_experts(recv, recv_counts)
        with record_function("llmdiag/moe/combine"):
            back = self._combine(out, counts, recv_counts)
            y = torch.zeros(b * s * k, h, dtype=back.dtype, device=back.device)
            y = y.index_copy(0, order, back)
            y = (y.view(b * s, k, h) * gates.view(b * s, k, 1)).sum(1)
        return y.view(b, s, h)

    def _capacity_mask(self, slot_expert: torch.Tensor, tokens: int) -> torch.Tensor:
        """Slots kept: with capacity factor c, each expert takes the first ceil(c·T·k/E) of this rank's slots."""
        keep = torch.ones_like(slot_expert, dtype=torch.bool)
        if self.cfg.moe_capacity <= 0:
            return keep
        cap = -(-int(self.cfg.moe_capacity * tokens * self.cfg.moe_topk) // self.cfg.moe_experts)
        onehot = F.one_hot(slot_expert, self.cfg.moe_experts)
        rank_in_expert = (onehot.cumsum(0) * onehot).sum(1)  # 1-based position of the slot in its expert queue
        return rank_in_expert <= cap

    def _dispatch(self, send: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Send token copies (sorted by expert) to the experts' ranks; returns them and counts [ep, E_local]."""
        if self.ep_group is None:
            return send, counts.view(1, -1)
        ep, local = self.ep_size, self.cfg.moe_experts // self.ep_size
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.ep_group)  # E numbers: what each peer sends me
        recv_counts = recv_counts.view(ep, local)
        in_splits = counts.view(ep, local).sum(1).tolist()
        out_splits = recv_counts.sum(1).tolist()
        return _a2a(send, out_splits, in_splits, self.ep_group), recv_counts

    def _run_experts(self, recv: torch.Tensor, recv_counts: torch.Tensor) -> torch.Tensor:
        """Rows arrive grouped by source rank, then by local expert; each expert runs once on all its rows."""
        ids = [int(e) for e in self.experts.keys()]
        chunks = recv.split(recv_counts.reshape(-1).tolist())  # (source, local expert) order
        n_local = len(ids)
        outs = list(chunks)
        for j, e in enumerate(ids):
            mine = [c for i, c in enumerate(chunks) if i % n_local == j]
            res = self.experts[str(e)](torch.cat(mine)) if mine else None
            pos = 0
            for i in range(j, len(chunks), n_local):
                outs[i] = res[pos:pos + len(chunks[i])]
                pos += len(chunks[i])
        return torch.cat(outs) if outs else recv

    def _combine(self, out: torch.Tensor, counts: torch.Tensor, recv_counts: torch.Tensor) -> torch.Tensor:
        if self.ep_group is None:
            return out
        ep = self.ep_size
        in_splits = recv_counts.sum(1).tolist()
        out_splits = counts.view(ep, -1).sum(1).tolist()
        return _a2a(out, out_splits, in_splits, self.ep_group)


def moe_modules(module: nn.Module) -> list[MoE]:
    return [m for m in module.modules() if isinstance(m, MoE)]


def is_expert_param(name: str) -> bool:
    return ".experts." in f".{name}"
