"""Measurement: perplexity against length, context use, decode benchmarks, plots and comparison reports."""
