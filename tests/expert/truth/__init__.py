"""Independent truth for the expert corpus: computed from the raw Kineto events with gzip/json/numpy only.

Nothing here imports llmdiag (diagnose/, reports/, workloads/): these modules are the judge, not the judged.
One small module per kind of claim; each function takes loaded traces (truth.load.Trace) and returns plain
numbers, so the same code serves every real set and every planted trace.
"""
