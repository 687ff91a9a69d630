"""Which process group each collective of a rank ran on: the group's name and its members.

Two groups can share a name (DeviceMesh names every tensor-parallel group `mesh_tp`; Megatron every one
TENSOR_MODEL_PARALLEL_GROUP): a group is its name and its ranks, and the cross-rank matching is keyed on
both (`Group.key`, e.g. `mesh_tp[0, 1]`), so no collective is matched, and no wait drawn, across groups.
Evidence, in order:

1. the collective's own args (NCCL kernels, `record_param_comms`): `Process Group Description` (else
   `Process Group Name`) and `Process Group Ranks`;
2. the rank's `distributedInfo.pg_config`: a group name's description and full rank list (Kineto cuts
   `Process Group Ranks` after 30 ranks); where neither gives the members of a DeviceMesh group
   (`mesh_tp`), the run's manifest does (its mesh coordinates; `with_mesh_members`, in the cross-rank pass);
3. gloo spans (`gloo:all_reduce`, ...) carry no args at all. gloo runs each group's collectives on that
   group's own worker threads (`pt_gloo_runloop`, created together when the group is created), so the
   span's thread names its group: the worker threads that ran spans, in id order, taken two by two (gloo
   starts two per group on one device) are the rank's `pg_config` groups in creation order. Read only where
   every group shows both workers; ids rise in creation order (unless the pid counter wraps mid-setup),
   but they are the host's, so other ranks' threads fall inside and between groups alike: gaps do not cut.
   send/recv run inline on the caller's thread (that thread is no group's): they are the pipeline group's
   where the rank has exactly one (named `pp`), whose workers then likely stay idle. The fewest groups are
   tried first: without the default group (which DeviceMesh training never uses) and the inline-talking
   pipeline group, then without one of them, then all. Where two such sets of one size both fit (drop the
   default or the pipeline group?), only the runs they agree on are assigned; where no set fits the
   group stays unknown, never guessed.
"""

from __future__ import annotations

import operator
import zlib
from functools import cached_property

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.layout import pg_config
from llmdiag.diagnose.model.format import ranges
from llmdiag.diagnose.model.roles import pg_role
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.model.lazy_re import lazy_compile

LONG = 30  # members written out in full up to this many (Kineto's own cut)
Ranks = tuple[int, ...] | range  # a group's members; a range for a long strided run (parse_ranks)
_LIST = lazy_compile(r"^\[\s*(\d+(?:\s*,\s*\d+)*)?\s*\]$")


@dataclass(frozen=True)
class Group:
    label: str  # the group's description, else its name ("mesh_tp", "default_pg", "3"); "" unknown
    ranks: Ranks | str | None = None  # its members (a range where pg_config lists a long strided run); the
    # trace's own text where it is cut ("[0, 8, ...]")

    @cached_property
    def key(self) -> str:
        """What the cross-rank matching is keyed on: name and members, as Kineto writes them (`mesh_tp[0, 1]`);
        past LONG members as ranges (`mesh_dp[0-16376 step 8]`, a checksum where even those are cut), so a
        16k-rank job's keys stay short. Computed once per group, however many collectives read it."""
        if isinstance(self.ranks, str):
            return f"{self.label}{self.ranks}"
        if not self.ranks:
            return self.label
        if len(self.ranks) <= LONG:
            return f"{self.label}[{', '.join(map(str, self.ranks))}]"
        run = self.ranks if isinstance(self.ranks, range) and self.ranks.step > 0 else None
        r = [] if run else sorted(self.ranks)
        if run or (run := as_range(r)):  # `ranges`' text of a strided run, without its Python loop over the run
            return f"{self.label}[{run[0]}-{run[-1]}{f' step {run.step}' if run.step != 1 else ''}]"
        text = ranges(r)
        if text.endswith("more)"):
            text += f" #{zlib.crc32(','.join(map(str, r)).encode()):08x}"
        return f"{self.label}[{text}]"

    @property
    def size(self) -> int | None:
        return len(self.ranks) if isinstance(self.ranks, (tuple, range)) and self.ranks else None


