"""`llmdiag run`'s options are declared once (workloads.options) and every other form is generated from them:
the click command, the ranks' argv parser, the argv in between. Also: workloads/ stands without diagnose/,
and its errors still reach the user as LlmdiagError's one line. Fast, torch-free."""

from __future__ import annotations

import ast
import os
from dataclasses import MISSING, fields, replace

from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.cli.run import run
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.options import LaunchOptions, RunOptions
from llmdiag.workloads.optspec import cli_options, to_argv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# A value for every RunOptions field, none of them its default.
NON_DEFAULT = {
    "workload": "dp2tp2pp2", "model": "125m", "layers": 6, "hidden": 256, "seq_len": 128, "batch": 16,
    "schedule": "zbv", "microbatches": 8, "steps": 9, "profile_steps": "0,2,4", "out": "/tmp/a run",
    "device": "cuda", "sp": True, "bucket_cap_mb": 12.5, "reshard_after_forward": False, "ac": True,
    "with_stack": True, "seed": 7, "lr": 3e-4, "inject_slow": "rank:1:2:forward",
    "moe_experts": 8, "moe_topk": 1, "moe_every": 2, "moe_capacity": 1.25, "moe_route_skew": 0.5,
    "moe_aux_weight": 0.001, "grad_accum": 4, "zero": 1, "accum_keep_gathered": True,
}


def test_every_field_set_survives_to_argv_and_back():
    assert set(NON_DEFAULT) == {f.name for f in fields(RunOptions)}, "new field: give it a value here"
    for f in fields(RunOptions):
        assert f.default is MISSING or NON_DEFAULT[f.name] != f.default, f.name
    o = RunOptions(**NON_DEFAULT)
    assert RunOptions.from_argv(to_argv(o)) == o
    o = replace(o, reshard_after_forward=True)
    assert RunOptions.from_argv(to_argv(o)) == o


def test_a_rank_gets_the_dataclass_defaults_for_what_argv_leaves_out():
    assert RunOptions.from_argv(["--workload", "dp2", "--out", "x"]) == RunOptions("dp2", out="x")


def test_every_field_is_a_click_option_with_the_same_default():
    params = {p.name: p for p in run.params}
    names = [f.name for cls in (RunOptions, LaunchOptions) for f in fields(cls)]
    assert sorted(params) == sorted(names), "click options and dataclass fields differ"
    for cls in (RunOptions, LaunchOptions):
        for f in fields(cls):
            p = params[f.name]
            if f.default is MISSING:
                assert p.required, f.name
            else:
                assert p.default == f.default and type(p.default) is type(f.default), (f.name, p.default)
                assert not p.required, f.name
    assert params["device"].default == "auto"
    assert params["reshard_after_forward"].secondary_opts == ["--no-reshard-after-forward"]
    assert params["sp"].is_flag and params["schedule"].type.choices


def test_help_lists_every_visible_option_with_its_help():
    text = " ".join(CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output.split())
    for cls in (RunOptions, LaunchOptions):
        for o in cli_options(cls):
            assert (o.flag in text) != o.hidden, o.flag
            assert o.hidden or o.help in text, o.flag
    assert "[default: 600.0]" in text and "[default: auto]" in text and "[default: 1f1b]" in text


def test_a_workload_error_reaches_the_cli_as_one_line_and_exit_2():
    result = CliRunner().invoke(main, ["run", "--workload", "tp3", "--print-slurm"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("llmdiag: tp3: 8 attention heads are not divisible by 3 (")


@given(st.text(), st.none() | st.text())
def test_workload_error_line_is_llmdiag_error_line(what, hint):
    assert WorkloadError(what, hint=hint).line() == LlmdiagError(what, hint=hint).line()


def test_workloads_never_import_diagnose():
    bad = []
    for folder, _, files in os.walk(os.path.join(ROOT, "workloads")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                            else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                    bad += [f"{os.path.relpath(path, ROOT)}: {m}" for m in mods if m.split(".")[0] == "diagnose"]
    assert not bad
