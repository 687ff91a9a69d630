"""The CLI's flags and the docs agree: every option of every `llmdiag` subcommand is named in README.md or
docs/*.md, every `--flag` the docs name exists on some subcommand (flags of other tools are listed below, with
the tool), and a flag written after `llmdiag SUB` on one line belongs to SUB.

The options come from the click command tree itself (diagnose/cli/main.py), not from a list kept here.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from llmdiag.diagnose.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])--[a-zA-Z][\w-]*\w(?![\w-])")  # `--run`, `--nproc-per-node=8` (the flag only)
WILDCARD = re.compile(r"(?<![\w-])(--[a-zA-Z][\w-]*-)\*")  # `--allow-*`: a family of flags
USE = re.compile(r"llmdiag (\w+)\b([^`#|;&]*)")  # `llmdiag analyze runs/a --json a.json` up to a comment or pipe

# Flags of other tools that the docs quote, by tool. Add one here only with the tool it belongs to.
OTHER_TOOLS = {
    # python -m tests.expert.score (docs/expert-corpus.md)
    "--xfail-report", "--real-only", "--planted-only", "--llmdiag", "--markdown",
    # python -m benchmarks.run / benchmarks.engine (docs/benchmarks.md, docs/cluster.md)
    "--baseline-repeats", "--cases", "--data-dir", "--full", "--ladder", "--no-hta", "--parser", "--quick",
    "--repeats", "--mb", "--workers", "--trace", "--against", "--against-jobs",
    # python -m llmdiag.workloads.overhead (docs/workloads.md)
    "--repeat",
    # python -m tests.expert.score (docs/expert-corpus.md)
    "--llmdiag", "--markdown", "--real-only",
    # torchrun (docs/workloads.md, docs/ci.md, docs/cluster.md)
    "--max-restarts", "--standalone", "--rdzv-backend",
    # Slurm: sbatch / srun (docs/ci.md, docs/cluster.md)
    "--account", "--cpus-per-task", "--dependency", "--exclusive", "--gpus-per-node", "--job-name",
    "--kill-on-bad-exit", "--nodes", "--ntasks-per-node", "--output", "--overlap", "--parsable", "--partition",
    "--time", "--wait",
    # dask worker (docs/cluster.md)
    "--memory-limit", "--no-dashboard", "--nthreads", "--nworkers",
    # pip (docs/ci.md)
    "--index-url",
    # a user's own training script (docs/ci.md's Slurm example: `train.py --profile-dir ...`)
    "--profile-dir",
    # Nsight Systems' option, named in graph_replay_idle's action (docs/recommendations.md)
    "--cuda-graph-trace",
    # Megatron-LM's option, named in a recommendation's action (docs/recommendations.md)
    "--overlap-moe-expert-parallel-comm",
}


def _commands(cmd: click.Command = main, path: tuple[str, ...] = ()):
    yield path, cmd
    if isinstance(cmd, click.Group):  # listed and loaded as `llmdiag --help` does: the group imports them lazily
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            yield from _commands(sub, path + (name,))


def options() -> dict[str, list[tuple[str, click.Option]]]:
    """'llmdiag analyze' -> its options (the group's own under 'llmdiag')."""
    return {" ".join(("llmdiag", *path)): [p for p in cmd.params if isinstance(p, click.Option)]
            for path, cmd in _commands()}


def all_flags() -> set[str]:
    return {o for opts in options().values() for p in opts for o in p.opts + p.secondary_opts}


def _text() -> str:
    return "\n".join(d.read_text(encoding="utf-8") for d in DOCS)


def test_every_option_is_documented():
    """An option counts as named when one of its long names appears as a flag in README.md or docs/*.md."""
    named = set(FLAG.findall(_text()))
    missing = [f"{cmd}: {' / '.join(p.opts + p.secondary_opts)}" for cmd, opts in options().items() for p in opts
               if not named & {o for o in p.opts + p.secondary_opts if o.startswith("--")}]
    assert not missing, "options named nowhere in README.md or docs/*.md:\n" + "\n".join(missing)


def test_every_documented_flag_exists():
    flags = all_flags()
    wrong = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            wrong += [f"{doc.relative_to(ROOT)}:{i}: {f}" for f in FLAG.findall(line)
                      if f not in flags and f not in OTHER_TOOLS and f != "--help"]
            wrong += [f"{doc.relative_to(ROOT)}:{i}: {w}*" for w in WILDCARD.findall(line)
                      if not any(f.startswith(w) for f in flags)]
    assert not wrong, ("flags the docs name that no llmdiag subcommand has (a renamed or removed option; a flag of "
                       "another tool goes in OTHER_TOOLS with its tool):\n" + "\n".join(wrong))


def test_flags_written_after_a_subcommand_belong_to_it():
    subs = {cmd.split()[1]: {o for p in opts for o in p.opts + p.secondary_opts}
            for cmd, opts in options().items() if len(cmd.split()) == 2}
    wrong = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in USE.finditer(line):
                if m.group(1) in subs:
                    wrong += [f"{doc.relative_to(ROOT)}:{i}: llmdiag {m.group(1)} {f}" for f in FLAG.findall(m.group(2))
                              if f not in subs[m.group(1)] and f != "--help"]
    assert not wrong, "flags given to a subcommand that does not have them:\n" + "\n".join(wrong)


def test_the_walk_sees_the_subcommands():
    """The command tree is read at all (a refactor of main.py must not make every check vacuous)."""
    cmds = options()
    assert {"llmdiag run", "llmdiag analyze", "llmdiag check", "llmdiag diff"} <= set(cmds)
    assert "--json" in {o for p in cmds["llmdiag analyze"] for o in p.opts}
