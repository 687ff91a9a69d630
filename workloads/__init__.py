"""llmdiag's training side: parallel layouts as profiled workloads, launched by `llmdiag run` through torchrun.

This package file stays torch-free: `workloads.grammar`, `options`, `config`, `launch`, `manifest`, `slurm`,
`faults` and `rankio` import without torch, so the CLI validates before anything heavy loads; the modules that
train (`train`, `model`, `data`, `parallel`, `profiling`, `reference`) import torch.
"""
