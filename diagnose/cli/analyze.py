"""`llmdiag analyze PATH`: metrics, terminal tables, JSON summary and the HTML report.

The typed Analysis is what the terminal and the report read; JSON is written here, at the edge.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import os
import sys
import threading
from typing import TYPE_CHECKING

import click

from llmdiag.diagnose.errors import LlmdiagError, printable
from llmdiag.diagnose.model.files import check_target, write_atomic
from llmdiag.diagnose.model.provenance import Provenance

if TYPE_CHECKING:  # loaded with the analysis, after the parse of a small input has started (cli/ahead.py)
    from llmdiag.diagnose.model.analysis import Analysis

# The cyclic collector's first threshold for this command (Python's is 700 allocations). Its passes over the young
# objects (the modules being imported, the parse's rows) found ~300 objects in cycles in a whole run on the real
# traces and cost 25-40 ms of a small trace's ~300 ms; at 100,000 most young objects are freed by their reference
# count before a pass sees them (docs/benchmarks.md, "Fifth pass"). Peak RSS unchanged on the six real traces.
GC_YOUNG = 100_000


def output_paths(analysis, json_path: str | None, report_path: str | None) -> tuple[str, str]:
    """Run folders get summary.json/report.html inside; foreign (maybe read-only) traces ./llmdiag-report/."""
    if analysis.options.run_folder and os.access(analysis.source, os.W_OK):
        base_json, base_html = os.path.join(analysis.source, "summary.json"), os.path.join(analysis.source, "report.html")
    else:
        base_json = os.path.join("llmdiag-report", f"{analysis.name}.json")
        base_html = os.path.join("llmdiag-report", f"{analysis.name}.html")
    return json_path or base_json, report_path or base_html


def json_safe(analysis: Analysis) -> tuple[bytes, Analysis]:
    """The summary file's bytes, and the analysis the report renders: the same one, or, where a string cannot
    be written as UTF-8 (lone surrogates from non-UTF-8 file names), the mended copy the summary holds
    (model/summary.py `analysis_bytes`; packed above 256 ranks, model/pack.py)."""
    from llmdiag.diagnose.model.summary import analysis_bytes

    return analysis_bytes(analysis)


@contextlib.contextmanager
def frozen_heap():
    """The objects alive now (the analysis: ~10^6 at 16,384 ranks) left out of the cyclic collector's passes
    while the outputs are built; each full pass would rescan them all, and they hold no cycles to collect.
    That halves the terminal's and the report's time at 4,096 ranks (benchmarks/ladder.py times it)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def write_json(summary: bytes, path: str) -> None:
    """Atomically through a mkstemp file in the target folder (diagnose/model/files.py); an output error is one
    line (exit 2) and leaves nothing half-written."""
    write_atomic(path, summary)


