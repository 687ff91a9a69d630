"""`analyze`: a run folder or trace folder in, the typed Analysis (with its findings) out.

The stages in order: discover the files (io), parse each rank on the engine (diagnose.engine: the local
process pool, or Dask; only summaries come back), resolve the job (metrics/job/resolve.py: a frozen Job), the
replay and the what-if over it (simulate), the Analysis built once from it (metrics/job/sections.py), then the
rules, and last the cap on per-step rows (after the rules have read them).
"""

from __future__ import annotations

import dataclasses
import os
import time

from llmdiag.diagnose import __version__
from llmdiag.diagnose.engine import EngineSpec, Work, default_workers, run_jobs
from llmdiag.diagnose.io import ahead
from llmdiag.diagnose.io.discover import Source, discover
from llmdiag.diagnose.io.op_table_path import find_op_table
from llmdiag.diagnose.metrics.job.cross_rank import stage_hint
from llmdiag.diagnose.metrics.job.resolve import resolve_job
from llmdiag.diagnose.metrics.job.sections import build_analysis
from llmdiag.diagnose.metrics.rank.comm_regex import check_comm_regex
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, RankOutput, failed_output, run_job
from llmdiag.diagnose.metrics.job.runs import described, group_runs, pick_runs
from llmdiag.diagnose.metrics.job.step_stats import add_step_summary
from llmdiag.diagnose.model.analysis import Analysis, AnalysisOptions, Issue
from llmdiag.diagnose.model.step_cap import cap_steps
from llmdiag.diagnose.model.summary import manifest_from_dict


def analyze_path(path, *, comm_regex: str | None = None, exclude_last_step: bool = False, jobs: int | None = None,
                 progress: bool = False, top_k: int = 20, rules: bool = True, engine: EngineSpec | None = None,
                 timings: dict | None = None, run: str | int = "newest", tracks: dict | None = None,
                 track_ranks: list[int] | None = None, hta_compat: bool = False) -> Analysis:
    """`engine` says where the per-rank jobs run (default: the local pool of `jobs` processes); `progress` draws
    files done, MB/s and ETA on a terminal. `timings`, when given, gets the seconds of each phase: map (the
    per-rank jobs on the engine), reduce (resolve, simulate, build) and rules. `run`: which run of an input holding several
    (diagnose.metrics.runs): "newest" (default: the newest complete run, else the newest) or its number, 1 the
    oldest. `tracks`, when given, gets each rank's timeline intervals from this same pass (`analyze --timeline`:
    metrics/rank/track_intervals.py), of `track_ranks` only where given."""
    per_run: dict | None = {} if tracks is not None else None
    a = analyze_runs(path, comm_regex=comm_regex, exclude_last_step=exclude_last_step, jobs=jobs, progress=progress,
                     top_k=top_k, rules=rules, engine=engine, timings=timings, run=run, tracks=per_run,
                     track_ranks=track_ranks, hta_compat=hta_compat)[0]
    if tracks is not None and per_run is not None:
        tracks.update(per_run.get(a.name, {}))
    return a


