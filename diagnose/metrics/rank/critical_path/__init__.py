"""A rank's dependency graph (graph.py), its critical path per step (path.py) and the path's split by what
bounds it (split.py); `--hta-compat` builds HTA's graph instead (hta.py)."""
