"""Short definitions of every number in the report (anchors `g-<key>`), consistent with design.md.

Inline because the report must work offline; docs/metrics.md holds the long versions.
"""

GLOSSARY = {
    "step_time": ("Step time", "Duration of one analysis window (a ProfilerStep#N span); on GPU traces the device "
                  "side of the step: first to last GPU event correlated with that step's CPU ops. Reported per "
                  "step and as the mean over steps; the aggregate is the mean over ranks."),
    "compute": ("Compute", "|U(compute)|: union of GPU kernels that are not communication, memcpy or memset (on "
                "CPU-only traces: top-level aten ops of the training threads, without communication and waits)."),
    "compute_only": ("Compute only", "|U(compute) − U(comm)|: compute time with no communication running."),
    "overlapped_comm": ("Overlapped comm", "|U(comm) ∩ U(compute)|: communication hidden under compute."),
    "exposed_comm": ("Exposed comm", "|U(comm) − U(compute)|: communication with no compute running; the "
                     "fraction is exposed comm / step time."),
    "other": ("Other", "memcpy/memset time not under compute or communication."),
    "idle": ("Idle", "Step time with nothing running on the device (or training threads); idle fraction = idle / "
             "step time. In pipeline runs it includes the bubble."),
    "overlap_ratio": ("Overlap ratio", "|U(comm) ∩ U(compute)| / |U(comm)| per rank, over all steps (HTA's "
                      "definition). n/a when the rank has no communication."),
    "comm_overlap": ("Overlap per collective", "Per collective kind and process group: each op's own overlapped "
                     "fraction, weighted by duration (Nsight's view), so one long exposed op is not hidden by many "
                     "small overlapped ones, over all the ranks that run it. Ops and times are per step (each rank's "
                     "total / its step count), the mean over those ranks; times are sums of op durations, not "
                     "unions."),
    "compute_frac": ("Compute fraction", "|U(compute)| / step time, mean over ranks."),
    "bubble": ("Pipeline bubble", "Measured: 1 − |U(F/B/I/W spans of the stage)| / pipeline window, per step. "
               "Theory: (p−1)/(m+p−1) for GPipe and 1F1B, (p−1)/(v·m+p−1) interleaved with v chunks, ≈ 0 for "
               "zero-bubble schedules. Replay: the observed order re-run with measured durations and free "
               "communication. Gap = measured − theory."),
    "imbalance": ("Stage imbalance", "Busy time of the slowest pipeline stage / mean stage busy time − 1."),
    "pipeline_window": ("Pipeline window", "First action start to last action end over the ranks of one pipeline, "
                        "per step (clocks aligned)."),
    "prediction": ("Prediction", "Bubble and pipeline time replayed for another schedule or microbatch count at "
                   "the same global batch, an estimate: each action's fixed host cost kept, the rest scaled by m/m′, "
                   "messages at latency + bytes/bandwidth per link (docs/simulation.md); formula only where no step "
                   "time."),
    "memory": ("Memory peak", "From the allocator's [memory] events: peak Total Allocated and Total Reserved per "
               "device, the op running at the peak, against the device's total memory where known."),
    "algbw": ("Algorithm bandwidth", "Message bytes (nelems × dtype size) / op duration, over ops of known size."),
    "busbw": ("Bus bandwidth", "algbw × 2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter and "
              "all-to-all, 1 otherwise (nccl-tests convention); comparable with the link peak."),
    "skew": ("Arrival skew", "Collectives matched across ranks by process group, kind and ordinal (send/recv are not "
             "matched): latest start − earliest start. Transfer time: the shortest duration among the ranks."),
    "straggler": ("Straggler", "The rank that arrives last in at least half of ≥ 3 matched collectives, or whose "
                  "compute per step exceeds the median by more than 5 %. Its value: the share of matched collectives "
                  "it arrived last at, or its compute excess over the median."),
    "tokens_per_s": ("Tokens/s", "Tokens per optimizer step (all data-parallel replicas) / mean step time."),
    "mfu": ("MFU", "Achieved FLOP/s per device / the device's dense bf16 peak (known for GPUs only). Model "
            "FLOPs per step = 6·N·tokens + 12·layers·hidden·seq·tokens (PaLM's convention)."),
    "tflops": ("Achieved FLOP/s", "Model FLOPs per step / mean step time / world size, printed in TFLOP/s, "
                                   "GFLOP/s or MFLOP/s by its size."),
    "kernel_share": ("Kernel share", "A kernel's summed time / summed time of all kernels (or top-level ops) in "
                     "the windows, both over the ranks whose top-K list holds the kernel. Its ms and count per step "
                     "are the mean over those same ranks."),
    "hints": ("Hints", "Device idle share, kernels per step, share of kernels under 10 µs, DataLoader wait share "
              "and fp32 GEMM share: facts only the rules use."),
    "severity": ("Severity", "One rule for every finding: high: the expected gain is ≥ 10 % of the step; "
                 "medium ≥ 3 %; low otherwise, and low for a finding with no gain, except a correctness risk "
                 "(near-OOM, contaminated timings), which keeps its own level. A gain judged against an assumed "
                 "reference (evidence source 'assumed') is at most medium, and its gain text says so. A finding "
                 "whose time is part of another's (\"part of the same … as …\") keeps its level but its gain is "
                 "not counted twice."),
    "expected_gain": ("Expected gain", "Computed from this run's numbers by the rule's formula "
                      "(docs/recommendations.md); an upper bound where it says 'up to'."),
}
