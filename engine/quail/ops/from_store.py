"""Answers found in the answer store (quail/store/), in an operator's accounting: the
prompts they stand for are counted as computed from scratch would count them, and as reused by
the `answers` mechanism, so computed + reused = naive holds with them."""

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from quail.executor.stats import Stats

T = TypeVar("T")


def with_stored(n: int, stored: Mapping[int, T], compute: Callable[[list[int]], tuple[list[T], Stats]],
                prompts: Callable[[int], Iterable[tuple[int, str | None]]],
                progress: Callable[[int, int], None] | None = None) -> tuple[list[T], Stats]:
    """Any kind's run over `n` rows of which the store answers `stored`: `compute` runs the kind's
    programs over the others (their indices, in order); the answers come back in row order, and
    each stored answer's `prompts` (tokens, step) are credited as reused."""
    computed, stats = compute([i for i in range(n) if i not in stored])
    credit_stored(stats, [p for i in stored for p in prompts(i)])
    if progress is not None:
        progress(len(stored), 0)
    return merge(n, stored, computed), stats


def credit_stored(stats: Stats, prompts: list[tuple[int, str | None]]) -> None:
    """prompts: (tokens, step) of each prompt a stored answer stood for."""
    for tokens, step in prompts:
        stats.tokens_naive += tokens
        stats.tokens_reused["store"] += tokens
        if (s := stats.step(step)) is not None:
            s.tokens_naive += tokens
            s.prompts += 1


def merge(n: int, stored: Mapping[int, object], computed: list) -> list:
    """Per row in order: its stored answer, else the next computed one (the computed rows may stop
    early, at a row limit)."""
    out, it = [], iter(computed)
    for i in range(n):
        if i in stored:
            out.append(stored[i])
        elif (x := next(it, None)) is not None:
            out.append(x)
        else:
            break
    return out