class Background:
    """`fn(*args)` on a thread of its own; `result()` waits for it and raises what it raised. The summary's
    write waits ~8 ms on the disk in its fsync (the GIL released), time the terminal's and the report's
    rendering use instead of waiting too (docs/benchmarks.md, "Whole command")."""

    def __init__(self, fn, *args) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn, args) -> None:
        try:
            fn(*args)
        except BaseException as e:  # re-raised in the caller's thread by result()
            self._error = e

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def provenance(ctx: click.Context, analysis: Analysis) -> Provenance:
    """The command as the user could retype it (options given explicitly), the options that change the
    numbers, and the trace files read."""
    from click.core import ParameterSource

    cmd = ["llmdiag", "analyze"]
    for p in ctx.command.params:
        v = ctx.params.get(p.name)
        if p.name == "paths":
            cmd += list(v)
        elif ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE and v not in (None, False):
            flag = max(p.opts, key=len)
            cmd += [flag] if v is True else [flag, ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    opts = {"comm_regex": analysis.options.comm_regex, "exclude_last_step": analysis.options.exclude_last_step,
            "top": ctx.params.get("top_k")}
    files = [r.file for r in analysis.ranks] + [i.file for i in analysis.issues if i.severity == "error"]
    return Provenance.now(cmd, opts, files, analysis.llmdiag_version)


def engine_spec(ctx: click.Context, jobs, scheduler, scheduler_file, dask_local):
    """The engine the options choose. DASK_SCHEDULER_ADDRESS is a default only: any engine option given on the
    command line (--dask-local, --scheduler-file, --jobs) wins over it. Two explicit choices: one line, exit 2."""
    from click.core import ParameterSource

    from llmdiag.diagnose.engine import EngineSpec

    if ctx.get_parameter_source("scheduler") == ParameterSource.ENVIRONMENT and (dask_local or scheduler_file or jobs):
        scheduler = None
    return EngineSpec(jobs=jobs, dask_local=dask_local, scheduler=scheduler or None, scheduler_file=scheduler_file)


def parse_ranks(text: str | None):
    """'0-3,8' -> a RankSet (ranges, never a list: cli/rank_spec.py); a bad list is one line, exit 2."""
    if not text:
        return None
    from llmdiag.diagnose.cli.rank_spec import RankSet

    return RankSet.parse(text)


def output_path(ctx, param, value: str | None) -> str | None:
    """An output path given to a FILE/DIR option; an option's name in its place (`--timeline -q`: click takes
    the next word as the value) is refused instead of becoming a file named `-q`."""
    if value is not None and value.startswith("-"):
        raise click.BadParameter(f"{printable(value)!r} looks like an option, not a path (write ./{printable(value)} "
                                 "for a file of that name)")
    return value


def _ranks_fit(target, ranks) -> None:
    """--ranks against the input before any trace is parsed: more ranks than its trace files, or a rank at or
    past the manifest's world size, cannot be held (the exact check follows once the ranks are read)."""
    from llmdiag.diagnose.io.discover import discover

    src = discover(target)
    world = (src.manifest or {}).get("world_size") if isinstance(src.manifest, dict) else None
    if len(ranks) > len(src.files) or (type(world) is int and world > 0 and ranks.max() >= world):
        held = f"{len(src.files)} trace file(s)" + (f", world size {world}" if type(world) is int else "")
        raise LlmdiagError(f"--ranks asks for {len(ranks)} rank(s) up to {ranks.max()}; the input holds {held}",
                           src.path)


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "json_path", metavar="FILE", callback=output_path,
              help="Write the JSON summary here (default: beside the report).")
@click.option("--report", "report_path", metavar="FILE", callback=output_path, help="Write the HTML report here.")
@click.option("--no-report", is_flag=True, help="Skip the HTML report.")
@click.option("--comm-regex", metavar="RE", help="Extra kernel-name regex counted as communication (e.g. DeepEP).")
@click.option("--exclude-last-step", "exclude_last_step", is_flag=True,
              help="Drop the last ProfilerStep, as HTA does (its numbers become comparable).")
@click.option("--hta-compat", is_flag=True, help="HTA's conventions: the last ProfilerStep dropped, and the critical "
              "path on HTA's graph and longest path (its split reproduced).")
@click.option("--jobs", "-j", type=click.IntRange(1, 1024), help="Worker processes (default: all cores).")
# -- the engine: the local pool by default, or Dask (docs/cluster.md); one of these at most -------------------
@click.option("--scheduler", metavar="ADDRESS", envvar="DASK_SCHEDULER_ADDRESS", show_envvar=True,
              help="Run the per-rank jobs on this Dask scheduler (tcp://host:8786); needs llmdiag[cluster].")
@click.option("--scheduler-file", metavar="FILE", help="The Dask scheduler named in this file "
              "(`dask scheduler --scheduler-file FILE`).")
@click.option("--dask-local", type=click.IntRange(1, 4096), metavar="N",
              help="Start a Dask LocalCluster of N worker processes for this analysis (at most one per trace and "
              "per core).")
