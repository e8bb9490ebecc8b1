"""The answer store around any kind's op (design.md, "The answer store"): the answers it holds are
looked up, the op runs with them as known and computes only the rest, and the new ones are stored.
A kind says what its answers are keyed by (kinds/<kind>.py `keys`) and how they are kept (its
`Answers`, beside its op in ops/<kind>.py); this is the one place that looks up and stores."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from quail.executor.stats import Stats
from quail.kinds.base import Key
from quail.reuse import Retain, Reuse
from quail.store import Store, answer_key

if TYPE_CHECKING:
    from quail.executor.engine import Engine

Value = list[float]  # one stored answer: `width` probabilities, or a written output (store/values.py)
K = TypeVar("K", covariant=True)
R = TypeVar("R", contravariant=True)


class Answers(Protocol[K, R]):
    """How a kind's answers are kept: each value's width (store/values.py); a row's stored values
    (one per key, None where none is stored) as its op takes them; and a result's rows' values to
    store (one per key, None for none), in row order."""

    @property
    def width(self) -> int: ...

    def known(self, row: list[Value | None]) -> K: ...

    def values(self, result: R) -> Iterable[list[Value | None]]: ...


class Answered(Protocol):
    from_store: set[int]  # the rows answered from the store: nothing of theirs is stored again


A = TypeVar("A", bound=Answered)
Known = TypeVar("Known")


class YesNo:
    """Yes/no answers, a key each (a filter's predicates, a join's pairs): a stored value is its P(yes)."""

    width = 1

    def known(self, row: list[Value | None]) -> list[float | None]:
        return [None if v is None else v[0] for v in row]


@dataclass(frozen=True)
class Stored:
    """The answer store as one model uses it: every key names the model's identity."""

    store: Store
    model: str  # LoadedModel.identity

    def key(self, asked: str, document: list[int]) -> bytes:
        return answer_key(self.model, asked, document)

    def known(self, keys: list[list[bytes]], answers: Answers[Known, A],
              touch: bool = True) -> list[Known]:
        """Per row, its stored answers as its op takes them. `touch`: they count as used now."""
        found = self.store.get([k for row in keys for k in row], answers.width, touch)
        return [answers.known([found.get(k) for k in row]) for row in keys]


@dataclass(frozen=True)
class Run:
    """How one operator runs: on which engine, with which reuse, keeping which of its documents' KV
    for later operators, telling whom its progress, with which answer store (None: none)."""

    engine: "Engine"
    reuse: Reuse = Reuse()
    retain: Retain | None = None
    progress: Callable[[int, int], None] | None = None
    stored: Stored | None = None


def with_answers(stored: Stored | None, keys: Callable[[Key], list[list[bytes]]], answers: Answers[Known, A],
                 run: Callable[[list[Known] | None], tuple[A, Stats]]) -> tuple[A, Stats]:
    """`run` (the op, given per row what the store holds of it, or None to compute every row) with
    the answers `stored` holds under `keys` (the kind's, per row, given the store's key), keeping
    the new ones. Without a store, or with no key to look up, every row is computed."""
    rows = keys(stored.key) if stored is not None else []
    if stored is None or not any(rows):
        return run(None)
    result, stats = run(stored.known(rows, answers))
    stored.store.put((k, v) for i, values in enumerate(answers.values(result)) if i not in result.from_store
                     for k, v in zip(rows[i], values) if v is not None)
    return result, stats