def as_range(v: list[int]) -> range | None:
    """`v` (ints) as the range it lists where it is an ascending, evenly strided run of three or more, else None.
    Checked by comparisons run in C: PyTorch writes the default group (every rank) and DeviceMesh's strided
    groups into every trace, so a Python loop over them costs each rank of a 16k-rank job time in proportion
    to the world (issue #27's scale ladder)."""
    n = len(v)
    if n < 3 or (step := v[1] - v[0]) <= 0 or v[-1] - v[0] != step * (n - 1):
        return None
    run = range(v[0], v[-1] + 1, step)
    return run if v == list(run) else None


def _label(desc, name) -> str:
    desc, name = str(desc or ""), str(name or "")
    return desc if desc and desc not in ("undefined", "None") else name


def parse_ranks(v) -> Ranks | None:
    """A rank list from a list or its text ("[0, 1]"); None where it is absent, cut or not a list of ranks. A
    list of more than LONG ranks that is a strided run (`pg_config`'s world-sized groups) comes back as its
    range: checked in C, then sized, searched and keyed in constant time, whatever the world."""
    if isinstance(v, list) and v and operator.countOf(map(type, v), int) == len(v):  # ints, not bools: in C
        if len(v) > LONG and (run := as_range(v)) is not None:
            return run if run.start >= 0 else None
        return tuple(v) if min(v) >= 0 else None
    if isinstance(v, str) and len(v) < 1_000_000 and (m := _LIST.match(v.strip())) and m.group(1):
        return tuple(int(x) for x in m.group(1).split(","))
    return None


def own_groups(cfg: list[dict], rank: int | None) -> list[Group]:
    """The rank's groups from its parsed pg_config, in creation order (the order PyTorch lists them)."""
    out = []
    for g in cfg:
        ranks = parse_ranks(g.get("ranks"))
        if ranks and (rank is None or rank in ranks):
            out.append(Group(_label(g.get("pg_desc"), g.get("pg_name")), ranks))
    return out


def _is_default(cfg: list[dict], g: Group) -> bool:
    first = cfg[0] if cfg else {}
    return g.label == "default_pg" or (g.label == str(first.get("pg_name", "")) and str(first.get("pg_name")) == "0")


def resolve(t: RankTrace, idx: np.ndarray) -> dict[int, Group]:
    """The group of each communication event `idx` (indices into the trace)."""
    cfg = pg_config(t.distributed)  # parsed once (older traces write it as a Python repr, megabytes at scale)
    by_name = {str(g.get("pg_name")): g for g in cfg if g.get("pg_name") is not None}
    gloo = _gloo_groups(t, idx, cfg)
    out: dict = {}
    seen: dict = {}
    for i in idx.tolist():
        args = t.comm_args.get(i, {})
        name, desc, raw = args.get("Process Group Name"), args.get("Process Group Description"), args.get("Process Group Ranks")
        memo = (str(name), str(desc), raw if isinstance(raw, str) else repr(raw)[:4000])
        g = seen.get(memo)  # thousands of collectives, a handful of groups: each read once
        if g is None:
            g = seen[memo] = _group(name, desc, raw, by_name)
        out[i] = gloo[i] if not g.label and g.ranks is None and i in gloo else g
    return out


def _group(name, desc, raw, by_name: dict) -> Group:
    label = _label(desc, name)
    ranks: Ranks | str | None = parse_ranks(raw)
    cfg_g = by_name.get(str(name)) if name is not None else None
    if cfg_g is not None:
        label = _label(cfg_g.get("pg_desc"), name) if label == str(name) else label
        ranks = ranks or parse_ranks(cfg_g.get("ranks"))
    if ranks is None and isinstance(raw, str) and raw:
        ranks = raw[:2000]  # cut by Kineto and not in pg_config: the trace's own text still tells groups apart
    return Group(label, ranks)


