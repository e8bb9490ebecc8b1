"""Predicted token accounting of a plan, before anything runs (`quail explain`).

Expected values over the rows of each operator's source table: a row reaches an operator with the
product of the selectivities of the filters before it, and each predicate of a k-predicate filter
with selectivity s passes with s^(1/k). Prefix sharing comes from the PrefixTree of the rows;
retention assumes the arena holds what the plan retains, and a row that passed a filter is
read by the consumers that follow it.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from quail.constants import MECHANISMS, mechanisms_of
from quail.kinds import kind_of
from quail.kinds.base import OperatorTokens
from quail.planner.plan import OperatorPlan, Plan
from quail.planner.retention import lineages
from quail.prefix_tree import PrefixTree


@dataclass
class Prediction:
    tokens_naive: float = 0.0
    tokens_computed: float = 0.0
    tokens_reused: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MECHANISMS, 0.0))
    tokens_generated_at_most: float = 0.0  # the most an extract or a map may write: each row's max_new_tokens
    tokens_generated_expected: float = 0.0  # what it is expected to write: the observed mean, else the most

    def add(self, other: "Prediction") -> None:
        self.tokens_naive += other.tokens_naive
        self.tokens_computed += other.tokens_computed
        self.tokens_generated_at_most += other.tokens_generated_at_most
        self.tokens_generated_expected += other.tokens_generated_expected
        for k, v in other.tokens_reused.items():
            self.tokens_reused[k] += v

    @classmethod
    def from_dict(cls, d: dict) -> "Prediction":
        most = d.get("tokens_generated_at_most", 0.0)
        return cls(d["tokens_naive"], d["tokens_computed"], dict.fromkeys(MECHANISMS, 0.0)
                   | mechanisms_of(d["tokens_reused"]),
                   most, d.get("tokens_generated_expected", most))

    def rounded(self) -> dict:
        d = {"tokens_naive": round(self.tokens_naive), "tokens_computed": round(self.tokens_computed),
             "tokens_reused": {k: round(v) for k, v in self.tokens_reused.items()}}
        if self.tokens_generated_at_most:
            d["tokens_generated_at_most"] = round(self.tokens_generated_at_most)
            d["tokens_generated_expected"] = round(self.tokens_generated_expected)
        return d


def _product(values: Iterable[float]) -> float:
    p = 1.0
    for v in values:
        p *= v
    return p


def predict(plan: Plan, tokens: dict[str, OperatorTokens], page_size: int = 16) -> dict[str, Prediction]:
    return {s.name: predict_operator(plan, s.name, tokens[s.name], page_size) for s in plan.specs}


def predict_operator(plan: Plan, name: str, t: OperatorTokens, page_size: int = 16,
                     reached: bool = False, stored: dict[int, int] | None = None) -> Prediction:
    """The expected accounting of one operator over the documents in `t`; additive over disjoint
    sets of documents (windows), as the sharing plan is made per window. `reached`: the documents
    are the rows that reached the operator (a job's), not the rows of its source table, which reach
    it with the selectivity of the filters before it. `stored`: the documents the answer store
    answers, with the tokens of the prompts each stands for."""
    specs = list(plan.specs)
    k = next(i for i, s in enumerate(specs) if s.name == name)
    spec, op, kind = specs[k], plan[name], kind_of(specs[k].kind)
    lines = lineages(specs)
    sel = {o.name: o.selectivity for o in plan.operators if o.selectivity is not None}
    line = lines[spec.name]
    upstream = _product(sel[f] for f in line.filters)
    reach = 1.0 if reached else upstream
    held = 0.0  # probability that a row reaching this operator finds its KV retained
    for x in specs[:k]:
        keep = plan[x.name].retain
        if keep is None or spec.name not in keep.consumers:
            continue
        lx = lines[x.name]
        kept = lx.filters if keep.failed > 0 or not kind_of(x.kind).narrows else lx.filters | {x.name}
        held = max(held, _product(sel[f] for f in kept | line.filters) / max(upstream, 1e-12))
    return _with_stored(t, stored, reach, lambda rest: _accounting(rest, kind.prompts(rest, sel.get(spec.name)), op,
                                                                   reach, held, page_size))


def predict_calibration(op: OperatorPlan, kind: str, probes: OperatorTokens, page_size: int = 16,
                        stored: dict[int, int] | None = None) -> Prediction:
    """The content-free prompts of contextual calibration (`probes`: the operator's tokens over the
    content-free documents): asked every question whatever the rows, and never retained."""
    return _with_stored(probes, stored, 1.0,
                        lambda rest: _accounting(rest, kind_of(kind).prompts(rest, 1.0), op, 1.0, 0.0, page_size))


def _with_stored(t: OperatorTokens, stored: dict[int, int] | None, reach: float,
                 predict: Callable[[OperatorTokens], Prediction]) -> Prediction:
    """The prediction over the documents the store does not answer, and the stored ones' prompts as
    reused by `answers`."""
    if not stored:
        return predict(t)
    p = predict(replace(t, docs=[d for i, d in enumerate(t.docs) if i not in stored]))
    p.tokens_naive += reach * sum(stored.values())
    p.tokens_reused["store"] += reach * sum(stored.values())
    return p


def predict_fresh(op: OperatorPlan, kind: str, t: OperatorTokens, page_size: int = 16) -> Prediction:
    """Documents known to reach the operator that find nothing retained: the rows a cascade's
    larger model answers."""
    return _accounting(t, kind_of(kind).prompts(t, op.selectivity), op, 1.0, 0.0, page_size)


def _accounting(t: OperatorTokens, prompts: tuple[list[tuple[float, int]], int], op: OperatorPlan, reach: float,
                held: float, page_size: int) -> Prediction:
    """reach: the probability that a document reaches the operator; held: that it finds its KV retained."""
    asked, common = prompts
    tree = PrefixTree.build(t.docs, page_size) if op.sharing else PrefixTree.flat(len(t.docs))
    p = Prediction()
    for doc, shared in zip(t.docs, tree.shared):
        n = len(doc)
        doc_new = (1 - held) * (n - shared)
        naive = sum(a * (n + extra) for a, extra in asked)
        if op.rewind:
            computed = doc_new + common + sum(a * (extra - common) for a, extra in asked)
        else:
            computed = sum(a * (doc_new + extra) for a, extra in asked)
        p.tokens_naive += reach * naive
        p.tokens_computed += reach * computed
        p.tokens_generated_at_most += reach * t.written
        p.tokens_generated_expected += reach * (t.written if op.written is None else min(op.written, t.written))
        first = (asked[0][0] if asked else 0.0) if op.rewind else sum(a for a, _ in asked)
        p.tokens_reused["retention"] += reach * held * n * first
        p.tokens_reused["sharing"] += reach * (1 - held) * shared * first
    p.tokens_reused["rewind"] = p.tokens_naive - p.tokens_computed - p.tokens_reused["retention"] \
        - p.tokens_reused["sharing"]
    return p
