"""`analyze` on every real trace set of ../shared/fixtures/real (each folder or file its README lists) at 80, 100 and
160 columns: no line wider than the terminal, every top kernel's full name somewhere in the output (a legend
under its table where the table shortens it), every column headed. The conftest skips these without the folder."""

from __future__ import annotations

import os
from functools import lru_cache

import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.cli.terminal import TOP_KERNELS, render
from llmdiag.diagnose.model.names import demangle
from llmdiag.diagnose.model.views import kernel_table
from tests.conftest import REAL
from tests.unit.cli.test_terminal_layout import WIDTHS, flat, headed

SETS = ["hta/sampled_pair", "hta/nccl_data.json.gz", "hta/a100_16rank_alltoall_rank0.json.gz",
        "hta/ns_resolution_rank-0.pt.trace.json.gz", "hta/amd_mi250_minitoy.json.gz",
        "hta/cpu_only_rank-34.pt.trace.json.gz", "hta/rank_not_found.json.gz", "hta/trace_diff/control.json.gz",
        "hta/trace_diff/test.json.gz", "tracelens/b200_vllm_tp8_rank0.json.gz",
        "tracelens/mi300_ddp8_actckpt_rank0.json.gz", "tracelens/mi300_resnet18_no_caching_allocator.json.gz",
        "kineto/samples/resnet50_num_workers_0", "kineto/samples/resnet50_num_workers_4", "bytedance",
        "torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5",
        "torchrec/sst_long_a2a_optimizer_5_qcomm", "torchrec/sst_sleep_pl_dense_after_backward_2",
        "hta/critical_path/simple_add", "hta/critical_path/alexnet", "hta/critical_path/cuda_event_sync",
        "hta/critical_path/cuda_event_sync_multi_stream"]


@lru_cache(maxsize=1)
def _analysed(name: str):
    from llmdiag.diagnose.analyze import analyze_path

    return analyze_path(os.path.join(REAL, name), jobs=1)


@pytest.mark.real
@pytest.mark.parametrize("name", SETS)
def test_real_sets_fit_80_100_160_columns_with_every_top_kernel_in_full(name):
    a = _analysed(name)
    names = [demangle(k.name) for k in kernel_table(a, TOP_KERNELS)]
    for width in WIDTHS:
        text = render(a, width=width)
        assert [x for x in text.splitlines() if len(x) > width] == [], (name, width)
        assert [n for n in names if flat(n) not in flat(text)] == [], (name, width)
        assert headed(text) == [], (name, width)


@pytest.mark.real
def test_the_cli_follows_columns_and_prints_the_roofline(tmp_path, monkeypatch):
    """The command as a user runs it, with COLUMNS set: the same limits, and the report's roofline table."""
    monkeypatch.setenv("COLUMNS", "80")
    res = CliRunner().invoke(main, ["analyze", os.path.join(REAL, "hta/trace_diff/control.json.gz"), "--no-report",
                                    "--json", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output
    # the closing `summary: PATH` line (cli/analyze.py) keeps its absolute path whole, to be copied: not measured
    assert max(len(x) for x in res.output.splitlines() if not x.startswith("summary: ")) <= 80
    assert "against the roofline" in res.output and "TFLOP/s" in res.output


@pytest.mark.real
@pytest.mark.parametrize("width", WIDTHS)
def test_the_cli_on_a_relative_folder_of_two_runs(tmp_path, monkeypatch, width):
    """As typed by a user: a relative folder (its own issues name it relative, its files' issues absolute)
    holding two runs; every line within the width but the closing `summary:` path."""
    monkeypatch.setenv("COLUMNS", str(width))
    folder = os.path.relpath(os.path.join(REAL, "torchrec/sst_long_a2a_optimizer_5_qcomm"))
    res = CliRunner().invoke(main, ["analyze", folder, "--no-report", "--json", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output
    lines = [x for x in res.stdout.splitlines() if not x.startswith("summary: ")]
    assert max(len(x) for x in lines) <= width and "Issues (files in " in res.stdout
    assert flat(res.stdout).count("ip-172-31-16-248.us-east-2.compute.internal_55988") == 1  # wrapped at 80
