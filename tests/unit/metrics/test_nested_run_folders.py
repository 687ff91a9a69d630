"""A folder holding several llmdiag run folders (`runs/`): each run analysed is named by its own run folder and
read with its own manifest (issue 36: `llmdiag analyze runs/` named a run `runs-run4` and read it without its
manifest, so its layout and workload were lost). Generated: two 2-rank runs, minutes apart, each in its folder
with a manifest whose workload differs; the answers are the folders' names and manifests."""

from __future__ import annotations

import json

from llmdiag.diagnose.analyze import analyze_runs
from tests.gen.builder import cpu_rank
from tests.gen.summaries import manifest

EPOCH_US = 1_700_000_000 * 10**6  # wall-clock µs (Nov 2023): what tells two runs of one folder apart


def _run(folder, workload: str, base_us: int) -> None:
    (folder / "traces").mkdir(parents=True)
    for r in range(2):
        cpu_rank(rank=r, world_size=2, steps=3, base_us=base_us).write(folder / "traces" / f"rank{r}.json")
    m = manifest(2, {"dp": 2, "fsdp": 1, "tp": 1, "pp": 1, "cp": 1}, gpu=False)
    m["workload"] = workload
    (folder / "manifest.json").write_text(json.dumps(m))


def test_each_run_folder_keeps_its_name_and_manifest(tmp_path):
    _run(tmp_path / "runs" / "dp2-a", "dp2", EPOCH_US)
    _run(tmp_path / "runs" / "dp2-b", "dp2zero", EPOCH_US + 600_000_000)  # ten minutes later
    out = analyze_runs(str(tmp_path / "runs"), jobs=1, rules=False, run="all")
    assert [a.name for a in out] == ["dp2-a", "dp2-b"]
    assert [a.manifest.workload if a.manifest else None for a in out] == ["dp2", "dp2zero"]


def test_two_run_folders_of_one_name_stay_apart(tmp_path):
    _run(tmp_path / "runs" / "x" / "dp2", "dp2", EPOCH_US)
    _run(tmp_path / "runs" / "y" / "dp2", "dp2", EPOCH_US + 600_000_000)
    out = analyze_runs(str(tmp_path / "runs"), jobs=1, rules=False, run="all")
    assert len({a.name for a in out}) == 2 and all(a.name.startswith("dp2") for a in out)
