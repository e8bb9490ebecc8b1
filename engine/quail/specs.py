"""What the planner reads: operators over named tables, each in terms a DAG author writes."""

import hashlib
import json
from dataclasses import asdict, dataclass

METRICS = ("accuracy", "precision", "recall")  # what a cascade's target may bound
CALIBRATIONS = ("auto", "none", "contextual")  # auto: the model's own (model/registry.py)


@dataclass(frozen=True)
class Cascade:
    """A filter's second, larger model: the first model answers the rows whose P(yes) lies outside
    [low, high]; `model` answers the rest. The band is given by hand (planner/band.py helps choose
    it), or chosen in the run for a target: `metric` (accuracy, precision or recall) at least
    `target` against the larger model, with failure probability at most `delta`, on `sample` rows
    of the first window that the larger model labels (planner/guarantee.py)."""

    model: str
    low: float | None = None  # None: chosen in the run, for the target
    high: float | None = None
    metric: str | None = None
    target: float | None = None
    delta: float = 0.05
    sample: int = 400
    __pydantic_config__ = {"extra": "forbid"}

    @property
    def chosen(self) -> bool:
        """Whether the band is known: given, or chosen on the first window."""
        return self.low is not None

    def band(self) -> tuple[float, float]:
        """A chosen cascade's band, [low, high]."""
        if self.low is None or self.high is None:
            raise ValueError("the cascade's band is chosen in the run: it has none yet")
        return self.low, self.high

    def goal(self) -> tuple[str, float]:
        """The metric and target a band is chosen for in the run."""
        if self.metric is None or self.target is None:
            raise ValueError("the cascade's band was given: it has no target")
        return self.metric, self.target


FIELD_TYPES = ("str", "int", "float", "bool", "date", "enum", "list[str]")  # what an extract's fields may be


@dataclass(frozen=True)
class FieldSpec:
    """One field an extract fills in: null where the document does not say."""

    name: str
    type: str  # one of FIELD_TYPES
    description: str = ""
    values: tuple[str, ...] = ()  # an enum's
    __pydantic_config__ = {"extra": "forbid"}


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    kind: str  # a name in quail.kinds.KINDS
    inputs: tuple[str, ...]  # tables or earlier operators; a join's are (left, right)
    columns: tuple[str, ...]  # the text column of each input: the document rendering
    questions: tuple[str, ...]  # filter: the predicates; classify: the question; join: the condition
    labels: tuple[str, ...] = ()
    descriptions: tuple[str, ...] = ()  # a classify: each label's description, shown in the prompt; () for none
    threshold: float = 0.5
    limit: int | None = None
    top_k: int | None = None  # a join: the best K right rows of each left row; a classify: its K best labels
    recall_target: float | None = None  # a join: the share of the full join its output holds, certified
    recall_delta: float = 0.05  # ... with probability at least 1 - recall_delta (planner/recall.py)
    candidates: int | None = None  # a join: each left row asks only its K best-scoring right rows
    embedding: str | None = None  # a join's scores: a sentence-transformers model's vectors, not the model's own
    condition_first: bool = True  # a join: the condition before each right row, computed once per left row
    right_name: str | None = None  # a join: what its prompt calls a right row; by default its column's name
    keep_all: bool = False
    calibration: str = "auto"  # "contextual": each question's content-free answer divided out; "auto": the model's
    cascade: Cascade | None = None  # a filter: the rows its model is unsure of go to a larger one
    fields: tuple[FieldSpec, ...] = ()  # an extract's
    max_new_tokens: int | None = None  # an extract's or a map's: the most tokens it writes per row
    output_column: str | None = None  # a map's: the column it writes
    output: str | None = None
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    def fingerprint(self) -> str:
        """Identifies what the operator computes, for the selectivities observed (cost/observed.py)."""
        what = [self.kind, self.columns[0], list(self.questions), list(self.labels), self.threshold]
        if self.descriptions:
            what.append(list(self.descriptions))
        if self.cascade is not None:  # another model answers some rows: another selectivity
            what.append(asdict(self.cascade))
        if self.fields or self.max_new_tokens is not None:
            what.append([[asdict(f) for f in self.fields], self.max_new_tokens])
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "OperatorSpec":
        tuples = {"inputs", "columns", "questions", "labels", "descriptions"}
        d = {k: tuple(v) if k in tuples else v for k, v in d.items()}
        if isinstance(d.get("cascade"), dict):
            d["cascade"] = Cascade(**d["cascade"])
        if "fields" in d:
            d["fields"] = tuple(FieldSpec(**(f | {"values": tuple(f.get("values", ()))})) if isinstance(f, dict)
                                else f for f in d["fields"])
        return cls(**d)
