"""What an extract and a map share, below the planner: one prompt per row after the document, then
what the model writes, at most max_new_tokens (its default applied here alone); the columns their
output carries besides what they write; and the answer store's key of a written output."""

import argparse
from typing import Annotated

from pydantic import BeforeValidator, ValidationInfo

from quail.kinds.base import Key, OperatorKind, OperatorTokens
from quail.specs import OperatorSpec

DEFAULT_MAX_NEW_TOKENS = 256
RESERVED = ("row", "truncated", "invalid")  # columns the answers carry besides what is written


def most_written(max_new_tokens: int | None) -> int:
    """The most tokens a row writes: max_new_tokens where given, else the default."""
    return max_new_tokens or DEFAULT_MAX_NEW_TOKENS


def _tokens(value: object, info: ValidationInfo) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{info.field_name!r} must be a whole number of tokens, got {value!r}")
    return value


NewTokens = Annotated[int | None, BeforeValidator(_tokens)]


def check_writing(max_new_tokens: int | None) -> None:
    """What an extract and a map both refuse: a budget of no tokens."""
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")


def add_max_new_tokens(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, help=f"the most tokens written per row (default "
                                                      f"{DEFAULT_MAX_NEW_TOKENS})")


def keys(key: Key, asked: str, docs: list[list[int]]) -> list[list[bytes]]:
    """The answer store's key of each document's written output (one a row); `asked` names the kind,
    its prompt and what bounds its writing (kinds/extract.py, kinds/map.py `asked`)."""
    return [[key(asked, d)] for d in docs]


class Writes(OperatorKind):
    """An extract or a map: one prompt per row after the document, then what it writes."""

    def asks_more_than_once(self, spec: OperatorSpec) -> bool:
        return False

    def written(self, docs: list[list[int]], question: list[int], spec: OperatorSpec) -> OperatorTokens:
        return OperatorTokens(docs, [len(question)], written=spec.max_new_tokens or 0)

    def prompts(self, t: OperatorTokens, selectivity: float | None) -> tuple[list[tuple[float, int]], int]:
        return [(1.0, t.questions[0])], 0
