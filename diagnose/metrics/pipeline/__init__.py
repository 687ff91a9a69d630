"""Pipeline parallelism from a trace: actions read from labels (actions), inferred from send/recv and
kernels when there are none (infer), point-to-point matching across ranks (p2p), and bubbles per stage
(bubbles)."""