@click.option("--top", "top_k", type=click.IntRange(1, 1000), default=20, show_default=True, help="Top kernels kept per rank.")
@click.option("--cross-check", type=click.Choice(["hta"]), help="Also run HTA on the same traces and print both overlaps.")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in a browser.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the output paths and problems.")
@click.option("--timeline", "timeline_path", metavar="FILE", callback=output_path,
              help="Also write one merged Chrome-trace JSON of the ranks' own traces with llmdiag's tracks "
                   "(open in Perfetto; gzip when FILE ends in .gz).")
@click.option("--ranks", "timeline_ranks", metavar="LIST", callback=lambda c, p, v: parse_ranks(v),
              help="Ranks in the timeline, e.g. 0-3,8 (default: all).")
@click.option("--timeline-max-events", type=click.IntRange(1000, 10**9),
              help="Cap on the traces' own complete events in the timeline (default: none; the longest kept, "
                   "what was cut said in the trace).")
@click.option("--tables", "tables_dir", metavar="DIR", callback=output_path,
              help="Also write the per-rank tables as Parquet files in DIR (pandas, polars, duckdb; docs/python.md).")
@click.option("--format", "tables_format", type=click.Choice(["parquet", "csv", "both"]), default="parquet",
              show_default=True, help="What --tables writes: Parquet, CSV (Excel; no pyarrow needed) or both.")
@click.option("--run", "run", metavar="newest|N|all", default="newest", show_default=True,
              help="A folder holding several runs (the same job run twice): analyse the newest complete one, run N "
                   "(1 = the oldest), or each (outputs named NAME-runN).")
def analyze(paths, json_path, report_path, no_report, comm_regex, exclude_last_step, hta_compat, jobs, scheduler,
            scheduler_file, dask_local, top_k, cross_check, open_browser, quiet, timeline_path, timeline_ranks,
            timeline_max_events, tables_dir, run, tables_format):
    """Analyse a run folder, a folder of Kineto traces, or trace files.

    Exit 0 when every trace was analysed, 1 when some were left out (each named on stderr), 2 when
    nothing usable remains or the input is wrong.
    """
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    from llmdiag.diagnose.metrics.rank.comm_regex import check_comm_regex

    exclude_last_step = exclude_last_step or hta_compat  # HTA drops the last step

    run = run.strip().lower()
    if run not in ("newest", "all"):  # digits read by their count (`²`, 5,000 digits: one line, not a traceback)
        from llmdiag.diagnose.cli.rank_spec import small_int

        try:
            if small_int(run, "--run", 10**6) < 1:
                raise ValueError
        except (LlmdiagError, ValueError):
            shown = run if len(run) <= 40 else run[:40] + f"… ({len(run)} characters)"
            raise LlmdiagError(f"--run {printable(shown)!r} is not newest, all or a run number (1 = the oldest)") \
                from None
    check_comm_regex(comm_regex)
    if tables_dir and tables_format != "csv":  # before the analysis: a missing extra is one line, not minutes lost
        from llmdiag.diagnose.engine.blas import load_numpy_single_threaded
        from llmdiag.diagnose.export.tables import require_pyarrow

        load_numpy_single_threaded()  # pyarrow loads numpy: with one BLAS thread, as the analysis does below
        require_pyarrow()
    target = list(paths) if len(paths) > 1 else paths[0]
    if timeline_ranks is not None and not timeline_path:
        raise click.UsageError("--ranks chooses the ranks of --timeline; give --timeline FILE too")
    if timeline_path and isinstance(target, str):
        from llmdiag.diagnose.io.op_table_path import find_op_table

        if find_op_table(target):
            raise LlmdiagError("--timeline merges Kineto traces; an op table holds no trace events to merge", target)
    if timeline_ranks:  # before any work: more ranks than the input can hold is known from the files alone
        _ranks_fit(target, timeline_ranks)
    explicit = [p for p in (json_path, report_path, timeline_path) if p]
    for p in explicit:  # a link, FIFO or device at an output: refused before minutes of analysis
        check_target(p)
    engine = engine_spec(click.get_current_context(), jobs, scheduler, scheduler_file, dask_local)
    engine = dataclasses.replace(engine, meanwhile=lambda: _warm(not no_report, quiet))
    source, engine = _parse_ahead(target, engine)
    from llmdiag.diagnose.analyze import analyze_runs

    tracks: dict | None = {} if timeline_path else None  # the timeline's intervals, from this same pass, per run
    analyses = analyze_runs(target, comm_regex=comm_regex, exclude_last_step=exclude_last_step, engine=engine,
                            progress=not quiet, top_k=top_k, run=run, tracks=tracks, track_ranks=timeline_ranks,
                            hta_compat=hta_compat, source=source)
    if timeline_ranks:  # ranks read from the traces: checked before any output is written
        from llmdiag.diagnose.export.timeline import check_ranks

        for a in analyses:
            check_ranks([r.rank for r in a.ranks], timeline_ranks, a.source)
    for a in analyses:  # the inputs are known now: no output may name one, checked before the first is written
        for p in explicit:
            check_target(_run_path(p, a, len(analyses) > 1))
    codes = [_outputs(a, json_path, report_path, no_report, quiet, cross_check, exclude_last_step, open_browser,
                      timeline_path, timeline_ranks, timeline_max_events, tables_dir, several=len(analyses) > 1,
                      tracks=(tracks or {}).get(a.name))
             for a in analyses]
    # The outputs are written and closed: the cyclic collector's passes at interpreter exit would only rescan
    # the heap before it is freed (40-60 ms of CPU a run, docs/benchmarks.md), so it is frozen at exit. Other
    # exit handlers still run and reference counting still frees every object.
    atexit.register(gc.freeze)
    sys.exit(max(codes))


