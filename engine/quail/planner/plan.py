"""The operator-level plan: pure, deterministic, no I/O, fast enough for DAG parse time.

Input: operator specs and, optionally, selectivities observed in earlier runs. Output: a `Plan`
with a stable hash, giving each operator rewind, the prefix-sharing decision and the retention
schedule. The token-level sharing plan (PrefixTree) needs the data and is made when the job runs.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, replace

from quail.errors import QuailError
from quail.kinds import KINDS
from quail.kinds.settings import check_operator_name
from quail.planner import retention
from quail.specs import OperatorSpec


@dataclass(frozen=True)
class OperatorPlan:
    name: str
    rewind: bool  # KV rewind
    sharing: bool
    sharing_reason: str
    retain: retention.RetentionEntry | None
    selectivity: float | None  # a filter's estimate: observed, or the prior
    certain: bool = True  # it runs whenever its producers do: the worker may compute it ahead (worker/ahead.py)
    written: float | None = None  # an extract's or a map's tokens written a row, as observed; None: not yet
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    @classmethod
    def from_dict(cls, d: dict) -> "OperatorPlan":
        keep = d.get("retain")
        if keep is not None:
            keep = retention.RetentionEntry(tuple(keep["consumers"]), keep["passed"], keep["failed"])
        sharing = d["sharing"] if "sharing" in d else d["prefix_sharing"]  # an older Quail's name (#49)
        return cls(d["name"], d["rewind"], sharing, d["sharing_reason"], keep, d["selectivity"],
                   d.get("certain", True), d.get("written"))


@dataclass(frozen=True)
class Plan:
    specs: tuple[OperatorSpec, ...]
    operators: tuple[OperatorPlan, ...]
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def __getitem__(self, name: str) -> OperatorPlan:
        return next(o for o in self.operators if o.name == name)

    def to_dict(self) -> dict:
        """Plain JSON (tuples as lists), as it travels to the worker and into XCom."""
        return json.loads(json.dumps({"specs": [s.to_dict() for s in self.specs],
                                      "operators": [asdict(o) for o in self.operators]}))

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        return cls(tuple(OperatorSpec.from_dict(s) for s in d["specs"]),
                   tuple(OperatorPlan.from_dict(o) for o in d["operators"]))

    def uncertain(self, names: set[str]) -> "Plan":
        """This plan with these operators marked as ones that might not run (a branch above them, a
        trigger rule other than all_success): nothing is computed ahead for them."""
        return Plan(self.specs, tuple(replace(o, certain=o.name not in names) for o in self.operators))

    def with_entry(self, op: OperatorPlan) -> "Plan":
        """This plan with one operator's entry replaced."""
        if all(o.name != op.name for o in self.operators):
            raise QuailError(f"the plan has no operator {op.name!r}")
        return Plan(self.specs, tuple(op if o.name == op.name else o for o in self.operators))


def _validate(specs: list[OperatorSpec]) -> None:
    seen: set[str] = set()
    for s in specs:
        where = f"operator {s.name!r}"
        check_operator_name(s.name)
        if s.name in seen:
            raise QuailError(f"{where}: operator names must be unique")
        if s.kind not in KINDS:
            raise QuailError(f"{where}: kind {s.kind!r} is not one of {', '.join(KINDS)}")
        KINDS[s.kind].validate(s, where)
        seen.add(s.name)


def plan(specs: list[OperatorSpec], observed: dict[str, float] | None = None, *, rewind: bool = True,
         sharing: bool = True, retention_on: bool = True, written: dict[str, float] | None = None) -> Plan:
    """Operators run in the given order; an input names a table or an operator listed earlier.
    `observed`: filters' selectivities; `written`: the tokens written a row, by part (the stats
    stores, cost/observed.py)."""
    _validate(specs)
    names = {s.name for s in specs}
    for k, s in enumerate(specs):
        earlier = {t.name for t in specs[:k]}
        for i in s.inputs:
            if i in names and i not in earlier:
                raise QuailError(f"operator {s.name!r}: its input {i!r} is an operator that runs later")
    observed, written = observed or {}, written or {}
    schedule = retention.schedule(specs, observed) if retention_on else {}
    ops = []
    for s in specs:
        keep = schedule.get(s.name)
        kind = KINDS[s.kind]
        if not sharing:
            share, why = False, "switched off"
        elif s.limit is not None:
            share, why = False, "a row limit keeps input order"
        else:
            share, why = True, "per document, where the compute saved exceeds the KV writes"
        sel = retention.selectivity(s, observed) if kind.narrows else None
        rewinds = rewind and (kind.asks_more_than_once(s) or keep is not None)
        keys = kind.field_keys(s)
        expected = kind.expected_written(s, [written[p] for p in keys]) if keys and all(
            p in written for p in keys) else None
        ops.append(OperatorPlan(s.name, rewinds, share, why, keep, sel, written=expected))
    return Plan(tuple(specs), tuple(ops))
