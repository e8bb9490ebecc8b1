"""Asking a model about chosen pairs of a join's product, by pair id (`i * right rows + j`): the
pairs a blocked join's mode chooses, and the pairs a join cascade's band leaves unsure, each left
row with its right rows in one call."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quail.executor.stats import Stats

if TYPE_CHECKING:
    from quail.reuse import Retain, Reuse
    from quail.session import Session


@dataclass(frozen=True)
class Pairs:
    """One join's tables and condition, as every model asked about its pairs sees them."""

    left: list[str]
    right: list[str]
    condition: str
    reuse: "bool | Reuse"
    truncate: bool
    left_rows: list[int]
    right_rows: list[int]
    calibration: str
    partner: str
    condition_first: bool

    @property
    def size(self) -> int:
        return len(self.left) * len(self.right)

    def ask(self, session: "Session", ids: Iterable[int], retain: "Retain | None" = None,
            bias: dict[int, float] | None = None) -> tuple[dict[int, float], Stats]:
        """Each pair's P(yes) from `session`'s model. `bias`: the right rows' content-free P(yes)
        that earlier calls with the same model probed (kept apart per model)."""
        m, rows = len(self.right), defaultdict(list)
        for pair in ids:
            rows[pair // m].append(pair % m)
        if not rows:
            return {}, Stats()
        result, stats = session.join(self.left, self.right, self.condition, self.reuse, retain, self.truncate, None,
                                     self.left_rows, self.right_rows, self.calibration, self.partner,
                                     [rows.get(i, []) for i in range(len(self.left))], self.condition_first, bias)
        return {i * m + j: p for i, js in rows.items() for j, p in zip(js, result.p_yes[i])}, stats
