"""What an operator's windows observe for the counts (cost/observed.py): a filter's rows asked and
passed, an extract's or a map's tokens written. The CLI's runner and the worker both add each
window's results here and record the sums once, so the two keep the same counts the same way."""

from collections.abc import Callable

import pyarrow as pa

from quail.cost.observed import SelectivityCounts, WrittenCounts
from quail.runtime import runtime_of
from quail.specs import OperatorSpec


class Observed:
    def __init__(self, spec: OperatorSpec, encode: Callable[[list[str]], list[list[int]]]) -> None:
        self.spec, self.encode = spec, encode
        self.asked = self.passed = 0
        self.written: dict[str, tuple[int, int]] = {}  # rows and tokens by part written

    def add(self, spec: OperatorSpec, results: pa.Table) -> None:
        """One window's results; `spec` is the window's (a row limit's rest)."""
        run = runtime_of(spec.kind)
        if (seen := run.observed(spec, results)) is not None:
            self.asked, self.passed = self.asked + seen[0], self.passed + seen[1]
        for key, (rows, tokens) in run.written_observed(spec, results, self.encode).items():
            before = self.written.get(key, (0, 0))
            self.written[key] = (before[0] + rows, before[1] + tokens)

    def record(self, selectivity: SelectivityCounts | None = None, written: WrittenCounts | None = None) -> None:
        if self.asked:
            (selectivity or SelectivityCounts()).record({self.spec.fingerprint(): (self.asked, self.passed)})
        if self.written:
            (written or WrittenCounts()).record(self.written)
