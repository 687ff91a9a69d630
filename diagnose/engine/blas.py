"""numpy loaded with one BLAS thread for an `analyze` process: its BLAS pool is start-up cost and nothing more.

numpy's bundled OpenBLAS starts a thread per core when it loads (~60 ms of CPU, ~50-140 ms of wall per run
on the shared 2-core machine, as much as `gzip` + `orjson` of a 10 MB trace), and the analysis has no use for
it: its arrays are columns worked by elementwise ufuncs and sorts, which never call BLAS; the BLAS callers
(op_scaling's least squares, the what-if's line fit) solve systems of a few columns, where a thread pool
gains nothing; and the local engine already uses every core with one process each. So the command sets OPENBLAS_NUM_THREADS=1
while numpy loads, unless the user chose a thread count, then restores the environment: the setting is the
library's, read once at load, and nothing this process starts (a browser, Dask workers) inherits it. Only
the command line calls this: a program importing llmdiag keeps its own numpy as it set it up.
"""

from __future__ import annotations

import os
import sys

# The variables OpenBLAS reads for its thread count (any one set by the user wins: leave them all alone).
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def load_numpy_single_threaded() -> None:
    """Import numpy with a one-thread BLAS, where nothing imported it yet and the user set no thread count."""
    if "numpy" in sys.modules or any(v in os.environ for v in _THREAD_VARS):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401  (OpenBLAS reads the variable now, once)
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]