def analyze_runs(path, *, comm_regex: str | None = None, exclude_last_step: bool = False, jobs: int | None = None,
                 progress: bool = False, top_k: int = 20, rules: bool = True, engine: EngineSpec | None = None,
                 timings: dict | None = None, run: str | int = "newest", tracks: dict | None = None,
                 track_ranks: list[int] | None = None, hta_compat: bool = False,
                 source: Source | None = None) -> list[Analysis]:
    """As `analyze_path`, one Analysis per run analysed: `run` "all" gives every run of the input, oldest first
    (the files are parsed once). A run number the input does not have is an LlmdiagError (exit 2). `tracks`, when
    given, gets {analysis name: {rank: its timeline intervals}}, one entry per run analysed. `source`: `path` as
    `discover` read it, where the caller did already (the command line, to parse the traces ahead: io/ahead.py)."""
    path = inputs(path)
    check_comm_regex(comm_regex)
    engine = engine or EngineSpec()
    if jobs is not None:
        engine = dataclasses.replace(engine, jobs=jobs)
    if source is None and isinstance(path, str) and (table := find_op_table(path)):  # the straggler study's op tables: a kind of their own
        from llmdiag.diagnose.simulate.op_table import analyse_op_table

        analysis = analyse_op_table(table, __version__)
        add_step_summary(analysis)
        if rules:
            from llmdiag.diagnose.rules import findings

            analysis.findings = findings(analysis)
        cap_steps(analysis)  # per-step rows above the cap cut, after everything over steps was computed
        return [analysis]
    src = source or discover(path)
    man = manifest_from_dict(src.manifest, src.path) if src.manifest is not None else None
    folder_of, mans = _nested_manifests(src) if man is None else ({}, {})

    def man_of(f):
        return mans.get(folder_of.get(f, ""), man)

    def cpu_cap(m):
        return m.device.memory_bytes if m and m.device and m.device.type == "cpu" else None

    job_list = [RankJob(f, comm_regex, exclude_last_step, stage_hint(man_of(f), f), cpu_cap(man_of(f)), top_k,
                       tracks=(frozenset(track_ranks) if track_ranks else True) if tracks is not None else False,
                       hta_compat=hta_compat)
                for f in src.files]
    if len(job_list) == 1 and not engine.is_dask and (n := engine.jobs or default_workers()) > 1:
        job_list[0].helpers = n  # one rank on the local pool: its parse is split across the cores (split_parse.py)
    t0 = time.perf_counter()
    work = Work(run_job, failed_output, RankOutput)  # run_job looked up here: tests patch it
    all_outputs = run_jobs(job_list, work, engine, progress=progress)
    ahead.release()  # what the command parsed ahead and a forked child's job claimed there
    t1 = time.perf_counter()
    groups = group_runs(all_outputs)
    picked = pick_runs(groups, run, src.path)
    seen = described(groups) if len(groups) > 1 else None  # once for every run analysed: `--run all` was quadratic
    if seen is not None:  # what each run holds, from its ranks' metrics of the one parse (rules/other_runs.py)
        from llmdiag.diagnose.rules.other_runs import digest_runs, run_lines

        digest_runs(seen, groups)
    out = []
    for k in picked:
        outputs = groups[k]
        opts = AnalysisOptions(comm_regex=comm_regex, exclude_last_step=exclude_last_step, files=len(outputs),
                               run_folder=bool(src.run_folder), hta_compat=hta_compat)
        name = src.name if len(groups) == 1 else f"{src.name}-run{k + 1}"  # outputs of two runs never overwrite
        man_k = man
        folders = {folder_of.get(o.path, "") for o in outputs}
        if len(folders) == 1 and (folder := folders.pop()) in mans:  # one run folder of several: its manifest, its name
            man_k, name = mans[folder], os.path.basename(folder)
            if sum(os.path.basename(d) == name for d in mans) > 1:  # two run folders of one name: both kept apart
                name = f"{name}-run{k + 1}"
        run_tracks: dict | None = {} if tracks is not None else None
        job = resolve_job(outputs, man_k, source=src.path, skipped=src.skipped, tracks=run_tracks)
        if tracks is not None:
            tracks[name] = run_tracks
        stale = _stale(man_k) if man_k is not None else None  # marks the manifest: before the Analysis holds it
        infos = seen.infos_for(k) if seen is not None else []
        first = [Issue(src.path, t, None, "warning") for t in ([seen.message(k), *run_lines(infos)] if seen is not None else [])]
        analysis = build_analysis(
            job, name=name, opts=opts, version=__version__, pipeline=complete_from_job(job),
            whatif=kineto_whatif(job), tracks=run_tracks, runs=infos, first_issues=first,
            last_issues=[Issue(src.path, stale, None, "warning")] if stale else ())
        job.release()
        del job
        t2 = time.perf_counter()
        if rules:
            from llmdiag.diagnose.rules import findings

            analysis.findings = findings(analysis)
        if timings is not None:
            timings.update(map=t1 - t0, reduce=t2 - t1, rules=time.perf_counter() - t2)
        # per-step rows above the cap cut: after the build and the rules, which read every step's row (the
        # step summary, the step a quantity concentrates in); the cap is only what the outputs keep
        cap_steps(analysis)
        out.append(analysis)
    return out


def inputs(path):
    """`path` as str or a list of str: a pathlib.Path (or list of them) was a TypeError in discover."""
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    return [os.fspath(p) for p in path] if isinstance(path, (list, tuple)) else path


def _nested_manifests(src) -> tuple[dict[str, str], dict]:
    """(file -> its run folder, run folder -> its Manifest) for a folder holding run folders; a manifest that does
    not read is that run's loss only (its files are analysed as foreign traces)."""
    from llmdiag.diagnose.errors import LlmdiagError
    from llmdiag.diagnose.io.discover import read_manifest, run_folders

    if not os.path.isdir(src.path):
        return {}, {}
    folder_of = run_folders(src.path, src.files)
    mans = {}
    for d in sorted(set(folder_of.values())):
        try:
            data = read_manifest(os.path.join(d, "manifest.json"))
            mans[d] = manifest_from_dict(data, d) if data is not None else None
        except LlmdiagError:
            mans[d] = None
    return folder_of, {d: m for d, m in mans.items() if m is not None}


def _stale(man) -> str | None:
    """A manifest still `running` whose launcher is gone (killed with SIGKILL, the machine rebooted) was
    never finalised: marked `stale` here, so nothing (the gate included) takes it for a run in progress or
    a good one. Its launcher's pid is checked on the launcher's own host only."""
    if man.status != "running":
        return None
    import socket  # only for a manifest still `running`

    launch = man.launch if isinstance(man.launch, dict) else {}
    pid, host = launch.get("pid"), launch.get("host")
    if type(pid) is not int or pid <= 0 or host != socket.gethostname():
        return "the manifest says the run is still running (its launcher cannot be checked from here)"
    try:
        os.kill(pid, 0)
        return f"the run is still in progress (launcher pid {pid} is alive): numbers may be partial"
    except ProcessLookupError:
        pass
    except PermissionError:
        return f"the run is still in progress (launcher pid {pid} exists): numbers may be partial"
    man.status = "stale"
    man.failure = {"reason": f"the launcher (pid {pid}) is gone and never finalised the manifest (killed?)"}
    return f"stale run: {man.failure['reason']}"


# The simulations, imported only where there is something to simulate (a one-rank trace imports neither):
# each returns at once without pipeline actions, so the test is theirs, repeated here before the import.
def complete_from_job(job):
    """The measured pipeline with simulate.replay's replay and predictions (a copy); None where resolution
    measured no pipeline (simulate imported only where it did: a job without one never loads it)."""
    if job.pipeline is None:
        return None
    from llmdiag.diagnose.simulate.replay import complete_from_job as replay

    return replay(job)


def kineto_whatif(job):
    """simulate.kineto's what-if of the traced steps; None (as it returns) where no rank has pipeline actions."""
    if not job.with_actions():  # the what-if's own test, asked before simulate is imported
        return None
    from llmdiag.diagnose.simulate.kineto import kineto_whatif as whatif

    return whatif(job)