def _parse_ahead(target, engine):
    """(the input discovered or None, the engine): a small input's traces parsed in a forked child while this
    process imports the analysis and warms its outputs (cli/ahead.py, io/ahead.py); the engine then has nothing
    left to do meanwhile (engine/fork.py NOTHING)."""
    from llmdiag.diagnose.cli.ahead import start
    from llmdiag.diagnose.engine.blas import load_numpy_single_threaded
    from llmdiag.diagnose.engine.fork import NOTHING, quietly

    source, early = start(target, engine)
    load_numpy_single_threaded()  # before anything loads numpy: its BLAS threads are only start-up cost here
    if early is None:
        return source, engine
    try:
        import llmdiag.diagnose.analyze  # noqa: F401  (the per-rank metrics and the job's sections)

        quietly(engine.meanwhile)
        early.take()
    except BaseException:  # Ctrl-C, a broken install: the child's parse is wanted no more
        early.close()
        raise
    return source, dataclasses.replace(engine, meanwhile=NOTHING)


def _warm(report: bool, quiet: bool) -> None:
    """What the outputs import (the rules, the summary writer, the report and its templates, the terminal's
    tables), loaded while the traces are analysed on the other core (engine/fork.py): ~25 ms of a small run."""
    import llmdiag.diagnose.rules
    import llmdiag.diagnose.model.summary

    if report:
        from llmdiag.reports.render import warm

        warm()
    if not quiet:
        import llmdiag.diagnose.cli.terminal  # noqa: F401


def _run_path(path: str | None, analysis: Analysis, several: bool) -> str | None:
    """An explicit output path, suffixed -runN when one command writes the outputs of several runs."""
    if not path or not several or not analysis.runs:
        return path
    k = next(r.number for r in analysis.runs if r.analysed)
    root, ext = os.path.splitext(path)
    return f"{root}-run{k}{ext}"


