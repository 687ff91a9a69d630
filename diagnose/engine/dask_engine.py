"""The Dask engine: the per-rank jobs as dask.distributed futures, on a LocalCluster started and closed here
(`--dask-local N`) or on a running scheduler (`--scheduler`, DASK_SCHEDULER_ADDRESS, `--scheduler-file`).

Each result is taken as it completes (`as_completed`), put in its job's slot (job order, so the summary is the
local pool's byte for byte) and its future released at once, so neither the workers nor the scheduler hold
results; the coordinator keeps the RankOutputs only, as the pool does, because the cross-rank stage reads
them all.

Faults fail closed, with the local pool's contract, and every wait is bounded:
- a worker killed mid-trace: Dask runs the trace again on another worker (once on the LocalCluster started
  here: `allowed-failures` 1, and `worker-saturation` 1 so only the trace a worker ran is blamed for its death;
  an external scheduler's own settings, 3 by default); when that worker dies too, the trace is named as failed
  in one line and the other ranks are kept (exit 1);
- connecting waits `distributed.comm.timeouts.connect` (30 s; DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT),
  then one line `cannot reach the Dask scheduler at ADDRESS (...)`;
- a scheduler that goes away cancels the futures: one line `the Dask scheduler went away after N of M traces`;
- no result at all for WAIT_FLOOR_S, plus 1/MB_PER_S seconds per MB on disk of the largest trace still
  pending: one line naming what was done and what the bound was (a hung worker, a cluster without workers).
Dask is imported only here, and this module only when a Dask option is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import socket
import time
import uuid

from llmdiag.diagnose.engine.pool import failed
from llmdiag.diagnose.engine.progress import Progress
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.files import read_bounded
from llmdiag.diagnose.engine.work import Work

EXTRA = "pip install 'llmdiag[cluster]'"
WAIT_FLOOR_S = 600.0  # the longest wait for the next result, whatever the sizes: covers queueing and slow disks
MB_PER_S = 1.0  # plus a second per MB (on disk) of the largest pending trace: over 10x a parse's time
POLL_S = 0.05
SCHEDULER_FILE_BUDGET = 1 << 20  # `dask scheduler --scheduler-file` writes ~1 kB
SATURATION = 1.0  # tasks a one-thread worker of --dask-local holds (1: the one it runs; see _local_cluster)


def run_dask(jobs: list, sizes: list[int], spec, work: Work, bar: Progress) -> list:
    """Outputs in the order of `jobs`, computed on the cluster `spec` names (diagnose.engine.EngineSpec)."""
    if spec.dask_local:  # no more workers than traces or cores: 4,096 processes for 2 traces help nobody
        spec = dataclasses.replace(spec, dask_local=min(spec.dask_local, max(1, len(jobs)), os.cpu_count() or 1))
    bar.describe(f"starting a Dask LocalCluster of {spec.dask_local} workers" if spec.dask_local
                 else "connecting to the Dask scheduler")
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        raise LlmdiagError(f"the Dask engine needs dask and distributed, which are not installed ({e.name}): "
                           f"{EXTRA}") from None
    with _quiet(), _client(spec) as (client, where):
        bar.describe("analysing traces")
        return _collect(client, where, jobs, sizes, work, bar)


@contextlib.contextmanager
def _quiet():
    """Dask logs a worker's death, a lost scheduler and its reconnection attempts with tracebacks; the user gets
    our one line instead (the scheduler's and workers' own logs keep them)."""
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


def connect_timeout() -> float:
    import dask
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="s"))


@contextlib.contextmanager
def _client(spec):
    from distributed import Client

    timeout = connect_timeout()
    cluster = None
    if spec.dask_local:
        cluster, address = _local_cluster(spec.dask_local), None
        where = f"the Dask LocalCluster of {spec.dask_local} workers"
    else:
        address = spec.scheduler or _address_from_file(spec.scheduler_file, timeout)
        where = f"the Dask scheduler at {address}"
        _probe(address, timeout)
    try:
        try:
            client = Client(cluster or address, timeout=timeout)
        except (OSError, TimeoutError, ValueError, TypeError) as e:
            raise LlmdiagError(f"cannot reach {where} ({e}); is it running, and is the address right?") from None
        try:
            yield client, where
        finally:
            with contextlib.suppress(Exception):
                client.close(timeout=10)
    finally:
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=30)


def _local_cluster(n: int):
    """N worker processes of one thread each (the pool's shape) on this host only, no dashboard, no memory limit
    of Dask's own (as the pool: the OS decides), each trace retried once when its worker dies. Its scheduler
    runs in this process and reads the config when it starts."""
    import dask
    from distributed import LocalCluster

    # worker-saturation 1: a worker holds only the trace it runs (the others wait on the scheduler), so a worker's
    # death counts against that trace alone (Dask counts it against every task the worker held)
    with dask.config.set({"distributed.scheduler.allowed-failures": 1,
                          "distributed.scheduler.worker-saturation": SATURATION}):
        try:
            return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=None, silence_logs=logging.CRITICAL, memory_limit=0,
                                # its HTTP endpoint (health, metrics) on a free port: 8787 may be another
                                # cluster's, and Dask would warn on stderr
                                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        except Exception as e:  # the workers could not start (spawn, ports, resources): one line, not Dask's
            raise LlmdiagError(f"cannot start a Dask LocalCluster of {n} workers ({type(e).__name__}: {e})") from None


def _address_from_file(path: str, timeout: float) -> str:
    """The address in a scheduler file (`dask scheduler --scheduler-file`), waiting up to `timeout` for the file
    to appear (a batch job starts the scheduler beside us). Dask's own wait for the file has no bound."""
    end = time.monotonic() + timeout
    while not os.path.lexists(path) and time.monotonic() < end:
        time.sleep(0.2)
    if not os.path.lexists(path):
        raise LlmdiagError(f"no Dask scheduler file here after waiting {timeout:g} s",
                           path, "start one with `dask scheduler --scheduler-file FILE`")
    raw = read_bounded(path, SCHEDULER_FILE_BUDGET, "scheduler file", gunzip=False)  # a FIFO, /dev/zero: refused
    try:
        address = json.loads(raw)["address"]
    except (ValueError, KeyError, TypeError) as e:
        raise LlmdiagError(f"not a Dask scheduler file ({type(e).__name__}: {str(e)[:200]})", path) from None
    if not isinstance(address, str) or len(address) > 1024:
        raise LlmdiagError("not a Dask scheduler file (its address is not a short string)", path)
    return address


HANDSHAKE_S = 5.0  # a Dask scheduler writes its handshake as soon as it accepts (66 bytes within ms, measured)


def _probe(address: str, timeout: float) -> None:
    """A tcp:// scheduler, checked within `timeout` before Dask's client tries it: a malformed address or port
    (99999) and a refused connection fail at once (Dask retries them for the whole connect timeout), and a
    listener that accepts but never speaks (a Dask scheduler sends its handshake first) fails once connected
    after at most HANDSHAKE_S (Dask's handshake waited without bound). Other schemes (tls://, ucx://) are left
    to Dask."""
    scheme, sep, loc = address.partition("://")
    if sep and scheme != "tcp":
        return
    where = f"the Dask scheduler at {address}"
    host, colon, port = (sep and loc or address).rpartition(":")
    if not colon or "]" in port:  # no port: Dask's default
        host, port = (sep and loc or address), "8786"
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LlmdiagError(f"cannot reach {where} (not HOST:PORT with a port from 1 to 65535)")
    wait = min(timeout, HANDSHAKE_S)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(wait)
            if not s.recv(1):
                raise LlmdiagError(f"cannot reach {where} (it closed the connection without a word; not a Dask "
                                   "scheduler?)")
    except TimeoutError:
        raise LlmdiagError(f"cannot reach {where} (no Dask handshake within {wait:g} s; is it a Dask "
                           "scheduler?)") from None
    except OSError as e:
        raise LlmdiagError(f"cannot reach {where} ({e.strerror or e}); is it running, and is the address "
                           "right?") from None


def _collect(client, where: str, jobs: list, sizes: list[int], work: Work, bar: Progress) -> list:
    from distributed import as_completed

    n = len(jobs)
    order = sorted(range(n), key=lambda k: -sizes[k])  # largest first: no big rank left to finish alone
    run = uuid.uuid4().hex[:8]
    keys = [f"llmdiag-{run}-rank-file-{k}" for k in order]
    slot = dict(zip(keys, order))
    futures = client.map(functools.partial(_remote, work), [jobs[k] for k in order], key=keys, pure=False)  # one message
    out: list = [None] * n
    ac = as_completed(futures)
    del futures  # as_completed holds each future until it is taken: then it is released below
    done, biggest, last = 0, 0, time.monotonic()

    def bound() -> float:  # for the next result: the floor, plus the largest trace still pending
        nonlocal biggest
        while out[order[biggest]] is not None:
            biggest += 1
        return WAIT_FLOOR_S + sizes[order[biggest]] / 1e6 / MB_PER_S

    while not ac.is_empty():
        batch = ac.next_batch(block=False)
        if not batch:
            if time.monotonic() - last > (b := bound()):
                raise LlmdiagError(_stalled(client, where, done, n, b))
            if client.status not in ("running", "connecting"):
                raise LlmdiagError(f"{where} went away after {done} of {n} traces (the client is {client.status})")
            time.sleep(POLL_S)
            continue
        for fut in batch:
            k = slot.pop(fut.key)
            out[k] = _result(fut, jobs[k], work, where, done, n, bound(), client)
            fut.release()
            done += 1
            bar.advance(sizes[k])
        del batch, fut  # no reference left: the released result can go
        last = time.monotonic()
    return out


def _result(fut, job, work: Work, where: str, done: int, n: int, bound: float, client):
    """The trace's output, or its failure as one line. A future as_completed gave may have lost its result since
    (held by a worker that died after): `result` then waits for Dask to compute it again, within the bound."""
    from distributed.utils import CancelledError

    try:
        res = fut.result(timeout=bound)
    except CancelledError:  # nobody here cancels: the scheduler is gone (or restarted), and its work with it
        raise LlmdiagError(f"{where} went away after {done} of {n} traces") from None
    except TimeoutError:
        raise LlmdiagError(_stalled(client, where, done, n, bound)) from None
    except Exception as e:
        if type(e).__name__ == "KilledWorker":
            return failed(job, work, f"the Dask workers analysing this trace died ({e.allowed_failures + 1} tries, the "
                               f"last on {e.last_worker.address}; killed by a signal or the out-of-memory killer?)")
        return failed(job, work, f"the Dask worker could not run this job ({type(e).__name__}: {e}); is llmdiag "
                           "installed on the workers, in the same version?")
    if isinstance(res, work.out):
        return res
    return failed(job, work, f"the Dask worker returned {type(res).__name__}, not a rank's output")


def _stalled(client, where: str, done: int, n: int, bound: float) -> str:
    try:
        workers = len(client.scheduler_info().get("workers", {}))
    except Exception:
        workers = None
    why = "it has no workers" if workers == 0 else "a hung worker or a hung filesystem?"
    return (f"no trace finished on {where} for {bound:.3g} s, after {done} of {n} traces ({why}; the bound is "
            f"{WAIT_FLOOR_S:g} s plus {1 / MB_PER_S:g} s per MB of the largest trace left)")


def _remote(work: Work, job):
    """Runs on the worker: a trace it cannot open is named, with the likely reason (found on the coordinator,
    missing here: not on a filesystem the workers share)."""
    try:
        with open(job.path, "rb"):
            pass
    except OSError as e:
        return failed(job, work, f"a Dask worker on {socket.gethostname()} cannot open this trace "
                           f"({e.strerror or type(e).__name__}): the traces must be on a filesystem the workers "
                           "share, at the same path")
    return work.fn(job)
