"""`llmdiag check` and `llmdiag diff`: thin click wrappers over diagnose/gate/ (verdict, diff).

Exit codes: 0 pass, 1 regression, 2 usage or input error (one line, no traceback). Both commands also
turn LlmdiagError into that one line themselves, so they behave the same outside the `llmdiag` group.
The verdict and the comparison are dataclasses; they become JSON here, at the edge, and nowhere else.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat
import sys
import time

import click
import orjson

from llmdiag.diagnose.errors import LlmdiagError, printable
from llmdiag.diagnose.gate.verdict import AGGS, default_gates, evaluate, metric_named
from llmdiag.diagnose.gate.config import FLAG_GATES, build_gates
from llmdiag.diagnose.gate.format import github_annotations, markdown_summary, render_verdict
from llmdiag.diagnose.gate.junit import error_junit, to_junit, write_text
from llmdiag.diagnose.gate.sides import load_side
from llmdiag.diagnose.model.escape import markdown, terminal
from llmdiag.diagnose.model.runs import run_count


def _one_line_errors(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except LlmdiagError as e:
            ctx = click.get_current_context(silent=True)
            root = ctx.find_root() if ctx else None
            if root is not None and isinstance(root.obj, dict) and root.obj.get("debug"):
                raise
            click.echo(e.line(), err=True)
            sys.exit(2)

    return wrapper


def _write_json(path: str, data: dict) -> None:
    write_text(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())


def _verdict_json(v) -> dict:
    """The verdict file (`check --json`, docs/ci.md): the Verdict's fields plus the exit code."""
    return {**dataclasses.asdict(v), "exit_code": v.exit_code}


_LIMIT_HELP = {
    "max_overlap_drop": "Fail if overlap_ratio drops by more than this (ratio points 0-1, or \"5%\").",
    "max_exposed_comm_rise": "Fail if exposed comm / step time rises by more than this (ratio points 0-1).",
    "max_bubble_rise": "Fail if the pipeline bubble rises by more than this (ratio points 0-1).",
    "max_step_time_rise": "Fail if step time rises by more than this (ms, or \"10%\").",
    "max_memory_rise": "Fail if the memory peak rises by more than this (bytes, \"512MiB\", or \"10%\").",
    "min_overlap": "Absolute: fail if overlap_ratio is below this (0-1 or \"60%\"; no baseline needed).",
    "max_exposed_comm": "Absolute: fail if exposed comm / step time is above this (0-1 or \"20%\").",
    "max_bubble": "Absolute: fail if the pipeline bubble is above this (0-1 or \"20%\").",
    "max_step_time_ms": "Absolute: fail if step time (ms) is above this.",
    "max_memory": "Absolute: fail if the memory peak is above this (bytes or \"40GiB\").",
    "max_path_rise": "Fail if the job critical path's length rises by more than this (ms, or \"10%\").",
    "max_path_compute_drop": "Fail if the job path's compute share drops by more than this (points 0-1, "
                             "\"0.05+1σ\": beyond the steps' spread).",
    "max_path_comm_rise": "Fail if the job path's communication share rises by more than this (as above).",
    "max_path_cpu_rise": "Fail if the job path's host (cpu_bound) share rises by more than this (as above).",
}


def _limit_options(f):
    for name in reversed(list(FLAG_GATES)):
        f = click.option("--" + name.replace("_", "-"), name, type=str, default=None, metavar="LIMIT",
                         help=_LIMIT_HELP[name])(f)
    return f


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("current", type=click.Path())
@click.option("--baseline", "-b", type=click.Path(), default=None,
              help="Baseline: run folder, trace folder or summary JSON from `analyze --json`.")
@click.option("--config", "-c", type=click.Path(), default=None, help="TOML file of gates (see docs/ci.md).")
@click.option("--agg", type=click.Choice(AGGS), default=None,
              help="Aggregation over ranks for flag gates and config gates without their own "
                   "(default worst: min overlap, max of the others; rank: each rank against its own baseline).")
