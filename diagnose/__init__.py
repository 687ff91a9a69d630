"""llmdiag's offline analysis: Kineto traces in, metrics, findings and verdicts out.

Nothing in this package imports torch, so `llmdiag analyze` runs on any machine.
"""

from llmdiag import __version__ as __version__

# The one import name is `llmdiag`: reached as a top-level `diagnose` (a checkout's folder on sys.path), the same files
# would load a second time under other module names, with their own classes and caches.
if __name__ != "llmdiag.diagnose":
    raise ImportError("import llmdiag.diagnose, not diagnose: llmdiag's only import name is `llmdiag`")
