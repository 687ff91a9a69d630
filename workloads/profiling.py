"""torch.profiler set-up and the atomic, gzipped export of one Kineto trace per rank.

The trace appears under its final name only when complete (export to a temporary JSON beside it, gzip to a
temporary name, os.replace), so an analyzer never reads half a file even while other ranks still run.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from llmdiag.workloads.options import RunPlan


_TAIL = 1 << 16


def _json_str(text: str) -> bytes:
    return json.dumps(text)[1:-1].encode()


def export_trace(prof: profile, path: str) -> None:
    """Temporary files come from mkstemp in the trace folder (unpredictable names, created O_EXCL, so a link planted
    in a shared run folder is never followed) and are removed on every path out."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    base = os.path.basename(path)
    fd_json, tmp_json = tempfile.mkstemp(prefix=f".{base}.", suffix=".json.tmp", dir=folder)
    os.close(fd_json)  # Kineto writes by name: into the regular file mkstemp created
    fd_gz, tmp_gz = tempfile.mkstemp(prefix=f".{base}.", suffix=".gz.tmp", dir=folder)
    try:
        prof.export_chrome_trace(tmp_json)
        size = os.path.getsize(tmp_json)
        with open(tmp_json, "rb") as fin, os.fdopen(fd_gz, "wb") as raw, \
                gzip.GzipFile(filename=base, mode="wb", compresslevel=6, fileobj=raw) as fout:
            fd_gz = -1
            head = max(0, size - _TAIL)
            while head > 0:
                chunk = fin.read(min(1 << 20, head))
                fout.write(chunk)
                head -= len(chunk)
            # Kineto ends the file with `"traceName": "<file it wrote>"`: name the final file, not the temporary.
            fout.write(fin.read().replace(_json_str(tmp_json), _json_str(path)))
        os.chmod(tmp_gz, 0o644)
        os.replace(tmp_gz, path)
    finally:
        if fd_gz >= 0:
            os.close(fd_gz)
        for tmp in (tmp_json, tmp_gz):
            if os.path.exists(tmp):
                os.remove(tmp)


def make_profiler(run: RunPlan, trace_path: str, device: torch.device) -> profile:
    wait, warmup, active = run.profile
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=lambda p: export_trace(p, trace_path),
        record_shapes=True,
        profile_memory=True,
        with_stack=run.options.with_stack,
    )