@_limit_options
@click.option("--strict", is_flag=True, default=None, help="Fail gates whose metric is undefined (n/a).")
@click.option("--allow-failed-run", "allow_failed_run", is_flag=True,
              help="Do not fail when a side's manifest marks the run failed (reported as allowed).")
@click.option("--allow-missing-ranks", "allow_missing_ranks", is_flag=True,
              help="Do not fail on ranks without a trace or left out (reported as allowed).")
@click.option("--allow-duplicate-ranks", "allow_duplicate_ranks", is_flag=True,
              help="Do not fail when a rank had several trace files and one was chosen.")
@click.option("--allow-undefined", "allow_undefined", is_flag=True,
              help="Do not fail when a gated metric is undefined on a side or on some ranks (any metric).")
@click.option("--allow-undefined-metric", "allow_undefined_metric", multiple=True, metavar="METRIC",
              help="As --allow-undefined, for this metric only (repeatable).")
@click.option("--run", "run", metavar="newest|N", default=None,
              help="CURRENT holds several runs (a profiler folder reused across CI runs): gate the newest (complete "
                   "or not) or run N, 1 the oldest. Without it such an input is refused.")
@click.option("--baseline-run", "baseline_run", metavar="newest|N", default=None,
              help="As --run, for a baseline that holds several runs.")
@click.option("--noise-from", "noise_from", multiple=True, type=click.Path(), metavar="PATH",
              help="A repeated baseline run (folder or summary; repeatable): the run-to-run spread over it and the "
                   "baseline is part of the noise a \"1.5σ\" limit is measured in (docs/ci.md).")
@click.option("--junit", "junit_path", type=click.Path(), default=None, help="Write JUnit XML here.")
@click.option("--json", "json_path", type=click.Path(), default=None, help="Write the verdict as JSON here.")
@click.option("--quiet", "-q", is_flag=True, help="Print only failures and the last line.")
@_one_line_errors
def check(current, baseline, config, agg, strict, junit_path, json_path, quiet, allow_failed_run, allow_missing_ranks,
          allow_duplicate_ranks, allow_undefined, allow_undefined_metric, run, baseline_run, noise_from, **limits):
    """Gate CURRENT against a BASELINE and/or absolute limits; exit 1 on a regression.

    CURRENT and the baseline are each a run folder, a trace folder or a summary JSON
    (`llmdiag analyze RUN --json FILE`). With --baseline and no limits given, default gates apply.
    The gate fails closed: a run marked failed, missing, left-out or duplicate-resolved ranks, an empty
    summary, or a gated metric that vanished fail the check unless allowed (--allow-*; docs/ci.md).
    """
    t0 = time.perf_counter()
    try:
        gates, opts = build_gates(config, limits, agg)
        one_metric = {f"undefined:{metric_named(m, '--allow-undefined-metric').name}" for m in allow_undefined_metric}
        if not gates and baseline is None:
            raise LlmdiagError("nothing to check", None,
                               "give --baseline, a --config, or an absolute limit such as --min-overlap")
        relative = [f"{g.metric} {g.rule}" for g in gates if g.relative]
        if relative and baseline is None:
            raise LlmdiagError(f"gates against a baseline need --baseline ({', '.join(relative)})")
        run, baseline_run = _run_choice(run, "--run"), _run_choice(baseline_run, "--baseline-run")
        cur = load_side(current, "current", run, "--run")
        base = load_side(baseline, "baseline", baseline_run, "--baseline-run") if baseline else None
        if noise_from and base is None:
            raise LlmdiagError("--noise-from gives repeats of the baseline: give --baseline too")
        repeats = [load_side(p, "repeated baseline", "newest", "--noise-from") for p in noise_from]
    except LlmdiagError as e:
        if junit_path:
            write_text(junit_path, error_junit(e.line()))
        _job_summary(f"### llmdiag check: ERROR\n\n{markdown(e.line())}\n")
        raise
    strict = bool(opts.get("strict", False) if strict is None else strict)
    flags = {"failed-run": allow_failed_run, "missing-ranks": allow_missing_ranks,
             "duplicate-ranks": allow_duplicate_ranks, "undefined": allow_undefined}
    allow = {k for k, on in flags.items() if on} | set(opts.get("allow", ())) | one_metric
    cpu = not gates and cur.trace_kind == "cpu"
    gates = gates or default_gates(agg or opts.get("agg"), cpu, bool(repeats))
    verdict = evaluate(cur, base, gates, strict, allow, repeats, run_defaults())
    verdict.notes[:0] = [note for side, a in (("current", cur), ("baseline", base)) if (note := _run_note(side, a))]
    if cpu:
        verdict.notes.insert(0, "CPU traces: default gates for noisy shared runners (docs/ci.md, \"Default gates\"); "
                                "give --config or limits to choose your own")
    if junit_path:
        write_text(junit_path, to_junit(verdict, time.perf_counter() - t0))
    if json_path:
        _write_json(json_path, _verdict_json(verdict))
    text = render_verdict(verdict)
    if quiet:
        lines = text.splitlines()
        text = "\n".join([terminal(r.message) for r in verdict.failed()]
                         + [terminal(c.message) for c in verdict.failed_inputs()] + lines[-1:])
    click.echo(text)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(verdict):
            click.echo(line)
    _job_summary(markdown_summary(verdict))
    sys.exit(verdict.exit_code)


