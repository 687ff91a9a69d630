"""Pipeline parallelism from a trace: actions read from labels (actions), inferred from send/recv and
kernels when there are none (infer), the ops of batched launches (batch), peers from the group's list (peers)
or, across ranks, from overlapping sends and receives (timematch), virtual stages and W actions (virtual),
V-shaped placement (vshape), the transfers linking compute blocks that both follow (links), point-to-point
matching across ranks (p2p), and bubbles per stage (bubbles)."""
