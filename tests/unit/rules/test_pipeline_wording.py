"""Wording an expert reads at once (issue 23 item 4): the device is called a GPU only when it is one, and the
MoE heading names no empty list of groups."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.model.devices import device_word
from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed

DEVICE_RULES = {  # rule -> edit of each rank that makes it fire (as tests/unit/rules/test_rules.py's TRIGGERS)
    "host_bound": lambda r: r["hints"].update(device_idle_frac=0.3, short_kernel_frac=0.7),
    "allocator_churn": lambda r: r.update(idle={"idle_ms": 32.0, "runtime_ms": 31.0, "host_bound_ms": 1.0,
                                                "runtime_ops": {"hipFree": 30.0, "hipMalloc": 1.0},
                                                "runtime_calls": {"hipFree": 260.0, "hipMalloc": 290.0}}),
    "host_sync": lambda r: r.update(idle={"idle_ms": 12.0, "runtime_ms": 11.0, "host_bound_ms": 1.0,
                                          "runtime_ops": {"aten::item": 9.0, "cudaStreamSynchronize": 2.0},
                                          "runtime_calls": {"aten::item": 10.0, "cudaStreamSynchronize": 10.0}}),
}


@pytest.mark.parametrize("name,word", [("MTIA v2", "device"), ("Meta MTIA T1", "device"), ("Intel Gaudi 2", "device"),
                                       ("TPU v5e", "device"), ("NVIDIA H100 80GB HBM3", "GPU"),
                                       ("AMD Instinct MI300X", "GPU"), ("A100-SXM4-40GB", "GPU"), ("", "GPU"),
                                       (None, "GPU")])
def test_device_word(name, word):
    assert device_word(name) == word


@pytest.mark.parametrize("rule", sorted(DEVICE_RULES))
@pytest.mark.parametrize("device,word", [("MTIA v2", "device"), ("NVIDIA H100 80GB HBM3", "GPU")])
def test_idle_findings_name_the_device_kind(rule, device, word):
    s = summary(8)
    s["manifest"]["device"]["name"] = device
    for r in s["ranks"]:
        DEVICE_RULES[rule](r)
    f = next(f for f in run_rules(typed(s)) if f.id == rule)
    text = f"{f.title} {f.evidence.text}"
    assert (word[0].upper() + word[1:]) in f.title, text
    if word == "device":
        assert "GPU" not in text, text


@pytest.mark.parametrize("groups", [[], [[]]])
def test_moe_heading_without_known_groups(tmp_path, groups):
    """A DeepEP trace has no EP group in its args: the heading says so instead of printing "EP groups )"."""
    import dataclasses

    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.moe import section
    from tests.gen.moe import moe_ep_ranks

    bs, _ = moe_ep_ranks([[0, 40], [40, 0]], mode="deepep", labels=False)
    for b in bs:
        b.write(tmp_path / f"rank{b.rank}.pt.trace.json.gz")
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.moe is not None
    assert "EP groups [0, 1]" in render(a) or "EP groups not known" in render(a)
    a.moe = dataclasses.replace(a.moe, groups=groups)
    term, html = render(a), str(section(a.moe))
    for text in (term, html):
        assert "EP groups not known from the trace" in text and "EP groups )" not in text
        assert "EP groups: ." not in text


@pytest.mark.parametrize("cores,workload", [(1, "pp2"), (2, "pp2"), (3, "pp2"), (4, "tp2pp2"), (64, "tp2pp2")])
def test_demo_fits_the_machine(cores, workload):
    """`make demo` runs at most one rank per core (tp2pp2 needs 4): on 2 cores its first finding was "timings
    cannot be trusted" and nothing else; a pp2 run on 2 cores leads with its pipeline bubble and stage balance."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(["make", "-n", "-s", "demo", f"NPROC={cores}", "VENV=/nonexistent-venv"], cwd=root,
                         capture_output=True, text=True, timeout=30).stdout
    assert f"run --workload {workload} " in out, out
