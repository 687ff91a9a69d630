"""Test hook: make one rank raise, die by SIGKILL, or hang, so the launcher's fault handling can be tested.

`LLMDIAG_FAULT=rank:<R>:<raise|kill|hang>[:<step>]` (set by the hidden `llmdiag run --inject-fault`). The
default step is the first one after profiling, so the other ranks have written their traces by then.
Torch-free.
"""

from __future__ import annotations

import os
import signal
import time

from llmdiag.workloads import rankspec

KINDS = ("raise", "kill", "hang")


def parse(spec: str | None, world: int | None = None) -> tuple[int, str, int | None] | None:
    p = rankspec.parse(spec, world, "fault", "rank:<R>:raise|kill|hang[:<step>]", KINDS.__contains__,
                       lambda s: bool(rankspec.DIGITS.fullmatch(s)))
    return None if p is None else (p[0], p[1], int(p[2]) if p[2] is not None else None)


class Fault:
    def __init__(self, rank: int, default_step: int, spec: str | None = None):
        parsed = parse(spec if spec is not None else os.environ.get("LLMDIAG_FAULT"))
        self.kind = None
        if parsed and parsed[0] == rank:
            self.kind = parsed[1]
            self.step = parsed[2] if parsed[2] is not None else default_step

    def maybe_fire(self, step: int) -> None:
        if self.kind is None or step != self.step:
            return
        print(f"[llmdiag] injected fault: {self.kind} at step {step}", flush=True)
        if self.kind == "raise":
            raise RuntimeError(f"llmdiag injected fault: rank raised at step {step}")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: never reach the next collective
            time.sleep(1.0)
