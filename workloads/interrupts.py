"""Ctrl-C (and SIGTERM, SIGHUP) while `llmdiag run` watches torchrun: raised as `Interrupted` in the main
thread, so the launcher stops the ranks it started, writes the manifest, and exits 128 + the signal (130 for
Ctrl-C), as a shell would report the interrupt."""

from __future__ import annotations

import signal
import threading


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def trap_signals() -> dict:
    """Install the handlers (main thread only); returns the previous ones for `restore_signals`."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    # SIGHUP: the terminal or the ssh session went away; the ranks must not outlive it
    return {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def restore_signals(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
