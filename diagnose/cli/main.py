"""The `llmdiag` command line.

Exit codes: 0 ok, 1 a run or check that failed, 2 a usage or input error. A user mistake is one line on
stderr, never a traceback (`--debug` shows one). Torch is imported only inside `run`.
"""

from __future__ import annotations

import sys

import click

from llmdiag.diagnose import __version__
from llmdiag.diagnose.errors import LlmdiagError


class _Group(click.Group):
    """Turns LlmdiagError into one line and exit 2; click's own usage errors already exit 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LlmdiagError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(e.line(), err=True)
            sys.exit(2)


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


def _register() -> None:
    from llmdiag.diagnose.cli.run import run
    from llmdiag.diagnose.cli.analyze import analyze
    from llmdiag.diagnose.cli.gate import check, diff

    for cmd in (run, analyze, check, diff):
        cmd.short_help = SHORT_HELP[cmd.name]
        cmd.epilog = "\b\nExamples:\n" + "\n".join(f"  {x}" for x in EXAMPLES[cmd.name])
        main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
