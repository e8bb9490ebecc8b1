"""Answers found in the answer store (quail/answer_store.py), in an operator's accounting: the
prompts they stand for are counted as computed from scratch would count them, and as reused by
the `answers` mechanism, so computed + reused = naive holds with them."""

from collections.abc import Mapping

from quail.executor.stats import Stats


def credit_stored(stats: Stats, prompts: list[tuple[int, str | None]]) -> None:
    """prompts: (tokens, step) of each prompt a stored answer stood for."""
    for tokens, step in prompts:
        stats.tokens_naive += tokens
        stats.tokens_reused["answers"] += tokens
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
