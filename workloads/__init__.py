"""llmdiag's training side: parallel layouts as profiled workloads, launched by `llmdiag run` through torchrun.

This package file stays torch-free: `llmdiag.workloads.grammar`, `options`, `config`, `launch`, `manifest`, `slurm`,
`faults` and `rankio` import without torch, so the CLI validates before anything heavy loads; the modules that
train (`train`, `model`, `data`, `parallel`, `profiling`, `reference`) import torch.
"""

# The one import name is `llmdiag`: reached as a top-level `workloads` (a checkout's folder on sys.path), the same files
# would load a second time under other module names, with their own classes and caches.
if __name__ != "llmdiag.workloads":
    raise ImportError("import llmdiag.workloads, not workloads: llmdiag's only import name is `llmdiag`")
