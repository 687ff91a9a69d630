"""llmdiag: profiler-driven performance diagnosis for distributed LLM training.

One import name. The repository keeps the card's three folders at its top (`diagnose/`, the offline analysis;
`reports/`, the HTML report; `workloads/`, the training side) and `llmdiag/` reaches them as
`llmdiag.diagnose`, `llmdiag.reports` and `llmdiag.workloads` (links in the checkout, real folders in the
installed wheel); nothing else is installed at the top of site-packages.

The public API, imported on first use so `import llmdiag` stays cheap (the analyzer's own import time is what
every `llmdiag analyze` and pool worker pays):

    import llmdiag
    a = llmdiag.analyze_path("runs/demo")          # -> llmdiag.Analysis
    llmdiag.render_report(a, "report.html")
    b = llmdiag.read_summary("runs/demo/summary.json")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module holding it
_API = {
    "analyze_path": "llmdiag.diagnose.analyze",
    "Analysis": "llmdiag.diagnose.model.analysis",
    "read_summary": "llmdiag.diagnose.model.summary",
    "findings": "llmdiag.diagnose.rules",
    "render_report": "llmdiag.reports.render",
    "LlmdiagError": "llmdiag.diagnose.errors",
    "TraceError": "llmdiag.diagnose.errors",
}
__all__ = ["Analysis", "LlmdiagError", "TraceError", "__version__", "analyze_path", "findings", "read_summary",
           "render_report"]

if TYPE_CHECKING:
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.errors import LlmdiagError, TraceError
    from llmdiag.diagnose.model.analysis import Analysis
    from llmdiag.diagnose.model.summary import read_summary
    from llmdiag.diagnose.rules import findings
    from llmdiag.reports.render import render_report


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llmdiag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
