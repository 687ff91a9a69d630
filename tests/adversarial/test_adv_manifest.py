"""manifest.json values of the right JSON type but no real run's: a numeric option that is text, a world or
mesh size of 10^10. A string `bucket_cap_mb` reached `float()` in a rule (a traceback); a huge world size
would size per-rank sets. Each is one line naming the manifest, exit 2, nothing written."""

from __future__ import annotations

import json

import pytest

from tests.adversarial.conftest import attack, check
from tests.gen.builder import gpu_rank


def run_folder(tmp_path, **manifest):
    d = tmp_path / "run"
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(d / "traces" / f"rank{r}.json")
    (d / "manifest.json").write_text(json.dumps({"schema_version": 1, "workload": "dp2", "world_size": 2,
                                                 "layout": {"dp": 2}, **manifest}))
    return d


def test_a_plain_manifest_is_read(tmp_path):
    r = attack("analyze", run_folder(tmp_path, options={"bucket_cap_mb": 25.0}), "-q", "--no-report", "--json",
               tmp_path / "s.json", cwd=tmp_path)
    check(r, 0, one_line=False)


@pytest.mark.parametrize("manifest, words", [
    ({"options": {"bucket_cap_mb": "abc"}}, "options.bucket_cap_mb is not a positive number ('abc')"),
    ({"options": {"micro_batch": [1]}}, "options.micro_batch is not a positive number"),
    ({"options": {"grad_accum": -1}}, "options.grad_accum is not a positive number"),
    ({"world_size": 10_000_000_000}, "world_size is not a size from 1 to 1048576"),
    ({"layout": {"dp": 0}}, "layout.dp is not a size from 1 to 1048576"),
    ({"world_size": "2"}, "world_size is not an integer"),
])
def test_wrong_values_are_one_line(tmp_path, manifest, words):
    r = attack("analyze", run_folder(tmp_path, **manifest), "-q", "--no-report", "--json", tmp_path / "s.json",
               cwd=tmp_path)
    line = check(r, 2, "invalid manifest", words)
    assert "/run: invalid manifest" in line and not (tmp_path / "s.json").exists()  # the run folder named
