"""Benchmarks that print figures: `python -m bench.run_all` runs them all and writes bench/RESULTS.md."""
