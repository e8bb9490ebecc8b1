"""End to end: whole workloads through Quail against what a user would otherwise run."""
