"""The coordinator's side: every rank's `RankOutput` in, the frozen Job resolved (resolve.py), the `Analysis`
built once from it (sections.py): ranks and runs told apart, collectives and send/recv matched across ranks, skew and stragglers, pipeline bubbles, the
world's kernel views. Imports `metrics.rank` for its types, never the other way round."""
