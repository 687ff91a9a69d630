"""The `llmdiag` command line.

Exit codes: 0 ok, 1 a run or check that failed, 2 a usage or input error. A user mistake is one line on
stderr, never a traceback (`--debug` shows one). Torch is imported only inside `run`, and each command's module
only when that command runs: `analyze` does not pay for the gate's or the launcher's imports (every process
pays its imports; `make bench` times what `analyze` of one rank imports, docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
import sys

import click

from llmdiag.diagnose import __version__
from llmdiag.diagnose.errors import LlmdiagError


class _Group(click.Group):
    """Turns LlmdiagError into one line and exit 2; click's own usage errors already exit 2. The commands are
    imported on first use (`COMMANDS`), click's documented lazy group."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            cmd = getattr(importlib.import_module(COMMANDS[cmd_name]), cmd_name)
            cmd.make_parser = _short_as_long(cmd.make_parser)  # type: ignore[method-assign]
            cmd.short_help = SHORT_HELP[cmd_name]
            cmd.epilog = "\b\nExamples:\n" + "\n".join(f"  {x}" for x in EXAMPLES[cmd_name])
            self.add_command(cmd)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, cmd, rest = super().resolve_command(ctx, args)
        _RAN[0] = cmd.name if cmd is not None else None  # the command this process runs, for `leave`
        return name, cmd, rest

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LlmdiagError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(e.line(), err=True)
            sys.exit(2)


def _short_as_long(make_parser):
    """The command's parser, its short options (`-q`, `-j`) also matched as long ones. click tries every option
    as a long one first, and a miss builds a `NoSuchOption` whose "did you mean" imports difflib and compares the
    name with every long option (~1.3 ms of each `analyze -q`, issue 37) before it matches `-q` as short. A
    two-character `-x` is then the same option with the same value either way; grouped flags (`-qj2`) still go
    the short way. Parsers without those tables (another click) are left as they are."""

    def make(ctx: click.Context):
        parser = make_parser(ctx)
        longs, shorts = getattr(parser, "_long_opt", None), getattr(parser, "_short_opt", None)
        if isinstance(longs, dict) and isinstance(shorts, dict):
            for name, opt in shorts.items():
                longs.setdefault(name, opt)
        return parser

    return make


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llmdiag")
@click.option("--debug", is_flag=True, help="Show tracebacks for input errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Profile distributed LLM training and diagnose where the time goes.

    \b
    Start with:
      llmdiag run --workload tp2pp2 --out runs/demo
      llmdiag analyze runs/demo
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


# Each command's module (the command is its attribute of the same name), imported when the command is looked up.
COMMANDS = {"run": "llmdiag.diagnose.cli.run", "analyze": "llmdiag.diagnose.cli.analyze",
            "check": "llmdiag.diagnose.cli.gate", "diff": "llmdiag.diagnose.cli.gate"}
# One line per command in `llmdiag --help` (click would cut each docstring's first sentence with "...") and an
# example per command under its own --help (`\b` keeps click from re-wrapping the lines).
SHORT_HELP = {
    "run": "Run a layout as a profiled training workload.",
    "analyze": "Analyse traces: tables, summary JSON, HTML report.",
    "check": "Gate a run against a baseline or limits (CI).",
    "diff": "Compare two runs side by side, with a verdict.",
}
EXAMPLES = {
    "run": ["llmdiag run --workload tp2pp2 --out runs/demo", "llmdiag run -w dp2 --device cpu --steps 6"],
    "analyze": ["llmdiag analyze runs/demo", "llmdiag analyze traces/ --exclude-last-step --report out.html",
                "llmdiag analyze runs/demo --timeline demo.trace.json --ranks 0-3   # open in ui.perfetto.dev"],
    "check": ["llmdiag check runs/new --baseline baselines/demo.json",
              "llmdiag check runs/new --max-bubble 20%"],
    "diff": ["llmdiag diff runs/old runs/new", "llmdiag diff a.json b.json --html diff.html"],
}


# The commands whose process leaves by `os._exit` (`leave`); `run` (the launcher: torch, signals, its workers'
# process group) keeps Python's exit. `_RAN` holds the command this process ran.
LEAVE_FAST = frozenset({"analyze", "check", "diff"})
_RAN: list[str | None] = [None]


def entry() -> None:
    """The `llmdiag` process (its script and `python -m`): the command, its exit handlers, then out without the
    interpreter's teardown. Freeing every module, array and summary object one by one at exit took ~13-16 ms of each
    run on a quiet machine, 15-65 ms of wall under load (issue 37, docs/benchmarks.md "Seventh pass",
    benchmarks/exit_cost.py); the kernel frees the process at once.
    `main` itself stays a plain click group (tests and wrappers call it and catch its SystemExit)."""
    try:
        main()
    except SystemExit as e:
        leave(e.code)
        raise
    leave(0)


def leave(code) -> None:
    """`os._exit(code)` once nothing is left that Python's own exit would still do for the user: every output is
    closed (the command returned), the exit handlers run here (the workers reaped, the code cache saved), and
    the standard streams flushed. Returns instead (Python's exit follows) for a command not in LEAVE_FAST (or
    none: `--help`, a usage error before one), a code that is not a number, a
    thread that is not a daemon (Python would wait for it), a profiler or tracer (cProfile, coverage: they write
    at teardown), torch loaded (`run`: its C++ teardown is left to it) and a stream that cannot be flushed (a
    closed pipe: Python reports it)."""
    import atexit
    import os

    threading = sys.modules.get("threading")
    if (_RAN[0] not in LEAVE_FAST or not (code is None or type(code) is int) or sys.gettrace() is not None
            or sys.getprofile() is not None or "torch" in sys.modules):
        return
    if threading is not None and any(t is not threading.main_thread() and t.is_alive() and not t.daemon
                                     for t in threading.enumerate()):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        code = code or 120  # what Python exits with when it cannot flush stdout at exit
    os._exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
