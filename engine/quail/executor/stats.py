"""Token accounting. For every job: tokens_computed + sum(tokens_reused) == tokens_naive."""

from dataclasses import asdict, dataclass, field
from typing import overload

from quail.constants import MECHANISMS, mechanisms_of
from quail.planner.recall import combined


@dataclass
class StepStats:
    tokens_computed: int = 0
    tokens_naive: int = 0
    prompts: int = 0


@dataclass
class Stats:
    tokens_naive: int = 0
    tokens_computed: int = 0
    document_tokens_computed: int = 0
    question_tokens_computed: int = 0
    tokens_reused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MECHANISMS, 0))
    tokens_generated: int = 0  # written by an extract or a map: each fed back but a row's last, in no prompt
    forward_passes: int = 0
    pages_total: int = 0
    pages_peak: int = 0
    seconds: float = 0.0
    rows_truncated: int = 0
    rows_skipped: int = 0
    duplicates: int = 0  # documents identical to an earlier one: computed once, answers fanned out
    evictions: int = 0  # retained documents dropped from the pool to make room
    steps: dict[str, StepStats] = field(default_factory=dict)
    by_model: dict[str, dict[str, int]] = field(default_factory=dict)  # a cascade's: each model's rows and tokens
    guarantee: dict | None = None  # a cascade whose band was chosen for a target: how (planner/guarantee.py)
    blocking: dict | None = None  # a join that asked some of its pairs: which, and its recall (runtime/blocking.py)

    @overload
    def step(self, name: str) -> StepStats: ...
    @overload
    def step(self, name: None) -> None: ...

    def step(self, name: str | None) -> StepStats | None:
        """A step's counts (a filter's predicate), made on first use; none for a prompt of no step."""
        if name is None:
            return None
        return self.steps.setdefault(name, StepStats())

    def merge(self, other: "Stats") -> "Stats":
        for name in ("tokens_naive", "tokens_computed", "document_tokens_computed", "question_tokens_computed",
                     "tokens_generated", "forward_passes", "seconds", "rows_truncated", "rows_skipped", "duplicates",
                     "evictions"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mech in MECHANISMS:
            self.tokens_reused[mech] += other.tokens_reused[mech]
        self.pages_peak = max(self.pages_peak, other.pages_peak)
        self.guarantee = self.guarantee or other.guarantee
        self.blocking = combined(self.blocking, other.blocking)
        for name, s in other.steps.items():
            mine = self.steps.setdefault(name, StepStats())
            mine.tokens_computed += s.tokens_computed
            mine.tokens_naive += s.tokens_naive
            mine.prompts += s.prompts
        for model, counts in other.by_model.items():
            totals = self.by_model.setdefault(model, dict.fromkeys(counts, 0))
            for k, v in counts.items():
                totals[k] += v
        return self

    def of_model(self, name: str, rows: int) -> "Stats":
        """These figures, recorded as one model's share of a cascade."""
        self.by_model = {name: {"rows": rows, "tokens_computed": self.tokens_computed,
                                "tokens_naive": self.tokens_naive}}
        return self

    def check(self) -> None:
        reused = sum(self.tokens_reused.values())
        if self.tokens_computed + reused != self.tokens_naive:
            raise AssertionError(f"accounting broken: {self.tokens_computed} + {reused} != {self.tokens_naive}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Stats":
        return cls(**(d | {"steps": {k: StepStats(**v) for k, v in d["steps"].items()},
                           "tokens_reused": dict.fromkeys(MECHANISMS, 0) | mechanisms_of(d["tokens_reused"]),
                           "by_model": {k: dict(v) for k, v in d.get("by_model", {}).items()}}))
