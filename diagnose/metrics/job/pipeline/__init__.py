"""Pipeline parallelism across ranks: peers from overlapping sends and receives (timematch), the stage chains
and schedule (chains), virtual stages and W actions (virtual), V-shaped placement (vshape), the transfers linking
compute blocks that both follow (links), point-to-point matching (p2p), and bubbles per stage (bubbles)."""
