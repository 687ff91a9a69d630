"""llmdiag's offline analysis: Kineto traces in, metrics, findings and verdicts out.

Nothing in this package imports torch, so `llmdiag analyze` runs on any machine.
"""

__version__ = "0.1.0"
