"""Side-by-side benchmarks (run from the repository root: ``python -m bench.<name>``)."""
