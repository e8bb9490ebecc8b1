"""The KV retention rule: which later operators can reuse which operator's document KV.

Two operators' documents are compatible when they are rows of the same table rendered the same way
(the same text column; one model per session). A later operator reads a retained document with the
probability that the document passes the filters that stand between the two.
"""

from dataclasses import dataclass

from quail.kinds import KINDS
from quail.specs import OperatorSpec

PRIOR = 0.5  # selectivity of a filter never run before: Laplace's rule with no observations


@dataclass(frozen=True)
class Lineage:
    """The documents an operator reads: rows of `table` that passed `filters`, rendered from `column`."""

    table: str
    filters: frozenset[str]
    column: str


@dataclass(frozen=True)
class RetentionEntry:
    consumers: tuple[str, ...]  # later operators that may claim the KV; the last one releases it
    passed: float  # probability a consumer reads a kept document (a filter: one that passed)
    failed: float  # a filter's failing documents: above 0 only if a consumer reads the filter's input
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)


def lineages(specs: list[OperatorSpec]) -> dict[str, Lineage]:
    """The documents each operator reads from its first input (a join's anchors)."""
    out: dict[str, Lineage] = {}
    by_name = {s.name: s for s in specs}

    def source(name: str) -> tuple[str, frozenset[str]]:
        spec = by_name.get(name)
        if spec is None:
            return name, frozenset()
        if not KINDS[spec.kind].keeps_rows:  # its output is a new table (a join's pairs)
            return spec.name, frozenset()
        table, filters = source(spec.inputs[0])
        return table, filters | {spec.name} if KINDS[spec.kind].narrows else filters

    for s in specs:
        table, filters = source(s.inputs[0])
        out[s.name] = Lineage(table, filters, s.columns[0])
    return out


def selectivity(spec: OperatorSpec, observed: dict[str, float]) -> float:
    return observed.get(spec.fingerprint(), PRIOR)


def schedule(specs: list[OperatorSpec], observed: dict[str, float]) -> dict[str, RetentionEntry | None]:
    """For each operator: what to retain after it, for which consumers, with which probabilities."""
    lines = lineages(specs)
    sel = {s.name: selectivity(s, observed) for s in specs if KINDS[s.kind].narrows}

    def reach(needed: frozenset[str]) -> float:
        p = 1.0
        for f in sorted(needed):
            p *= sel[f]
        return p

    out: dict[str, RetentionEntry | None] = {}
    for k, x in enumerate(specs):
        lx = lines[x.name]
        narrows = KINDS[x.kind].narrows
        kept = lx.filters | ({x.name} if narrows else frozenset())
        consumers, passed, failed = [], 0.0, 0.0
        for y in specs[k + 1 :]:
            ly = lines[y.name]
            if (ly.table, ly.column) != (lx.table, lx.column):
                continue
            consumers.append(y.name)
            passed = max(passed, reach(ly.filters - kept))
            if narrows and x.name not in ly.filters:
                failed = max(failed, reach(ly.filters - lx.filters))
        out[x.name] = RetentionEntry(tuple(consumers), passed, failed) if consumers else None
    return out
