"""One `llmdiag run` derives its plan once and hands it down: `prepare` is the one call to `RunOptions.plan()`,
launch / manifest / slurm read the RunPlan, the options are frozen and nobody assigns to them. torchrun is
replaced by a recorder (no process starts), so this is fast and torch-free."""

from __future__ import annotations

import ast
import copy
import json
import os
from dataclasses import FrozenInstanceError, replace

import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main
from llmdiag.workloads import launch as L
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.launch import launch
from llmdiag.workloads.options import LaunchOptions, RunOptions, prepare
from llmdiag.workloads.slurm import sbatch_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class _Torchrun:
    """subprocess.Popen for torchrun: records the command and exits 0 at once, its ranks never started."""

    commands: list[list[str]] = []

    def __init__(self, cmd, **kwargs):
        _Torchrun.commands.append(list(cmd))
        self.stdout, self.returncode, self.pid = iter(()), 0, -1

    def poll(self):
        return 0


@pytest.fixture
def plan_calls(monkeypatch):
    """Every RunOptions.plan() call, and torchrun replaced by the recorder."""
    calls: list[RunOptions] = []
    real = RunOptions.plan

    def counted(self, *args, **kwargs):
        calls.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunOptions, "plan", counted)
    monkeypatch.setattr(L.subprocess, "Popen", _Torchrun)
    _Torchrun.commands = []
    return calls


def _rank_argv(cmd: list[str]) -> list[str]:
    return cmd[cmd.index("llmdiag.workloads.train") + 1:]


def test_launch_plans_nothing_and_leaves_its_inputs_alone(tmp_path, plan_calls):
    opts = RunOptions("tp2pp2", device="cpu", out=str(tmp_path / "run"), profile_steps="0,1,1", steps=3)
    lo = LaunchOptions(timeout=30)
    run = prepare(opts, lo)
    assert len(plan_calls) == 1
    before = copy.deepcopy((opts, lo, run))
    launch(run, lo, command=["llmdiag", "run"], echo=lambda s: None, echo_err=lambda s: None)
    assert len(plan_calls) == 1, "launch derived the plan again"
    assert (opts, lo, run) == before

    (cmd,) = _Torchrun.commands
    sent = RunOptions.from_argv(_rank_argv(cmd))
    assert sent == replace(opts, out=os.path.abspath(opts.out))  # the ranks get the options, device resolved
    assert prepare(sent).plan == run.plan  # ... from which each rank derives the launcher's plan
    with open(tmp_path / "run" / "manifest.json") as f:
        m = json.load(f)
    assert m["launch"]["torchrun_command"] == cmd
    assert m["steps"] == 3 and m["profiler"]["active"] == 1
    assert m["options"]["microbatches"] == 4 and m["options"]["schedule"] == "1f1b"  # decided by the plan
    assert m["options"]["reshard_after_forward"] is False  # under pp
    assert "out" not in m["options"] and m["options"]["device"] == "cpu"


def test_one_llmdiag_run_calls_plan_once(tmp_path, plan_calls):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--workload", "dp2", "--device", "cpu", "--out", str(out),
                                       "--profile-steps", "0,1,1", "--steps", "3", "--timeout", "30"])
    assert result.exit_code == 1, result.output  # the recorder started no rank: every rank is missing
    assert len(plan_calls) == 1 and len(_Torchrun.commands) == 1
    assert plan_calls[0].device == "cpu" and plan_calls[0].out == str(out)  # the options as given, unassigned


def test_print_slurm_calls_plan_once(plan_calls):
    result = CliRunner().invoke(main, ["run", "--workload", "dp2tp2pp2", "--nproc-per-node", "4", "--print-slurm"])
    assert result.exit_code == 0, result.output
    assert len(plan_calls) == 1 and not _Torchrun.commands
    assert "#SBATCH --nodes=2" in result.output


def test_run_plan_reads_what_the_options_imply():
    run = prepare(RunOptions("fsdp2", grad_accum=2, profile_steps="2,1,3", batch=8))
    assert run.profile == (2, 1, 3) and run.steps == 9  # 6 profiled + 3 unprofiled
    assert run.reshard_after_forward is True and run.plan.global_batch == 8
    assert prepare(RunOptions("pp2")).reshard_after_forward is False
    assert prepare(RunOptions("pp2", reshard_after_forward=True)).reshard_after_forward is True
    assert sbatch_script(run, LaunchOptions(nproc_per_node=2)).count("--grad-accum 2") == 1


def test_launcher_checks_come_before_the_plan_is_used():
    with pytest.raises(WorkloadError, match="needs 4 ranks but 2 are available"):
        prepare(RunOptions("tp2pp2"), LaunchOptions(nproc_per_node=2))
    with pytest.raises(WorkloadError, match="rank 9"):
        prepare(RunOptions("dp2"), LaunchOptions(inject_fault="rank:9:raise"))
    assert prepare(RunOptions("dp2")).plan.layout.world_size == 2  # a rank: no launcher checks


@pytest.mark.parametrize("obj", [RunOptions("dp2"), LaunchOptions(), prepare(RunOptions("dp2"))])
def test_options_and_plan_are_frozen(obj):
    name = next(iter(vars(obj)))
    with pytest.raises(FrozenInstanceError):
        setattr(obj, name, getattr(obj, name))


def test_no_module_derives_the_plan_but_options():
    """Only options.prepare calls RunOptions.plan / total_steps / profile; everything else reads the RunPlan.
    (reference.py is the single-process reference the tests compare against, not part of a run.)"""
    derived = {"plan", "total_steps", "profile", "reshard"}
    bad = []
    for folder, _, files in os.walk(os.path.join(ROOT, "workloads")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or name in ("options.py", "reference.py"):
                continue
            with open(path) as f:
                tree = ast.parse(f.read())
            bad += [f"{os.path.relpath(path, ROOT)}:{n.lineno} .{n.func.attr}()" for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in derived]
    assert not bad


def test_launch_checks_the_world_size_against_the_gpus_it_counts(tmp_path, plan_calls, monkeypatch):
    """`auto` on a 2-GPU node: the plan from `prepare` needs 4 ranks; launch refuses before any file is written."""
    monkeypatch.setattr(L, "resolve_device", lambda requested: ("cuda", 2))
    run = prepare(RunOptions("tp2pp2", out=str(tmp_path / "run")), LaunchOptions())
    with pytest.raises(WorkloadError, match=r"needs 4 ranks but 2 are available \(1 node\(s\) x 2 GPUs per node\)"):
        launch(run, LaunchOptions())
    with pytest.raises(WorkloadError, match="--nproc-per-node 4 but only 2 GPUs are visible"):
        launch(run, LaunchOptions(nproc_per_node=4))
    assert len(plan_calls) == 1 and not _Torchrun.commands and not os.path.exists(tmp_path / "run")
