"""What reuse a job asks for: the switches of its mechanisms (`Reuse`) and what an operator keeps of
its documents' KV for later operators (`Retain`). Torch-free, so the planner, the worker's client
and the Airflow provider can name them without loading the engine."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Reuse:
    """Each mechanism can be switched off on its own, for checks; answers never depend on them."""

    rewind: bool = True
    sharing: bool = True
    retention: bool = True
    borrowing: bool = True
    store: bool = True  # the answer store (quail/store/): stored answers are used, new ones kept
    __pydantic_config__ = {"extra": "forbid"}  # the worker refuses unknown keys (worker/protocol.py)

    @classmethod
    def none(cls) -> "Reuse":
        return cls(False, False, False, False, False)


@dataclass(frozen=True)
class Retain:
    """What an operator keeps of its documents' KV, for whom, and how likely they read it."""

    consumers: frozenset[str] | None = None  # later operators that may claim it; None: until cleared
    passed: float = 1.0  # probability of reuse of a kept document (for a filter: one that passed)
    failed: float = 0.0  # a filter's failing documents: kept only when a consumer reads the filter's input
    owner: str | None = None  # the operator (scoped) that reads them now: a document it took is not kept again for it
