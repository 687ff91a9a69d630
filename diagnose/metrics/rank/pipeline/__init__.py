"""Pipeline parallelism read from one rank's trace: actions from labels (actions), inferred from send/recv and
kernels when there are none (infer), the ops of batched launches (batch), peers from the group's list (peers),
and the rank's send/recv records (p2p)."""
