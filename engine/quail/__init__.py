"""Quail: LLM filter, join and classify over tables with planned KV reuse."""

from quail.errors import QuailError

__all__ = ["QuailError"]
