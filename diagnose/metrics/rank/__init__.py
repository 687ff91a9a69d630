"""The worker's side: one rank's trace in, its `RankOutput` out (per_rank.run_job). Runs in a pool or Dask
worker, one trace at a time; never imports `metrics.job`, so a worker loads only what one trace needs."""
