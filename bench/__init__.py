"""Benchmarks; each module runs with `python -m bench.<name>` and feeds bench/README.md."""
