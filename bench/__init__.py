"""Quail's benchmarks: `python -m bench <kind> <name> [args]` from the repository root (README.md)."""
