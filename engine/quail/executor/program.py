"""What a program is: a generator over one document (or anchor) that yields `Extend` requests and
receives, for each, the log-probs it asked to read. The ops build programs; the scheduler runs them."""

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from quail.executor.retention_pool import document_key
from quail.executor.sequence import Seq
from quail.executor.stats import StepStats

Reads = list[np.ndarray]
ProgramGen = Generator[list["Extend"], list[Reads], Any]


@dataclass
class Extend:
    """Append `tokens` to `seq` and read next-token log-probs of `ids` at each (offset, ids).

    `prompt`: the sequence after this request is a prompt a from-scratch run would evaluate.
    `n_document`: how many leading tokens are document text (the rest count as question tokens).
    `writes`: its last read chooses a token the program writes (an extract's or a map's); a request
    that is not a prompt then feeds back the token written before, which is counted as written, not
    as a prompt's. Reading `ALL` ids reads the whole vocabulary. `pool`: offsets of `tokens` whose
    hidden states are averaged into the row's vector (LlamaModel.vector_layer), read after the reads.
    """

    seq: Seq
    tokens: list[int]
    reads: list[tuple[int, list[int] | None]] = field(default_factory=list)
    n_document: int = 0
    prompt: bool = True
    step: str | None = None
    writes: bool = False
    pool: range | None = None


ALL = None  # the ids a read reads: every one


@dataclass
class Program:
    # receives a sequence already holding a prefix of `doc` (retained or shared KV), or None
    start: Callable[[Seq | None], ProgramGen]
    pages: int  # the most pages the program holds at any time
    doc: list[int] | None = None  # its document: the key for retention, sharing and duplicates
    rows: int = 1  # progress units it completes

    @cached_property  # a hash of the whole document; read by dedup, admission and claims
    def key(self) -> str | None:
        return None if self.doc is None else document_key(self.doc)


def program_pages(pages_for: Callable[[int], int], rewind: bool, head: int, tail: int, n: int) -> int:
    """The most pages a program holds at once. Rewinding: a head of `head` tokens kept across its
    prompts, and `n` forks of it at once of at most `tail` tokens each (a fork may copy the head's
    partial last page). From scratch: `n` prompts at once of `head` + `tail` tokens each, and one
    page more, which a fork of a reused base may copy."""
    if rewind:
        return pages_for(head) + n * (1 + pages_for(tail))
    return n * pages_for(head + tail) + 1


@dataclass
class Outcome:
    results: list
    naive: list[StepStats]  # per program: the tokens and prompts a from-scratch run evaluates
    naive_steps: list[dict[str, StepStats]]
