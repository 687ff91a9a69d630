"""The elementwise breakdown is the same whatever the hash seed: tied patterns are ordered by name, and a
group's sum is taken in a fixed order (it was a set's, so summaries differed from run to run)."""

import os
import subprocess
import sys

from llmdiag.diagnose.metrics.rank.elementwise import _groups

CODE = """
from llmdiag.diagnose.metrics.rank.elementwise import _groups, ms_by_pattern
by = {("activation", "silu"): 0.25, ("activation", "mul"): 0.25, ("norm", "pow"): 0.5, ("casts", "to"): 0.5, ("norm", "neg"): 0.01,
      ("rotary", "cat"): 0.2, ("rotary", "neg"): 0.2, ("other", "x"): 0.7, ("other", "y"): 0.1}
g = _groups(by)
print(list(ms_by_pattern(g, 1).items()))
"""


def test_groups_tie_free_of_hash_seed():
    outs = set()
    for seed in ("0", "1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1


def test_groups_sum_and_standalone():
    g = _groups({("norm", "pow"): 3.0, ("norm", "rsqrt"): 1.0, ("norm", "neg"): 0.1})
    # pow and rsqrt form one chain (each >= a tenth of the largest); neg stands alone
    assert g["pow/rsqrt (RMSNorm)"] == (4.0, 2)
    assert g["neg"] == (0.1, 1)
