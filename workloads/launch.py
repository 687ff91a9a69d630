"""`llmdiag run`: start every rank through the real torchrun, watch it, and never hang.

torchrun (`python -m torch.distributed.run`) runs as a child in its own session; its output goes to
logs/torchrun.log and rank 0's progress lines are echoed. When a rank raises or dies, torchrun stops the
others and exits; when a rank hangs, nothing exits, so `--timeout` ends it: SIGUSR1 first (every rank dumps
its Python stacks into its log via faulthandler), then SIGTERM to torchrun (which stops its workers), then
SIGKILL to whatever is left. Ranks are judged by their result records, not by exit codes (a finished rank
leaves through os._exit(0); a killed one leaves its record at `running`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime

from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads import manifest as man
from llmdiag.workloads.grammar import check_ranks
from llmdiag.workloads.interrupts import Interrupted, restore_signals, trap_signals
from llmdiag.workloads.options import LaunchOptions, RunPlan
from llmdiag.workloads.optspec import to_argv
from llmdiag.workloads.rankio import die_with_parent, now_iso
from llmdiag.workloads.tracecheck import fresh_file, incomplete_trace

_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def default_out(workload: str) -> str:
    return os.path.join("runs", f"{workload}-{datetime.now():%Y%m%d-%H%M%S}")


def _gpu_driver_present() -> bool:
    """Cheap check before paying for `import torch` (~3 s) in the launcher: any NVIDIA or ROCm driver?"""
    return any(os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd"))


def resolve_device(requested: str) -> tuple[str, int]:
    """(cpu|cuda, visible GPU count) for `--device auto|cpu|cuda`. The launcher resolves before the ranks start
    and passes the result on; a rank started by hand with `auto` resolves through here too."""
    if requested == "cpu" or (requested == "auto" and not _gpu_driver_present()):
        return "cpu", 0
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count()
    if requested == "cuda":
        raise WorkloadError("--device cuda but torch sees no CUDA device")
    return "cpu", 0


def _device_info(kind: str) -> tuple[dict, str]:
    if kind == "cuda":
        import torch

        props = torch.cuda.get_device_properties(0)
        return ({"type": "cuda", "name": props.name, "memory_bytes": int(props.total_memory),
                 "peak_flops": man.peak_flops(props.name), "count": torch.cuda.device_count()}, torch.__version__)
    from importlib.metadata import version

    return ({"type": "cpu", "name": man.cpu_name(), "memory_bytes": man.host_memory(), "peak_flops": None,
             "count": 1}, version("torch"))


def _log_tail(out: str, rank: int, lines: int = 20) -> str:
    try:
        with open(os.path.join(out, "logs", f"rank{rank}.log"), errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _torchrun_dies_with_us() -> None:
    """In the forked torchrun, before exec: SIGTERM when the launcher dies (even by SIGKILL), which makes
    torchrun stop its workers; the ranks themselves die with torchrun (rankio.die_with_parent)."""
    die_with_parent(signal.SIGTERM)


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Launch:
    def __init__(self, run: RunPlan, lo: LaunchOptions, *, nproc: int, echo, echo_err):
        self.opts, self.plan, self.nproc = run.options, run.plan, nproc
        self.nnodes, self.node_rank = lo.nnodes, lo.node_rank
        self.rdzv_endpoint, self.timeout, self.fault = lo.rdzv_endpoint, lo.timeout, lo.inject_fault
        self.echo, self.echo_err = echo, echo_err
        self.interrupted_by: int | None = None  # the signal that stopped the run (Ctrl-C: SIGINT)
        self.out = run.options.out
        self.local_ranks = range(lo.node_rank * nproc, (lo.node_rank + 1) * nproc)
        self.torchrun_output: list[str] = []
        self.command = self._command()

    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(self.nproc),
               "--nnodes", str(self.nnodes), "--max-restarts", "0"]
        if self.rdzv_endpoint:
            cmd += ["--rdzv-backend", "static", "--rdzv-endpoint", self.rdzv_endpoint,
                    "--node-rank", str(self.node_rank)]
        else:
            cmd += ["--standalone"]
        return cmd + ["-m", "llmdiag.workloads.train", *to_argv(self.opts)]

    def env(self) -> dict:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds llmdiag/
        # This package only: `python -m` puts the current folder first on the path (a ./llmdiag/workloads/train.py
        # there would run once per rank), so PYTHONSAFEPATH (3.11+) keeps it off, for torchrun and the ranks
        # alike; an empty PYTHONPATH entry means the current folder too, so those go.
        user = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([root, *user])
        env["PYTHONSAFEPATH"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        if self.opts.device == "cpu" and "OMP_NUM_THREADS" not in env:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.nproc))
        env.pop("LLMDIAG_FAULT", None)
        if self.fault:
            env["LLMDIAG_FAULT"] = self.fault
        return env

    def _pump(self, stream, logfile) -> None:
        for line in stream:
            logfile.write(line)
            logfile.flush()
            self.torchrun_output.append(line)
            if line.startswith("[llmdiag] "):
                self.echo("  " + line[len("[llmdiag] "):].rstrip())

    def run(self) -> tuple[int | None, str | None]:
        """Run torchrun to its end. Returns (torchrun exit code, None | "timeout" | "interrupted (SIGINT)")."""
        log_name = "torchrun.log" if self.nnodes == 1 else f"torchrun-node{self.node_rank}.log"
        stopped = None
        for r in self.local_ranks:  # the ranks append to these: fresh files, not links planted in a reused --out
            os.close(fresh_file(os.path.join(self.out, "logs", f"rank{r}.log")))
        # Python 3.10 has no PYTHONSAFEPATH: there torchrun and the ranks start in the run's logs/ folder instead
        cwd = None if sys.version_info >= (3, 11) else os.path.join(self.out, "logs")
        with os.fdopen(fresh_file(os.path.join(self.out, "logs", log_name)), "w") as logfile:
            proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", env=self.env(), start_new_session=True,
                                    preexec_fn=_torchrun_dies_with_us, cwd=cwd)
            pump = threading.Thread(target=self._pump, args=(proc.stdout, logfile), daemon=True)
            pump.start()
            # torchrun has its own session (no terminal Ctrl-C reaches it): forward our end to the ranks.
            handlers = trap_signals()
            deadline = time.monotonic() + self.timeout
            try:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        stopped = "timeout"
                        self.echo_err(f"llmdiag run: timeout after {self.timeout:.0f} s: dumping stacks, "
                                      "stopping ranks")
                        self._stop(proc)
                        break
                    time.sleep(0.2)
            except Interrupted as e:
                stopped = f"interrupted ({e})"
                self.interrupted_by = e.signum
                self.echo_err(f"llmdiag run: {stopped}: stopping ranks")
                self._stop(proc)
            finally:
                restore_signals(handlers)
            pump.join(timeout=5)
        return proc.returncode, stopped

    def _stop(self, proc: subprocess.Popen) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C must not leave ranks behind
            if threading.current_thread() is threading.main_thread():
                signal.signal(sig, signal.SIG_IGN)
        results = man.read_results(self.out, self.plan.layout.world_size)
        pids = [rec["pid"] for r, rec in results.items() if r in self.local_ranks and rec.get("status") == "running"]
        pids = sorted(set(pids) | set(_children(proc.pid)))
        for pid in pids:
            _signal(pid, signal.SIGUSR1)  # faulthandler: Python stacks of all threads into the rank's log
        time.sleep(1.5)
        _signal(proc.pid, signal.SIGTERM, group=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for pid in pids:  # each worker leads its own session (torchrun starts them so)
            _signal(pid, signal.SIGKILL, group=True)
        _signal(proc.pid, signal.SIGKILL, group=True)
        proc.wait()

    def torchrun_exit_codes(self) -> dict[int, int]:
        return {int(r): int(c) for r, c in _TORCHRUN_FAILURE.findall("".join(self.torchrun_output))}


def judge(out: str, world: int, local_ranks, results: dict, codes: dict[int, int], stopped: str | None,
          timeout: float) -> tuple[dict, dict | None]:
    """rank_status for every rank, and the failure to report (None when all ok)."""
    timed_out = stopped == "timeout"
    status = {}
    for r in range(world):
        rec = results.get(r)
        trace = os.path.join("traces", f"rank{r}.pt.trace.json.gz")
        entry = {"status": "missing", "exit_code": codes.get(r), "trace": trace if os.path.exists(
            os.path.join(out, trace)) else None, "error": None, "last_step": None, "losses": None,
            "step_times_ms": [], "profiled_step_ms": None, "unprofiled_step_ms": None}
        if rec:
            entry.update({k: rec.get(k) for k in ("last_step", "losses", "step_times_ms", "profiled_step_ms",
                                                   "unprofiled_step_ms", "peak_memory_bytes", "host")})
            entry["step_times_ms"] = entry["step_times_ms"] or []
        state = rec.get("status") if rec else None
        if state == "ok":
            entry["status"] = "ok"
            entry["exit_code"] = codes.get(r, 0)
        elif state == "failed":
            entry["status"] = "failed"
            entry["error"] = (rec.get("error") or "").split("\n")[0] + "\n" + _log_tail(out, r)
        elif rec or r in local_ranks:
            code = codes.get(r)
            entry["status"] = "timeout" if timed_out else "failed"
            if stopped and not timed_out:
                why = f"stopped: llmdiag run was {stopped}"
            elif code == -signal.SIGTERM and not timed_out:
                why = "stopped by torchrun (SIGTERM) after another rank failed"
            elif code is not None and code < 0:
                why = f"killed by signal {-code} ({signal.Signals(-code).name})"
            elif timed_out:
                why = f"still running at the {timeout:.0f} s timeout"
            elif not rec:
                why = "exited before writing its result record"
            else:
                why = "stopped by torchrun after another rank failed"
            entry["error"] = why + "\n" + _log_tail(out, r)
        status[str(r)] = entry

    bad = [r for r in range(world) if status[str(r)]["status"] != "ok"]
    if not bad:
        return status, None
    if stopped and not timed_out:
        return status, {"rank": None, "ranks": bad, "reason": f"llmdiag run was {stopped}"}
    if timed_out:
        hung = [r for r in bad if status[str(r)]["status"] == "timeout"]
        return status, {"rank": None, "ranks": hung, "reason": f"timeout after {timeout:.0f} s; ranks {hung} did not "
                        f"finish (last steps {[status[str(r)]['last_step'] for r in hung]}); stacks in their logs"}
    signalled = [r for r in bad if (codes.get(r) or 0) < 0 and codes[r] != -signal.SIGTERM]
    raised = sorted((results[r].get("ended_time") or 0, r) for r in bad if status[str(r)]["status"] == "failed"
                    and results.get(r, {}).get("status") == "failed")
    root = signalled[0] if signalled else (raised[0][1] if raised else bad[0])
    reason = status[str(root)]["error"].split("\n")[0]
    return status, {"rank": root, "ranks": bad, "reason": f"rank {root}: {reason}"}


def launch(run: RunPlan, lo: LaunchOptions, *, command: list[str] | None = None, echo=print,
           echo_err=None) -> int:
    """Run the workload `prepare` planned; returns the exit code (0 ok, 1 a rank failed or timed out, 128 + the
    signal when the user stopped it: 130 for Ctrl-C, as a shell reports it, so a script sees an interrupt, not a
    failed run). Nothing is derived again: the resolved device and absolute run folder go into a copy of the
    options (`replace`)."""
    echo_err = echo_err or (lambda s: print(s, file=sys.stderr))
    plan, opts = run.plan, run.options
    nnodes, node_rank, nproc_per_node, timeout = lo.nnodes, lo.node_rank, lo.nproc_per_node, lo.timeout
    device_kind, gpus = resolve_device(opts.device)
    cuda = device_kind == "cuda"
    if nproc_per_node is None:
        nproc_per_node = gpus if cuda else -(-plan.layout.world_size // nnodes)
    if cuda and nproc_per_node > gpus:
        raise WorkloadError(f"--nproc-per-node {nproc_per_node} but only {gpus} GPUs are visible")
    reason = (f"{nnodes} node(s) x {nproc_per_node} " + ("GPUs" if cuda else "processes")) + " per node"
    check_ranks(plan.workload, plan.layout.world_size, nnodes * nproc_per_node, reason)
    if nnodes > 1 and not opts.out:
        raise WorkloadError("multi-node runs need --out on a filesystem every node shares")
    out = os.path.abspath(opts.out or default_out(opts.workload))
    run = replace(run, options=(opts := replace(opts, device=device_kind, out=out)))
    results_dir = os.path.join(out, "results")
    if node_rank == 0 and (os.path.exists(os.path.join(out, "manifest.json"))
                           or (os.path.isdir(results_dir) and os.listdir(results_dir))):
        raise WorkloadError(f"{out} already holds a run", hint="choose another --out")
    for sub in ("traces", "results", "logs"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)

    cores = os.cpu_count() or 1
    oversubscribed = not cuda and nproc_per_node > cores
    device, torch_version = _device_info(device_kind)
    torchrun = Launch(run, lo, nproc=nproc_per_node, echo=echo, echo_err=echo_err)
    launch_info = {"launcher": "torchrun", "pid": os.getpid(), "host": socket.gethostname(), "nnodes": nnodes, "nproc_per_node": nproc_per_node,
                   "node_rank": node_rank, "rdzv_endpoint": lo.rdzv_endpoint, "timeout_s": timeout,
                   "torchrun_command": torchrun.command}
    manifest = man.build(run, device=device, torch_version=torch_version,
                         command=command or sys.argv, cpu_cores=cores, oversubscribed=oversubscribed,
                         launch=launch_info, started_at=now_iso())
    writes_manifest = node_rank == 0
    if writes_manifest:
        _write_manifest(out, manifest)

    pipe = f", {plan.pipeline.schedule} x{plan.pipeline.microbatches} microbatches" if plan.pipeline else ""
    echo(f"llmdiag run: {opts.workload} on {plan.layout.world_size} ranks ({manifest['backend']}, "
         f"{device['name']}), model {plan.model.size}{pipe}, {run.steps} steps -> {out}")
    if oversubscribed:
        echo(f"  note: {nproc_per_node} ranks on {cores} CPU cores: oversubscribed, step times are contaminated")

    rc, stopped = torchrun.run()
    left = _remove_partial_files(out, torchrun.local_ranks)
    if left:
        echo_err(f"  note: removed {left} partial file(s) of ranks stopped mid-write (traces/, results/)")
    results = man.read_results(out, plan.layout.world_size)
    for r, rec in results.items():
        manifest["ranks"][str(r)]["host"] = rec.get("host")
    for r in torchrun.local_ranks:  # "ok" is the rank's word; its trace must say so too (a full disk, RLIMIT_FSIZE)
        rec = results.get(r)
        if rec and rec.get("status") == "ok" and (why := incomplete_trace(
                os.path.join(out, "traces", f"rank{r}.pt.trace.json.gz"))):
            results[r] = {**rec, "status": "failed", "error": f"its trace is incomplete: {why}"}
    status, failure = judge(out, plan.layout.world_size, torchrun.local_ranks, results,
                            torchrun.torchrun_exit_codes(), stopped, timeout)
    manifest.update(rank_status=status, failure=failure, status="ok" if failure is None else "failed",
                    finished_at=now_iso())
    if writes_manifest:
        _write_manifest(out, manifest)
    _report(manifest, out, echo, echo_err)
    if failure is None and rc != 0:  # every record says ok: a rank stumbled after finishing (teardown)
        echo_err(f"  note: torchrun exited {rc} after every rank reported ok (see logs/torchrun.log)")
    if torchrun.interrupted_by is not None:
        return 128 + torchrun.interrupted_by
    return 0 if failure is None else 1


def _remove_partial_files(out: str, local_ranks) -> int:
    """Temp files left by ranks killed while writing (a trace export cut by SIGKILL leaves its .tmp JSON, MBs
    of it): torchrun has ended, so no rank of this node still writes them. Finished files are untouched."""
    n = 0
    for sub in ("traces", "results"):
        d = os.path.join(out, sub)
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            mine = tuple(f"rank{r}." for r in local_ranks) + tuple(f".rank{r}." for r in local_ranks)
            if name.endswith(".tmp") and name.startswith(mine):
                try:
                    os.unlink(os.path.join(d, name))
                    n += 1
                except OSError:
                    pass
    return n


def _write_manifest(out: str, manifest: dict) -> None:
    """One line, not a traceback, when the run folder cannot be written (disk full, read-only); the temp file
    is gone (rankio.atomic_write_json) and `analyze` marks a manifest left `running` stale once we are gone."""
    try:
        man.write(out, manifest)
    except OSError as e:
        raise WorkloadError(f"cannot write {os.path.join(out, 'manifest.json')}: {e.strerror or e}") from None


def _report(manifest: dict, out: str, echo, echo_err) -> None:
    for r, st in manifest["rank_status"].items():
        losses = st.get("losses") or []
        loss = f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else ""
        prof, unprof = st.get("profiled_step_ms"), st.get("unprofiled_step_ms")
        times = f"step {unprof:.1f} ms, profiled {prof:.1f} ms" if prof and unprof else ""
        echo(f"  rank {r}: {st['status']:<7} {times}  {loss}".rstrip())
    failure = manifest["failure"]
    if failure:
        echo_err(f"llmdiag run: FAILED: {failure['reason']}")
        shown = [failure["rank"]] if failure["rank"] is not None else failure["ranks"][:1]
        for r in shown:
            tail = _log_tail(out, r, 15)
            echo_err(f"--- {os.path.join(out, 'logs', f'rank{r}.log')} (last lines) ---\n{tail}")
        kept = [r for r, st in manifest["rank_status"].items() if st["trace"]]
        echo_err(f"run folder: {out} (traces kept for ranks {', '.join(kept) or 'none'})")
    else:
        echo(f"run folder: {out}")
