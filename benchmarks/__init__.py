"""Analyzer speed and memory benchmarks: llmdiag vs HolisticTraceAnalysis vs bare orjson (see docs/benchmarks.md)."""