def _outputs(analysis, json_path, report_path, no_report, quiet, cross_check, exclude_last_step, open_browser,
             timeline_path, timeline_ranks, timeline_max_events, tables_dir, several: bool = False,
             tracks: dict | None = None) -> int:
    """The summary, terminal tables, report and extras of one analysis; its exit code (1: files left out)."""
    json_path, report_path, timeline_path, tables_dir = (_run_path(p, analysis, several) for p in
                                                         (json_path, report_path, timeline_path, tables_dir))
    if analysis.runs:  # on stderr too: -q prints no terminal tables (nor issues)
        from llmdiag.diagnose.model.runs import OTHER_RUN, RUNS_PREFIX  # an input of one run has no such issue

        for i in analysis.issues:
            if i.message.startswith((RUNS_PREFIX, OTHER_RUN)):  # the runs, then what the others hold
                click.echo(printable(f"llmdiag: {i.file}: {i.message}"), err=True)
    analysis.provenance = provenance(click.get_current_context(), analysis)
    with frozen_heap():  # the analysis lives to the end: the collector need not rescan it while outputs are built
        summary, shown = json_safe(analysis)  # paths on disk (outputs, the HTA cross-check) keep the real names
        jpath, hpath = output_paths(analysis, json_path, report_path)
        # With a report to render, the summary is written (and renamed) meanwhile; the terminal tables and the
        # report are shown or written only once it is on disk, in the order they always were: a summary that
        # cannot be written is still the one error, and no report follows it. Without one, nothing would
        # overlap its fsync: written here, no thread started.
        pending = Background(write_json, summary, jpath) if not no_report else None
        if pending is None:
            write_json(summary, jpath)
        try:
            text = html = None
            if not quiet:
                from llmdiag.diagnose.cli.terminal import render

                tty = sys.stdout.isatty()
                colour = tty and not os.environ.get("NO_COLOR")
                text = render(analysis, colour=colour)  # the terminal escapes every trace-derived string itself
            if not no_report:
                from llmdiag.reports.render import render_html, write_report

                html = render_html(shown)
        finally:
            if pending is not None:
                pending.result()
        if text is not None:
            click.echo(text, color=colour)
        if cross_check:
            from llmdiag.diagnose.cli.hta_check import cross_check_hta

            click.echo(cross_check_hta(analysis, exclude_last_step))
        click.echo(("" if quiet else "\n") + f"summary: {printable(os.path.abspath(jpath))}")  # folder names may hold ESC bytes: never raw to the terminal
        if html is not None:
            try:
                out = write_report(html, hpath)
            except LlmdiagError as e:  # the one writer's line, saying which output it was
                raise LlmdiagError(e.what.replace("cannot write", "cannot write the report", 1), e.path,
                                   e.hint) from None
            click.echo(f"report:  {printable(os.path.abspath(out))}")
            if open_browser:
                import webbrowser  # 5 ms (subprocess, shlex): only where a browser is opened

                webbrowser.open("file://" + os.path.abspath(out))
        if timeline_path:
            from llmdiag.diagnose.export.timeline import write_timeline

            out = write_timeline(analysis, timeline_path, tracks, timeline_ranks, timeline_max_events)
            click.echo(f"timeline: {printable(out)}")
        if tables_dir:
            from llmdiag.diagnose.export.csv_tables import write_csv
            from llmdiag.diagnose.export.tables import write_tables

            fmt = click.get_current_context().params.get("tables_format") or "parquet"
            n = {"parquet": lambda: f"{len(write_tables(shown, tables_dir))} Parquet files",
                 "csv": lambda: f"{len(write_csv(shown, tables_dir))} CSV files",
                 "both": lambda: f"{len(write_tables(shown, tables_dir))} Parquet files, "
                                 f"{len(write_csv(shown, tables_dir))} CSV files"}[fmt]()
            click.echo(f"tables:  {printable(os.path.abspath(tables_dir))} ({n})")
    errors = [i for i in analysis.issues if i.severity == "error"]
    for i in errors:
        msg = i.message if i.message.startswith("llmdiag: ") else f"llmdiag: {i.file}: {i.message}"
        click.echo(printable(msg), err=True)
    return 1 if errors else 0