def _gloo_groups(t: RankTrace, idx: np.ndarray, cfg: list[dict]) -> dict[int, Group]:
    """gloo spans -> the group whose worker threads ran them (see the module doc); {} where it does not read."""
    names = t.names
    spans = [i for i in idx.tolist() if names[t.name[i]].startswith("gloo:")]
    if not spans:  # an NCCL job: the pg_config groups are not read here at all
        return {}
    groups = own_groups(cfg, t.rank)
    if not groups:
        return {}
    gloo = t.name_mask(lambda n: n.startswith("gloo:"))
    every = np.flatnonzero(gloo)  # the threads of all gloo spans, in the windows or not
    callers = set(distinct(t.thread[t.name_mask(_P2P.__contains__, gloo)]).tolist())  # gloo runs send/recv
    keys = {t.threads[k] for k in distinct(t.thread[every]).tolist()}
    if len({p for p, _ in keys}) != 1 or not all(type(tid) is int for _, tid in keys):
        return {}
    out: dict[int, Group] = {}
    pp = [g for g in groups if pg_role("send", g.label, None, None) == "pp"]
    p2p = bool(callers) and len(pp) == 1  # on the caller's own thread, not on a group's worker threads
    if p2p:
        out.update({i: pp[0] for i in spans if names[t.name[i]] in _P2P})
    tids = sorted(tid for k, (pid, tid) in enumerate(t.threads) if k not in callers and (pid, tid) in keys)
    idle = ([groups[0]] if _is_default(cfg, groups[0]) else []) + ([pp[0]] if p2p else [])
    cands = [[g for g in groups if g not in drop] for drop in ([], *([x] for x in idle), idle)]
    for n in sorted({len(c) for c in cands if c}):  # the fewest groups first (idle ones left out)
        clusters = _cut(tids, n, slack=min(max((t.world_size or 2) - 1, 1), HOST_RANKS - 1))
        if clusters:  # where two sets of groups of this size read alike, only the runs they agree on
            maps = [dict(enumerate(c)) for c in cands if len(c) == n]
            of_tid = {tid: maps[0][k] for k, c in enumerate(clusters) for tid in c
                      if all(m[k] == maps[0][k] for m in maps)}
            by = {k: of_tid[tid] for k, (_, tid) in enumerate(t.threads) if tid in of_tid}
            out.update({i: by[int(t.thread[i])] for i in spans if int(t.thread[i]) in by})
            break
    return out


_P2P = {"gloo:send", "gloo:recv", "gloo:recv_anysource"}


HOST_RANKS = 8  # ranks of one host that create a group's workers at the same moment (one per device)


def _cut(tids: list[int], n: int, k: int = 2, slack: int = 0) -> list[list[int]] | None:
    """Worker thread ids (sorted) -> n runs of k, one per group in creation order; None unless every group
    shows all its k workers (gloo starts 2 per device; one device) and no run spans a wider gap than one
    between runs, or than `slack` + 1. The ids are the host's: other ranks' threads fall between one group's
    workers as often as between two groups' (gaps of 1 to 3 either way, seen on 8 ranks), so the gaps alone do
    not cut. The host's other ranks create the same group at the same moment, each putting up to one id
    between a rank's two workers (`slack`: the other ranks of a host, up to HOST_RANKS - 1): fsdp2tp2 under
    load left rank 0's workers at 26012, 26014 between rank 2's 26011, 26013, and a next group one id on
    would read as no groups at all. Ids rise in creation order, so with every worker present the runs are
    the groups; the gap check only turns away a wrap of the pid counter or a thread that is no worker."""
    if len(tids) != n * k:
        return None
    runs = [tids[j:j + k] for j in range(0, len(tids), k)]
    inside = max((r[-1] - r[0] for r in runs), default=0)
    between = min((b[0] - a[-1] for a, b in zip(runs, runs[1:])), default=inside + 1)
    return runs if inside <= max(between, slack + 1) else None


