"""What-if simulation: a dependency graph over the ops of all ranks, replayed with measured or idealised
durations (docs/simulation.md). Between metrics and rules: it reads io/metrics output, rules read its result."""
