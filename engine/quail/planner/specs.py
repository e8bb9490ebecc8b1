"""What the planner reads: operators over named tables, each in terms a DAG author writes."""

import hashlib
import json
from dataclasses import asdict, dataclass

@dataclass(frozen=True)
class OperatorSpec:
    name: str
    kind: str  # a name in quail.kinds.KINDS
    inputs: tuple[str, ...]  # tables or earlier operators; a join's are (left, right)
    columns: tuple[str, ...]  # the text column of each input: the document rendering
    questions: tuple[str, ...]  # filter: the predicates; classify: the question; join: the condition
    labels: tuple[str, ...] = ()
    threshold: float = 0.5
    limit: int | None = None
    top_k: int | None = None  # a join: the best K right rows of each left row
    right_name: str | None = None  # a join: what its prompt calls a right row; by default its column's name
    keep_all: bool = False
    calibration: str = "auto"  # "contextual": each question's content-free answer divided out; "auto": the model's
    output: str | None = None
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    def fingerprint(self) -> str:
        """Identifies what the operator computes, for the selectivities the stats store keeps."""
        what = [self.kind, self.columns[0], list(self.questions), list(self.labels), self.threshold]
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "OperatorSpec":
        tuples = {"inputs", "columns", "questions", "labels"}
        return cls(**{k: tuple(v) if k in tuples else v for k, v in d.items()})
