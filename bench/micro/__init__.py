"""Micro-benchmarks: one layer, kernel, library or store at a time."""
