"""`llmdiag run`: the click command. Validates everything torch-free, then hands over to workloads.launch.

Its options are generated from workloads.options (RunOptions, LaunchOptions), where each one's default and
help live once. The options are read and planned (`prepare`, the run's one plan) in one go, then handed
over: nothing downstream goes back to the options. A bad workload string or a layout the model cannot take
raises WorkloadError, turned here into LlmdiagError (same text), which the group prints as one line with
exit 2, before torch is imported.
"""

from __future__ import annotations

import sys

import click

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.options import LaunchOptions, RunOptions, RunPlan, prepare
from llmdiag.workloads.optspec import CliOption, cli_options, pick


def _click_option(o: CliOption):
    decls = [f"{o.flag}/{o.negative}" if o.kind == "tristate" else o.flag] + ([o.short] if o.short else [])
    kw = {"help": o.help, "hidden": o.hidden, "required": o.required}
    if not o.required:  # click 8.3 counts an explicit default=None as given: a required option then goes unchecked
        kw["default"] = o.default
    if o.shown:  # a default decided later: say which, without click's parentheses
        kw.update(help=f"{o.help}  [default: {o.shown}]", show_default=False)
    if o.kind == "flag":
        kw["is_flag"] = True
    elif o.kind == "value":
        kw["type"] = click.Choice(o.choices) if o.choices else o.type
    return click.option(*decls, **kw)


def click_options(*classes):
    """Decorator: one click option per field of the given options dataclasses, in declaration order."""

    def decorate(f):
        for o in reversed([o for cls in classes for o in cli_options(cls)]):
            f = _click_option(o)(f)
        return f

    return decorate


@click.command("run", context_settings={"show_default": True})
@click_options(RunOptions, LaunchOptions)
def run(**kwargs):
    """Run a parallel layout as a profiled training workload; write a run folder."""
    try:
        lo = pick(LaunchOptions, kwargs)
        _run(prepare(pick(RunOptions, kwargs), lo), lo)
    except WorkloadError as e:
        raise LlmdiagError(e.what, hint=e.hint) from e
    except OSError as e:  # the run folder cannot be written (disk full, read-only): one line, exit 2
        raise LlmdiagError(f"cannot write the run folder: {e.strerror or e}", e.filename) from None
    except KeyboardInterrupt:  # Ctrl-C before torchrun started (while torch imports): 130, as the shell's own
        click.echo("llmdiag run: interrupted (SIGINT) before the ranks started", err=True)
        sys.exit(130)


def _run(runplan: RunPlan, lo: LaunchOptions) -> None:
    if lo.print_slurm:
        from llmdiag.workloads.slurm import sbatch_script

        click.echo(sbatch_script(runplan, lo), nl=False)
        return

    from llmdiag.workloads.launch import launch

    rc = launch(runplan, lo,
                command=["llmdiag", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("llmdiag") else sys.argv,
                echo=click.echo, echo_err=lambda s: click.echo(s, err=True))
    if rc:
        sys.exit(rc)