def run_defaults() -> dict:
    """`llmdiag run`'s option defaults (workloads/options.py, torch-free): what an option a manifest predates
    was, since an option is added with the default that keeps the older behaviour."""
    from llmdiag.workloads.options import RunOptions

    return {f.name: f.default for f in dataclasses.fields(RunOptions) if f.default is not dataclasses.MISSING}


def _run_choice(value: str | None, flag: str) -> str | int | None:
    """--run's value: None, "newest" or a run number (ASCII digits, bounded: `--run ²` is no number)."""
    if value is None:
        return None
    v = value.strip().lower()
    if v == "newest":
        return v
    if not (v.isascii() and v.isdigit() and len(v) <= 9 and int(v) >= 1):
        raise LlmdiagError(f"{flag} {printable(value[:40])!r} is not newest or a run number (1 = the oldest)")
    return int(v)


def _run_note(side: str, a) -> str | None:
    """Which run of an input of several was gated; the others were not."""
    if a is None or run_count(a.runs) < 2:
        return None
    k = next((r.number for r in a.runs if r.analysed), 1)
    return f"{side}: gated run {k} of the {run_count(a.runs)} runs its input holds (oldest first); the others were not gated"


def _job_summary(text: str) -> None:
    """Append to GitHub's job summary page when running in Actions (the verdict stands without it)."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if os.environ.get("GITHUB_ACTIONS") != "true" or not summary:
        return
    try:  # non-blocking and regular files only: a FIFO planted there must not hang the gate
        fd = os.open(summary, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            try:
                f.write(text)
            except OSError:
                pass


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--html", "html_path", type=click.Path(), default=None, help="Write a self-contained HTML diff.")
@click.option("--json", "json_path", type=click.Path(), default=None, help="Write the comparison as JSON.")
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Kernels listed per group (grew, shrank, new, vanished).")
@_one_line_errors
def diff(a, b, html_path, json_path, top):
    """Compare two runs, trace folders or summaries side by side (B relative to A).

    Ranks are matched by number; with different world sizes only aggregates are compared, and the
    output says so.
    """
    from llmdiag.diagnose.gate.diff import compare, render_text

    c = compare(load_side(a, "A"), load_side(b, "B"), top=top, run_defaults=run_defaults())
    click.echo(render_text(c))
    if json_path:
        _write_json(json_path, dataclasses.asdict(c))
    if html_path:
        from llmdiag.reports.diff_render import render_diff_html

        write_text(html_path, render_diff_html(c))
        click.echo(f"\nwrote {html_path}")
