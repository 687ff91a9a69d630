"""The `llmdiag` command line.

Exit codes: 0 ok, 1 a run or check that failed, 2 a usage or input error. A user mistake is one line on
stderr, never a traceback (`--debug` shows one). Torch is imported only inside `run`.
"""

from __future__ import annotations

import sys

import click

from diagnose import __version__
from diagnose.errors import LlmdiagError


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
    """Profile distributed LLM training and diagnose where the time goes."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    from diagnose.cli.run import run
    from diagnose.cli.analyze import analyze
    from diagnose.cli.gate import check, diff

    for cmd in (run, analyze, check, diff):
        main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
