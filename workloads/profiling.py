"""torch.profiler set-up and the atomic, gzipped export of one Kineto trace per rank.

The trace appears under its final name only when complete (export to a temporary JSON beside it, gzip to a
temporary name, os.replace), so an analyzer never reads half a file even while other ranks still run.
"""

from __future__ import annotations

import gzip
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from workloads.options import RunOptions


_TAIL = 1 << 16


def _json_str(text: str) -> bytes:
    return json.dumps(text)[1:-1].encode()


def export_trace(prof: profile, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp_json = f"{path}.{os.getpid()}.json.tmp"
    tmp_gz = f"{path}.{os.getpid()}.gz.tmp"
    try:
        prof.export_chrome_trace(tmp_json)
        size = os.path.getsize(tmp_json)
        with open(tmp_json, "rb") as fin, gzip.open(tmp_gz, "wb", compresslevel=6) as fout:
            head = max(0, size - _TAIL)
            while head > 0:
                chunk = fin.read(min(1 << 20, head))
                fout.write(chunk)
                head -= len(chunk)
            # Kineto ends the file with `"traceName": "<file it wrote>"`: name the final file, not the temporary.
            fout.write(fin.read().replace(_json_str(tmp_json), _json_str(path)))
        os.replace(tmp_gz, path)
    finally:
        for tmp in (tmp_json, tmp_gz):
            if os.path.exists(tmp):
                os.remove(tmp)


def make_profiler(opts: RunOptions, trace_path: str, device: torch.device) -> profile:
    wait, warmup, active = opts.profile()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=lambda p: export_trace(p, trace_path),
        record_shapes=True,
        profile_memory=True,
        with_stack=opts.with_stack,
    )
